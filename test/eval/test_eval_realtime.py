"""Realtime replay against the real node subprocess over ROS (DDS on loopback)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from eval_helpers import make_scenes, oracle_result, scene_bag
from ros_domains import next_domain

from compactinst_ros import dds_env
from compactinst_ros.errors import BackendError, ConfigError
from compactinst_ros.eval import realtime
from compactinst_ros.eval.bags import IMAGE, OUTPUT_NS, ImageBag
from compactinst_ros.eval.realtime import recorded_result, run_realtime


def test_realtime_reports_drops_when_the_node_is_slower_than_the_bag(random_bundle, tmp_path):
    scenes = make_scenes(16, 96, 128, seed=5)  # recorded at 10 Hz
    bag = scene_bag(scenes, tmp_path / "bag", "mcap")
    domain = next_domain()
    out_bag = tmp_path / "outputs"
    with ImageBag(bag) as b:
        block, facts = run_realtime(
            b,
            random_bundle,
            "onnxruntime",
            rate=20.0,
            output_bag=out_bag,
            warmup=1,
            progress=False,
            domain_id=domain,
            log_path=tmp_path / "node.log",
            drain_s=0.5,  # the counts need not be final: some frames processed, some dropped
            node_params={"ort_threads": "1", "diagnostics_period": "0.2"},
        )
    log = (tmp_path / "node.log").read_text()
    frames = block["frames"]
    assert frames["sent"] == 16, log
    assert 1 <= frames["processed"] < 16, (frames, log)
    assert frames["dropped"] == 16 - frames["processed"] > 0
    assert frames["drop_pct"] > 0
    assert block["throughput"]["target_input_fps"] == 200.0
    assert "end_to_end" in block["latency"] and "encoder" in block["latency"]
    assert block["latency"]["end_to_end"]["p50"] >= block["latency"]["encoder"]["p50"]
    assert facts["backend"] == "onnxruntime" and facts["model_fingerprint"]
    assert block["node_exit_code"] == 0, log
    with ImageBag(out_bag, "/compactinst/instance_mask") as outputs:
        assert outputs.count >= 1
        assert set(outputs.image_topics) >= {
            "/compactinst/instance_mask",
            "/camera/image_raw",  # the input keeps its recorded topic name
        }


def test_realtime_node_that_cannot_start_is_a_clear_error(tmp_path):
    scenes = make_scenes(2, 48, 64)
    bag = scene_bag(scenes, tmp_path / "bag", "sqlite3")
    broken = tmp_path / "broken_bundle"
    broken.mkdir()
    with ImageBag(bag) as b, pytest.raises(BackendError, match=r"exited with code 1 before") as err:
        run_realtime(
            b,
            broken,
            "onnxruntime",
            progress=False,
            domain_id=next_domain(),
            log_path=tmp_path / "node.log",
            ready_timeout=60,
        )
    assert "bundle.json is missing" in str(err.value)


def test_a_message_package_missing_for_the_3d_inputs_names_the_command_that_builds_it() -> None:
    # a pip install of ROS has no vision_msgs or tf2_msgs; a realtime replay of a LiDAR drive
    # with --gt-3d ended in a ModuleNotFoundError traceback
    with pytest.raises(ConfigError) as err:
        realtime._msg_class("compactinst_absent_msgs/msg/Detection3DArray")
    assert "compactinst ros build-interfaces" in str(err.value)
    assert "compactinst_absent_msgs/msg/Detection3DArray" in str(err.value)
    assert realtime._msg_class("sensor_msgs/msg/Image").__name__ == "Image"


def test_recorder_keeps_only_the_diagnostics_of_the_node_it_replays_to():
    """A vehicle's /compactinst on the same domain reports the same keys; the replay keeps only
    the reports of its own node (its namespace is unique, the status name says it)."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    from compactinst_ros.ros.diagnostics import status_name

    def report(node_name: str, received: int) -> DiagnosticArray:
        values = [KeyValue(key="frames_received", value=str(received))]
        status = DiagnosticStatus(name=status_name(node_name), values=values)
        return DiagnosticArray(status=[status])

    domain = dds_env.private_domain()
    realtime.use_in_this_process(realtime.ros_environment(domain))
    own = realtime.replay_namespace() + OUTPUT_NS
    assert own != OUTPUT_NS
    recorder = realtime.Recorder(domain, IMAGE, None, (), node_name=own)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    vehicle = rclpy.create_node("vehicle_diagnostics", context=context)
    try:
        pub = vehicle.create_publisher(DiagnosticArray, "/diagnostics", 10)
        deadline = time.monotonic() + 20
        while len(recorder.diagnostics) < 3 and time.monotonic() < deadline:
            pub.publish(report(OUTPUT_NS, 999))  # the vehicle's node, default name
            pub.publish(report(own, 1))
            time.sleep(0.05)
        with recorder.lock:
            kept = [d["frames_received"] for d in recorder.diagnostics]
    finally:
        vehicle.destroy_node()
        rclpy.try_shutdown(context=context)
        recorder.close()
    assert len(kept) >= 3 and set(kept) == {"1"}, kept


