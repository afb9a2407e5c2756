"""Unit tests of the ROS shell's pieces: mailbox, worker, conversions, QoS matching, config."""

from __future__ import annotations

import array
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

pytest.importorskip("rclpy")
from rcl_interfaces.msg import ParameterType
from rclpy.qos import ReliabilityPolicy
from ros_messages import publisher_count, raster_from_image, table_from_msg
from std_msgs.msg import Header

from compactinst_ros.backends import BackendOptions
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.errors import ConfigError, InputError
from compactinst_ros.image_formats import compressed_image_size
from compactinst_ros.ros import convert
from compactinst_ros.ros.params import (
    PARAMETERS,
    check_topic,
    descriptor,
    read_config,
    ros_param_text,
)
from compactinst_ros.ros.publishers import output_set
from compactinst_ros.ros.qos import matched_reliability
from compactinst_ros.ros.tool import typed_value
from compactinst_ros.ros.worker import Batcher, Finisher, Frame, Worker, running_mean
from compactinst_ros.structures import (
    RASTER_ENCODINGS,
    Instances,
    OutputSet,
    PostprocessOptions,
    Segments,
)


def test_mailbox_keeps_only_the_newest_frame():
    box = Batcher(1, 0.0)
    assert box.put(0, Frame("a", False)) is False
    assert box.put(0, Frame("b", False)) is True
    assert [f.msg for _, f in box.poll(0.0).frames] == ["b"]
    assert box.poll(1.0) is None
    box.put(0, Frame("c", False))
    box.close()
    assert box.take() is None


def test_worker_builds_and_closes_the_pipeline_on_its_own_thread():
    threads = {}

    class Owned:
        def __init__(self) -> None:
            threads["built"] = threading.get_ident()

        def close(self) -> None:
            threads["closed"] = threading.get_ident()

    seen = []
    worker = Worker(Owned, lambda p, r: seen.append((threading.get_ident(), r.frames[0][1].msg)))
    worker.start(5)
    worker.batcher.put(0, Frame("x", False))
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.stop(5)
    assert threads["built"] == threads["closed"] == seen[0][0] != threading.get_ident()


class Halved:
    """The part of a Pipeline the worker uses: whether its halves may run on two threads, its
    options, close (recorded)."""

    def __init__(self, splits: bool) -> None:
        self.splits_stages = splits
        self.options = None
        self.events: list[tuple[str, str, int]] = []

    def close(self) -> None:
        self.events.append(("close", "", threading.get_ident()))


def run_rounds(worker: Worker, frames: list[str], timeout: float = 10.0) -> None:
    """Put each frame once the worker has started the previous one, then stop the worker."""
    worker.start(5)
    events = worker.pipeline.events
    for msg in frames:
        worker.batcher.put(0, Frame(msg, False))
        deadline = time.monotonic() + timeout
        while not any(e[:2] == ("start", msg) for e in events) and time.monotonic() < deadline:
            time.sleep(0.005)
    assert worker.stop(timeout)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_staged_worker_finishes_on_a_second_thread_while_the_next_round_starts(overlap):
    """With overlap, round b starts while round a is still finishing (a's finish waits for b's
    start); without it, each round ends before the next starts. Both keep the order, finish what
    was handed over before stop returns, and close the pipeline on the worker thread."""
    pipeline = Halved(splits=True)
    b_started = threading.Event()

    def start(p: Halved, r) -> str:
        msg = r.frames[0][1].msg
        p.events.append(("start", msg, threading.get_ident()))
        if msg == "b":
            b_started.set()
        return msg

    def finish(p: Halved, msg: str) -> None:
        if msg == "a":
            p.events.append(("overlapped", str(b_started.wait(1.0 if overlap else 0.2)), 0))
        p.events.append(("finish", msg, threading.get_ident()))

    worker = Worker(lambda: pipeline, start, finish, overlap=overlap)
    run_rounds(worker, ["a", "b", "c"])
    assert worker.staged is overlap
    events = pipeline.events
    assert [e[1] for e in events if e[0] == "finish"] == ["a", "b", "c"]
    assert ("overlapped", str(overlap), 0) in events
    assert events[-1][0] == "close"
    starter = {e[2] for e in events if e[0] in ("start", "close")}
    finisher = {e[2] for e in events if e[0] == "finish"}
    assert len(starter) == len(finisher) == 1
    assert (starter != finisher) is overlap


