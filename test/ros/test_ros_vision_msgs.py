"""The node's vision_msgs outputs (~/detections, ~/label_info) with a real vision_msgs build.

vision_msgs has no wheel: ``interface_build`` compiles the 4.1.x definitions once into a
cache prefix, and the node runs with that prefix on its paths.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import numpy as np
import pytest
from interface_build import VISION_MSGS, built_for_test
from ros_domains import next_domain
from ros_harness import REPO, Client, NodeProcess
from ros_messages import raster_from_image, table_from_msg
from test_ros_node import image_msg, scene

from compactinst_ros.bundle import ModelBundle

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, PointCloud2
from std_msgs.msg import Header

#: a cold run compiles the messages (about 20-30 s on 2 cores); cached runs take about 5 s
pytestmark = pytest.mark.slow

NS = "/compactinst"
TOPIC = "/cam/vision_image"
SCORE_THRESHOLD = 0.0


@pytest.fixture(scope="session")
def vision_msgs_prefix(request: pytest.FixtureRequest):
    """The built vision_msgs prefix (cached across runs); skips only if the toolchain is missing."""
    return built_for_test(VISION_MSGS, request)


@pytest.fixture(scope="module")
def vision(vision_msgs_prefix, random_bundle):
    """(vision_msgs.msg module, client, image publisher, labels) with the node running."""
    with vision_msgs_prefix.activated():
        msgs = importlib.import_module("vision_msgs.msg")
        # the test build, or the one `compactinst ros build-interfaces` installed into this venv
        homes = (str(vision_msgs_prefix.root), sys.prefix)
        assert msgs.__file__.startswith(homes), msgs.__file__
        domain = next_domain()
        node = NodeProcess(
            domain,
            {
                "model": random_bundle,
                "backend": "onnxruntime",
                "ort_threads": 1,
                "score_threshold": SCORE_THRESHOLD,
                "max_instances": 20,
                "image_topic": TOPIC,
                "outputs": ["detections", "instance_mask", "instance_table"],
                "diagnostics_period": 0.25,
            },
        )
        client = Client(domain)
        try:
            reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            client.subscribe(msgs.Detection2DArray, f"{NS}/detections", reliable)
            client.subscribe(Image, f"{NS}/instance_mask", reliable)
            client.subscribe(PointCloud2, f"{NS}/instance_table", reliable)
            client.subscribe(DiagnosticArray, "/diagnostics")
            raw = client.publisher(Image, TOPIC)
            # The node reports the publishers' reliability once it has discovered ours: only
            # then is a frame sure to reach it.
            client.wait_for(
                lambda: client.latest_diagnostics().get("input_reliability") == "raw=reliable",
                60,
                f"the node subscribed to our reliable publisher (log {node.log_path})",
            )
            client.wait_for(
                lambda: all(client.matched(topic) for topic in client.subs),
                20,
                f"the node's output publishers (log {node.log_path})",
            )
            yield msgs, client, raw, ModelBundle.load(random_bundle).labels
        finally:
            client.close()
            code = node.stop()
            assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"
            assert "vision_msgs is not installed" not in node.log()


def test_detections_match_the_instance_raster_and_table(vision):
    msgs, client, raw, _ = vision
    msg = image_msg(scene(120, 160, 7), "bgr8")
    msg.header.stamp.nanosec = 123456
    raw.publish(msg)
    sec = msg.header.stamp.sec
    topics = (f"{NS}/detections", f"{NS}/instance_mask", f"{NS}/instance_table")
    client.wait_for(lambda: all(client.stamped(t, sec) for t in topics), 30, "outputs")
    dets = client.stamped(topics[0], sec)
    raster = raster_from_image(client.stamped(topics[1], sec))
    table = table_from_msg(client.stamped(topics[2], sec))

    assert isinstance(dets, msgs.Detection2DArray)
    assert (dets.header.stamp.sec, dets.header.stamp.nanosec) == (sec, 123456)
    assert dets.header.frame_id == msg.header.frame_id
    assert len(dets.detections) > 0, "the random model at score_threshold 0 must yield instances"
    raster_ids = set(np.unique(raster[raster > 0]).tolist())
    assert {int(d.id) for d in dets.detections} == raster_ids
    rows = {int(r["id"]): r for r in table}
    assert set(rows) == raster_ids
    for det in dets.detections:
        assert det.header.frame_id == msg.header.frame_id
        assert det.header.stamp.sec == sec
        ys, xs = np.nonzero(raster == int(det.id))
        x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
        box = det.bbox
        assert (box.size_x, box.size_y) == (x1 - x0, y1 - y0), det.id
        assert (box.center.position.x, box.center.position.y) == ((x0 + x1) / 2, (y0 + y1) / 2)
        assert box.center.theta == 0.0
        assert len(det.results) == 1
        hyp = det.results[0].hypothesis
        row = rows[int(det.id)]
        assert hyp.class_id == str(int(row["label_id"]))
        assert hyp.score == pytest.approx(float(row["score"]), rel=1e-6)
        assert hyp.score >= SCORE_THRESHOLD
    scores = [d.results[0].hypothesis.score for d in dets.detections]
    assert scores == sorted(scores, reverse=True), "detections come in raster-id (score) order"


def test_label_info_is_transient_local_with_every_label(vision):
    msgs, client, _, labels = vision
    topic = f"{NS}/label_info"
    client.subscribe(
        msgs.LabelInfo,
        topic,
        QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        ),
    )
    info = client.wait_for(lambda: client.received(topic), 20, "latched LabelInfo")[0]
    assert isinstance(info, msgs.LabelInfo)
    assert [(c.class_id, c.class_name) for c in info.class_map] == list(
        zip(labels.ids, labels.names, strict=True)
    )
    assert info.threshold == pytest.approx(SCORE_THRESHOLD)
    assert info.header.stamp.sec > 0


def vision_msgs_4_0(msgs: ModuleType) -> ModuleType:
    """The built vision_msgs.msg cut down to the messages of vision_msgs 4.0.0 (fixture from its
    upstream tag), each checked to have exactly 4.0.0's fields."""
    lines = (REPO / "test" / "fixtures" / "ros_api" / "vision_msgs-4.0.0.txt").read_text()
    fields: dict[str, set[str]] = {}
    for kind, name, *_ in (line.split() for line in lines.splitlines()[1:]):
        if kind == "class":
            fields[name.rpartition(".")[2]] = set()
        elif kind == "field":
            owner, _, field = name.rpartition(".")
            fields[owner.rpartition(".")[2]].add(field)
    view = ModuleType("vision_msgs.msg")
    for name, expected in fields.items():
        message = getattr(msgs, name)
        assert set(message.get_fields_and_field_types()) == expected, name
        setattr(view, name, message)
    return view