def test_the_published_outputs_give_back_the_result_they_came_from() -> None:
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Header

    from compactinst_ros.ros import convert

    scene = make_scenes(1, 48, 64, seed=3)[0]
    result = oracle_result(scene)
    header = Header()
    outputs = {
        "instance_mask": convert.image_msg(result.instance_raster, header),
        "panoptic": convert.image_msg(result.panoptic_raster, header),
        "semantic": convert.image_msg(result.semantic_raster, header),
        "instance_table": convert.instance_table_msg(header, result.instances),
    }
    back = recorded_result({k: serialize_message(m) for k, m in outputs.items()})
    np.testing.assert_array_equal(back.instance_raster, result.instance_raster)
    np.testing.assert_array_equal(back.panoptic_raster, result.panoptic_raster)
    np.testing.assert_array_equal(back.semantic_raster, result.semantic_raster)
    for name in ("ids", "label_id", "score", "box", "area"):
        np.testing.assert_array_equal(
            getattr(back.instances, name), getattr(result.instances, name)
        )

    def labels(s) -> dict:
        return dict(zip(s.ids.tolist(), s.label_id.tolist(), strict=True))

    assert labels(back.segments) == labels(result.segments)
    assert (back.meta.src_h, back.meta.src_w) == scene.panoptic.shape


def test_realtime_names_the_frames_the_node_refused_and_their_reason(
    random_bundle, tmp_path, capsys
):
    """The first frame is whole (the bag opens), the others lack half their pixels: the node
    refuses them, and the report says so with the node's own reason, not the queue's drops.
    The progress line ends with the processed count the summary gives."""
    from compactinst_ros.eval.bags import BagWriter, image_message

    scenes = make_scenes(5, 48, 64, seed=3)
    with BagWriter(tmp_path / "bag") as writer:
        for k, scene in enumerate(scenes):
            msg = image_message(scene.image, "bgr8", scene.stamp_ns)
            if k:
                msg.data = msg.data[: len(msg.data) // 2]
            writer.write("/camera/image_raw", IMAGE, scene.stamp_ns, msg)
    with ImageBag(tmp_path / "bag") as b:
        block, facts = run_realtime(
            b,
            random_bundle,
            "onnxruntime",
            domain_id=next_domain(),
            log_path=tmp_path / "node.log",
            drain_s=0.5,  # refusals come in the node's report, awaited after the drain
            node_params={"ort_threads": "1", "diagnostics_period": "0.2"},
        )
    log = (tmp_path / "node.log").read_text()
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert last_line.endswith(f"  {block['frames']['processed']} processed"), last_line
    refused = block["frames"].get("node_refused")  # some of the 4 may be replaced in the queue
    assert block["frames"]["processed"] <= 1 and refused and refused >= 1, (block["frames"], log)
    refusal = block["notes"][0]
    assert refusal.startswith(f"the node refused {refused} frame(s) (not the queue's drops): ")
    assert "fewer than height x step" in refusal, refusal  # the node's reason, from its report
    assert facts["precision"] == "fp32", facts  # as the node runs it, not "unknown"


def test_the_output_bag_keeps_the_input_s_recorded_topic(tmp_path) -> None:
    """The player publishes on its own topic, but the output bag records the input under the
    recorded bag's topic, so that it replays as the input bag did."""
    from compactinst_ros.eval.bags import open_output_bag

    bag = scene_bag(make_scenes(2, 48, 64), tmp_path / "bag", "mcap")
    writer = open_output_bag(tmp_path / "out")
    with ImageBag(bag) as b:
        recorder = realtime.Recorder(
            next_domain(),
            b.msgtype,
            writer,
            realtime.RASTERS,
            bag_topics=(b.topic, b.camera_info_topic),
        )
        try:
            for frame in b.frames():
                recorder.publish(frame)
        finally:
            recorder.close()
            writer.close()
    with ImageBag(tmp_path / "out") as outputs:
        assert outputs.image_topics == ["/camera/image_raw"] and outputs.count == 2


def test_ctrl_c_during_a_realtime_replay_writes_a_partial_report(random_bundle, tmp_path):
    """Ctrl-C while the bag plays: the report of the frames sent so far, marked partial, the
    node stopped, exit 130."""
    import _thread
    import contextlib
    import io
    import json

    from compactinst_ros.cli import main

    class InterruptOn(io.StringIO):
        pressed = False

        def write(self, text: str) -> int:
            written = super().write(text)
            if "realtime x1: 1/10" in text and not self.pressed:  # once, as one Ctrl-C
                self.pressed = True
                _thread.interrupt_main()
            return written

    bag = scene_bag(make_scenes(10, 48, 64, seed=2), tmp_path / "bag", "mcap")
    out = tmp_path / "out"
    args = ["replay", str(bag), "--model", str(random_bundle), "--backend", "onnxruntime",
            "--mode", "realtime", "--out", str(out), "--no-plots",
            "--domain", str(next_domain())]  # fmt: skip
    err = InterruptOn()
    err.isatty = lambda: True  # a terminal: every progress update is drawn
    with contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 130, err.getvalue()
    assert (out / "report.json").is_file(), err.getvalue()
    report = json.loads((out / "report.json").read_text())
    block = report["modes"]["realtime"]
    assert report["partial"] is True and block["partial"] is True
    assert 1 <= block["frames"]["sent"] < 10 and block["node_exit_code"] is not None
    assert "interrupted (Ctrl-C) after" in " ".join(block["notes"])