def test_a_worker_runs_both_halves_on_its_thread_where_the_pipeline_does_not_split():
    pipeline = Halved(splits=False)

    def start(p: Halved, r) -> str:
        p.events.append(("start", r.frames[0][1].msg, threading.get_ident()))
        return r.frames[0][1].msg

    worker = Worker(
        lambda: pipeline,
        start,
        lambda p, msg: p.events.append(("finish", msg, threading.get_ident())),
        overlap=True,
    )
    run_rounds(worker, ["a"])
    assert worker.staged is False
    assert [e[0] for e in pipeline.events] == ["start", "finish", "close"]
    assert len({e[2] for e in pipeline.events}) == 1


def test_the_finisher_takes_one_round_at_a_time_and_predicts_its_end():
    """A hand-over waits while a round is being finished (two rounds in flight at most), and
    free_in counts down from the running mean of the rounds' durations."""
    gate = threading.Event()
    done: list[str] = []

    def finish(msg: str) -> None:
        gate.wait(5)
        done.append(msg)

    finisher = Finisher(finish, "test_finisher")
    assert finisher.free_in() == 0.0
    finisher.put("a")
    second = threading.Thread(target=finisher.put, args=("b",))
    second.start()
    time.sleep(0.2)
    assert second.is_alive() and done == []  # b waits for a
    gate.set()
    second.join(5)
    deadline = time.monotonic() + 5
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == ["a", "b"] and finisher.mean_s is not None and finisher.mean_s > 0.02
    gate.clear()
    finisher.put("c")
    time.sleep(0.05)
    left = finisher.free_in()
    assert 0.0 <= left < finisher.mean_s
    gate.set()
    finisher.close()
    assert done == ["a", "b", "c"]
    assert running_mean(None, 2.0) == 2.0 and running_mean(2.0, 1.0) == pytest.approx(1.8)


def test_worker_start_reraises_the_load_error():
    def fail() -> None:
        raise ConfigError("bad bundle")

    with pytest.raises(ConfigError, match="bad bundle"):
        Worker(fail, lambda p, r: None).start(5)


@pytest.mark.parametrize("ext", [".png", ".jpg"])
def test_compressed_size_is_read_from_the_header(ext):
    ok, data = cv2.imencode(ext, np.zeros((37, 53, 3), np.uint8))
    assert ok
    assert compressed_image_size(data.tobytes(), ext[1:].replace("jpg", "jpeg")) == (37, 53)
    msg = SimpleNamespace(data=data.tobytes(), format=ext[1:])
    image, encoding = convert.image_from_compressed(msg)
    assert image.shape == (37, 53, 3) and encoding == "bgr8"


def test_oversized_png_is_refused_before_decoding():
    _ok, data = cv2.imencode(".png", np.zeros((8, 8), np.uint8))
    raw = bytearray(data.tobytes())
    raw[16:24] = (50000).to_bytes(4, "big") + (50000).to_bytes(4, "big")
    with pytest.raises(InputError, match="side limit"):
        convert.image_from_compressed(SimpleNamespace(data=bytes(raw), format="png"))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32])
def test_raster_round_trip(dtype):
    raster = (np.arange(6 * 7).reshape(6, 7) * 1000 % np.iinfo(dtype).max).astype(dtype)
    header = Header(frame_id="cam")
    msg = convert.image_msg(raster, header)
    assert msg.encoding == RASTER_ENCODINGS[np.dtype(dtype)]
    assert msg.step == 7 * raster.itemsize and msg.header.frame_id == "cam"
    np.testing.assert_array_equal(raster_from_image(msg), raster)