def test_vision_msgs_4_0_keeps_detections_and_turns_label_info_off_once(
    vision_msgs_prefix, random_bundle, capfd
):
    """Humble shipped vision_msgs 4.0.0, without LabelInfo, until February 2023."""
    import rclpy
    from rclpy.context import Context

    from compactinst_ros.ros.convert import detections_msg
    from compactinst_ros.ros.publishers import vision_publishers
    from compactinst_ros.structures import Instances

    labels = ModelBundle.load(random_bundle).labels
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    with vision_msgs_prefix.activated():
        msgs = importlib.import_module("vision_msgs.msg")
        old = vision_msgs_4_0(msgs)
        assert not hasattr(old, "LabelInfo") and hasattr(msgs, "LabelInfo")
        context = Context()
        rclpy.init(context=context, domain_id=next_domain())
        node = rclpy.create_node("vision_msgs_4_0", context=context)
        try:
            assert set(vision_publishers(node, msgs, labels, 0.3, qos)) == {
                "detections",
                "label_info",
            }
            first = vision_publishers(node, old, labels, 0.3, qos)
            second = vision_publishers(node, old, labels, 0.3, qos)  # a re-configure
            assert set(first) == set(second) == {"detections"}
            instances = Instances(
                ids=np.array([1], np.uint16),
                class_index=np.array([0], np.int32),
                label_id=np.array([labels.ids[0]], np.int32),
                score=np.array([0.9], np.float32),
                box=np.array([[2, 4, 12, 10]], np.float32),
                area=np.array([60], np.int64),
            )
            header = Header(frame_id="cam")
            dets = detections_msg(header, instances, old)
            first["detections"].publish(dets)
            assert dets.detections[0].bbox.center.position.x == 7.0
        finally:
            node.destroy_node()
            rclpy.try_shutdown(context=context)
    log = capfd.readouterr().err
    assert log.count("the installed vision_msgs has no LabelInfo") == 1, log
    assert "~/label_info is off, ~/detections works" in log


def test_build_interfaces_installs_both_3d_packages_into_a_prefix(
    vision_msgs_prefix, tmp_path, capsys
) -> None:
    """``compactinst ros build-interfaces --prefix P`` (cached builds, as the node's tests use)
    lays vision_msgs and tf2_msgs out as the ROS wheels lay out a venv; a fresh interpreter
    with that prefix on its paths serialises a Detection3DArray and a TFMessage through their
    type support."""
    import os
    import subprocess
    import sys

    from compactinst_ros.cli import main
    from compactinst_ros.ros.interfaces import InterfacePrefix

    assert main(["ros", "build-interfaces", "--prefix", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    site = InterfacePrefix(tmp_path, "vision_msgs").site_packages
    assert f"vision_msgs: {site / 'vision_msgs'}" in printed and "tf2_msgs:" in printed
    assert (tmp_path / "lib" / "libvision_msgs__rosidl_typesupport_c.so").is_file()
    env = InterfacePrefix(tmp_path, "vision_msgs").environment(dict(os.environ))
    code = (
        "from rclpy.serialization import serialize_message\n"
        "from vision_msgs.msg import Detection3DArray, Detection3D\n"
        "from tf2_msgs.msg import TFMessage\n"
        "m = Detection3DArray(detections=[Detection3D(id='7')])\n"
        "print(len(serialize_message(m)), len(serialize_message(TFMessage())))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert all(int(n) > 0 for n in done.stdout.split())
