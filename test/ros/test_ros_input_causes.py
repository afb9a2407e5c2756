"""The likely causes /diagnostics names for a silent input or a topic without publishers,
read from a real DDS graph (two rclpy nodes in this process, on a private domain)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("rclpy")
from ros_domains import next_domain

from compactinst_ros.ros.diagnostics import health_status, input_causes

TOPIC = "/cam/image_raw"


def topic_of(kind: str) -> str:
    return TOPIC if kind == "raw" else f"{TOPIC}/{kind}"


@pytest.fixture
def graph():
    """(camera node, watching node): a context of their own on a private domain."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    camera = rclpy.create_node("camera", context=context)
    watcher = rclpy.create_node("watcher", context=context)
    yield camera, watcher
    camera.destroy_node()
    watcher.destroy_node()
    rclpy.shutdown(context=context)


def settled(predicate) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, "the graph did not show the publisher"
        time.sleep(0.05)


def test_a_compressed_only_camera_names_input_transport(graph) -> None:
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage

    camera, watcher = graph
    camera.create_publisher(CompressedImage, topic_of("compressed"), QoSProfile(depth=1))
    settled(lambda: watcher.count_publishers(topic_of("compressed")) == 1)
    missing, silent = input_causes(watcher, topic_of, {"raw": ReliabilityPolicy.BEST_EFFORT})
    assert missing == f"the camera publishes {TOPIC}/compressed: set input_transport:=compressed"
    assert silent == ""  # no publisher on the raw topic to be silent


def test_a_best_effort_camera_without_the_profile_names_it_and_qos(graph) -> None:
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    camera, watcher = graph
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
    camera.create_publisher(Image, TOPIC, qos)
    settled(lambda: watcher.count_publishers(TOPIC) == 1)
    reliable = {"raw": ReliabilityPolicy.RELIABLE}
    _, silent = input_causes(watcher, topic_of, reliable, env={})
    assert "shared-memory profile: export FASTDDS_DEFAULT_PROFILES_FILE=" in silent
    assert "fastdds_shm.xml" in silent and "input_reliability:=auto" in silent
    with_profile = {"FASTDDS_DEFAULT_PROFILES_FILE": "/opt/x/fastdds_shm.xml"}
    best_effort = {"raw": ReliabilityPolicy.BEST_EFFORT}
    _, silent = input_causes(watcher, topic_of, best_effort, with_profile)
    assert silent == ""
    report = {
        "new_errors": 0, "new_input_errors": 0, "new_qos_incompatible": 0, "input_age_s": None,
        "received": 0, "processed": 0, "dropped": 0, "idle": 0, "input_errors": 0, "errors": 0,
        "qos_incompatible": 0, "last_error": "", "error_reasons": {}, "input_rate_hz": 0.0,
        "output_rate_hz": 0.0, "timings_ms": {},
    }  # fmt: skip
    status = health_status("n", report, {}, 1, 1.0, True, causes=("", "the profile"))
    assert status.message == "input silent: publishers exist but no frames (likely: the profile)"


def test_two_nodes_of_one_name_are_warned_about(graph) -> None:
    import rclpy
    from rclpy.context import Context

    from compactinst_ros.ros.diagnostics import NamesakeCheck, namesake_warning

    camera, watcher = graph
    assert NamesakeCheck(camera)() is None
    context = Context()  # a second process's node, as a second launch would start it
    rclpy.init(context=context, domain_id=camera.context.get_domain_id())
    twin = rclpy.create_node("camera", context=context)
    try:
        settled(lambda: watcher.get_node_names_and_namespaces().count(("camera", "/")) == 2)
        warning = NamesakeCheck(camera)()
        assert warning is not None and warning.startswith("2 nodes are named /camera: ")
        assert "__node:=" in warning and warning == namesake_warning(watcher, "/camera")
    finally:
        twin.destroy_node()
        rclpy.shutdown(context=context)