def test_made_rasters_go_into_messages_without_a_copy_and_others_are_copied():
    """Post-processing's compiled rasters and the tracker's remapped one become Image data as
    they are; a numpy raster or a part of a message raster is copied; the bytes agree always."""
    from compactinst_ros.labels import SYNTHETIC_LABELS
    from compactinst_ros.postprocess import compiled
    from compactinst_ros.postprocess.fast import fast_postprocess
    from compactinst_ros.raster_memory import message_raster
    from compactinst_ros.structures import FrameMeta, RawOutputs
    from compactinst_ros.tracking import remap_ids

    rng = np.random.default_rng(3)
    meta = FrameMeta.letterbox(90, 170, 64, 128)
    raw = RawOutputs(
        rng.normal(0, 3, (12, 9)).astype(np.float32),
        rng.normal(0, 4, (12, 8, 16)).astype(np.float32),
        8,
    )
    result = fast_postprocess(raw, meta, SYNTHETIC_LABELS, PostprocessOptions(), OutputSet())
    ids = result.instances.ids
    made = {
        "semantic": result.semantic_raster,
        "remapped": remap_ids(result.instance_raster, ids, (ids + 40).astype(np.uint16)),
        "zeros": message_raster((5, 7), np.int32),
    }
    if compiled.AVAILABLE:  # numpy's fallback composes by np.repeat: copied at publishing
        made |= {"instance": result.instance_raster, "panoptic": result.panoptic_raster}
    for name, raster in made.items():
        msg = convert.image_msg(raster, Header())
        data = np.frombuffer(msg.data, raster.dtype).reshape(raster.shape)
        assert np.shares_memory(data, raster), name
        np.testing.assert_array_equal(raster_from_image(msg), raster, err_msg=name)
    whole = made["remapped"]
    for name, raster in {"numpy": whole.copy(), "rows": whole[2:], "columns": whole[:, 1:]}.items():
        msg = convert.image_msg(raster, Header())
        assert not np.shares_memory(np.frombuffer(msg.data, np.uint8), raster), name
        np.testing.assert_array_equal(raster_from_image(msg), raster, err_msg=name)


def test_tables_round_trip():
    inst = Instances(
        ids=np.array([1, 2], np.uint16),
        class_index=np.array([0, 3], np.int32),
        label_id=np.array([1, 4], np.int32),
        score=np.array([0.9, 0.4], np.float32),
        box=np.array([[0, 1, 5, 6], [2, 2, 4, 9]], np.float32),
        area=np.array([20, 11], np.int64),
    )
    table = table_from_msg(convert.instance_table_msg(Header(), inst))
    assert table["id"].tolist() == [1, 2] and table["label_id"].tolist() == [1, 4]
    assert table["x1"].tolist() == [5, 4] and table["area"].tolist() == [20, 11]
    seg = Segments(
        ids=np.array([5, 1001], np.int32),
        label_id=np.array([5, 1], np.int32),
        isthing=np.array([False, True]),
        score=np.array([0.8, 0.7], np.float32),
        area=np.array([3, 4], np.int64),
    )
    table = table_from_msg(convert.segment_table_msg(Header(), seg))
    assert table["id"].tolist() == [5, 1001] and table["isthing"].tolist() == [0, 1]
    assert len(table_from_msg(convert.instance_table_msg(Header(), Instances.empty()))) == 0


def test_image_view_honours_step_padding():
    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    padded = np.concatenate([pixels.reshape(4, 15), np.zeros((4, 3), np.uint8)], axis=1)
    msg = SimpleNamespace(
        data=padded.tobytes(), height=4, width=5, step=18, encoding="BGR8", is_bigendian=0
    )
    image, encoding = convert.image_from_msg(msg)
    assert encoding == "bgr8"
    np.testing.assert_array_equal(image, pixels)


def _info(rel: ReliabilityPolicy) -> SimpleNamespace:
    return SimpleNamespace(qos_profile=SimpleNamespace(reliability=rel))


def test_matched_reliability():
    assert matched_reliability([]) is None
    assert matched_reliability([_info(ReliabilityPolicy.RELIABLE)]) == ReliabilityPolicy.RELIABLE
    mixed = [_info(ReliabilityPolicy.RELIABLE), _info(ReliabilityPolicy.BEST_EFFORT)]
    assert matched_reliability(mixed) == ReliabilityPolicy.BEST_EFFORT


def test_invalid_choices_fail_with_the_parameter_name():
    values = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
    with pytest.raises(ConfigError, match="input_reliability"):
        read_config(values | {"input_reliability": "sometimes"})
    with pytest.raises(ConfigError, match="outputs"):
        read_config(values | {"outputs": ["instance_mask", "depth"]})
    with pytest.raises(ConfigError, match="max_instances"):
        read_config(values | {"max_instances": 0})


def test_invalid_image_topic_is_a_config_error_naming_the_parameter():
    node = SimpleNamespace(get_name=lambda: "compactinst", get_namespace=lambda: "/robot")
    assert check_topic(node, "image") == "/robot/image"
    assert check_topic(node, "~/in") == "/robot/compactinst/in"
    for bad in ("bad topic!", "/a//b", "", "image/"):
        with pytest.raises(ConfigError, match="image_topic"):
            check_topic(node, bad)


def test_default_model_lookup_survives_a_missing_ament_prefix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    found = default_bundle_path()  # pip install without a sourced workspace: no OSError
    assert found == Path(__file__).resolve().parents[2] / "models" / "default"


def test_publisher_count_falls_back_to_the_graph_on_humble():
    node = SimpleNamespace(count_publishers=lambda topic: {"/in": 2}.get(topic, 0))
    humble_sub = SimpleNamespace(topic_name="/in")  # no get_publisher_count before Iron
    assert publisher_count(node, humble_sub) == 2
    iron_sub = SimpleNamespace(topic_name="/in", get_publisher_count=lambda: 1)
    assert publisher_count(node, iron_sub) == 1


def test_type_hints_in_parameter_errors_use_command_line_syntax():
    assert ros_param_text(0.3) == "0.3" and ros_param_text(2.0) == "2.0"  # a double, never "2"
    assert ros_param_text(True) == "true" and ros_param_text(7) == "7"
    assert ros_param_text("") == "''"
    assert ros_param_text(["overlay", "semantic"]) == "[overlay,semantic]"
    assert ros_param_text(["/a/info", ""]) == "[/a/info,'']"  # an empty item survives rcl


def test_option_parameters_take_default_and_range_from_postprocess_options():
    """One range per option: the descriptors rclpy enforces are PostprocessOptions.BOUNDS."""
    defaults = PostprocessOptions()
    for name, (low, high, _) in PostprocessOptions.BOUNDS.items():
        spec = PARAMETERS[name]
        assert spec.default == getattr(defaults, name) and spec.bounds == (low, high), name
        ranges = descriptor(name, spec)
        (limits,) = ranges.integer_range or ranges.floating_point_range
        assert (limits.from_value, limits.to_value) == (low, high), name
    assert PARAMETERS["mask_threshold"].bounds == (0.01, 0.99)


def test_read_config_makes_the_typed_options():
    values = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
    config = read_config(values)
    assert config.options == PostprocessOptions()
    # 0 threads, "" cache = defaults; errors advise node parameters
    assert config.backend_options == BackendOptions(settings="node")
    changed = values | {"ort_threads": 2, "gpu_device": 1, "engine_cache_dir": "/c"}
    config = read_config(changed | {"allow_engine_build": False, "overlay_alpha": 0.25})
    assert config.backend_options == BackendOptions(
        threads=2, device=1, engine_cache_dir="/c", allow_build=False, settings="node"
    )
    assert config.options.overlay_alpha == 0.25


def test_precision_parameter_picks_the_backends_graphs():
    """auto leaves the backend its default; fp32/fp16/int8 reach BackendOptions; others fail."""
    values = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
    assert values["precision"] == "auto"
    assert read_config(values).backend_options.precision is None
    for precision in ("fp32", "fp16", "int8"):
        config = read_config(values | {"precision": precision})
        assert config.backend_options.precision == precision
    with pytest.raises(ConfigError, match=r"precision='fp64' is invalid; choose one of \['auto'"):
        read_config(values | {"precision": "fp64"})


def test_output_set_follows_the_subscribed_outputs():
    """The overlay alone asks for the overlay only: the Pipeline adds the instance raster."""
    assert output_set({}) == OutputSet(False, False, False, False)
    assert output_set({"overlay": True}) == OutputSet(False, False, False, True)
    assert output_set({"detections": True}).instance
    assert output_set({"instance_table": True}) == OutputSet(True, False, False, False)
    assert output_set({"panoptic_segments": True}) == OutputSet(False, True, False, False)
    assert output_set({"semantic": True, "latency": True}) == OutputSet(False, False, True, False)


def test_tool_values_take_the_parameters_type():
    """``compactinst ros param-set`` text -> the parameter's type; a mismatch names the type."""
    assert typed_value("1", ParameterType.PARAMETER_DOUBLE) == 1.0
    assert isinstance(typed_value("1", ParameterType.PARAMETER_DOUBLE), float)
    assert typed_value("3", ParameterType.PARAMETER_INTEGER) == 3
    assert typed_value("false", ParameterType.PARAMETER_BOOL) is False
    assert typed_value("0.5", ParameterType.PARAMETER_STRING) == "0.5"
    arrays = typed_value("[overlay, 1]", ParameterType.PARAMETER_STRING_ARRAY)
    assert arrays == ["overlay", "1"]
    for text, kind, name in (
        ("high", ParameterType.PARAMETER_DOUBLE, "double"),
        ("1.5", ParameterType.PARAMETER_INTEGER, "integer"),
        ("[a: b", ParameterType.PARAMETER_STRING_ARRAY, "string_array"),
    ):
        with pytest.raises(ConfigError, match=f"value '.*' is not a {name}, the parameter's type"):
            typed_value(text, kind)


def test_table_reader_follows_the_messages_byte_order():
    """A big-endian table (another host's) decodes to the same values."""
    inst = Instances(
        ids=np.array([1, 2], np.uint16),
        class_index=np.array([0, 3], np.int32),
        label_id=np.array([1, 4], np.int32),
        score=np.array([0.9, 0.5], np.float32),
        box=np.array([[0, 1, 5, 6], [2, 2, 9, 9]], np.float32),
        area=np.array([25, 49], np.int64),
    )
    little = convert.instance_table_msg(Header(), inst)
    big = convert.instance_table_msg(Header(), inst)
    big.is_bigendian = True
    rows = np.frombuffer(bytes(little.data), convert.INSTANCE_TABLE)
    big.data = array.array("B", rows.astype(convert.INSTANCE_TABLE.newbyteorder(">")).tobytes())
    for name in convert.INSTANCE_TABLE.names:
        assert table_from_msg(big)[name].tolist() == table_from_msg(little)[name].tolist(), name


def test_the_3d_off_warning_lists_every_output_it_turns_off() -> None:
    """It named only ~/detections_3d, though the markers, the labelled cloud and the distance
    captions go with it."""
    from compactinst_ros.ros.camera import three_d_off

    depth = three_d_off("vision_msgs", cloud=False)
    for output in ("~/detections_3d", "~/markers_3d", "distance captions of ~/overlay"):
        assert output in depth
    assert "~/cloud_labelled" not in depth and "ros-<distro>-vision-msgs" in depth
    cloud = three_d_off("tf2_msgs", cloud=True)
    assert "~/cloud_labelled" in cloud and "cannot be placed in the camera" in cloud
    assert "ros-<distro>-tf2-msgs" in cloud and "compactinst ros build-interfaces" in cloud
