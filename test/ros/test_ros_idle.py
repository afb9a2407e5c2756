"""No cost when nobody listens: the node drops its input subscription without output subscribers
and takes it again when one appears (real DDS, node subprocess)."""

from __future__ import annotations

import threading

import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params
from test_ros_node import image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CameraInfo, Image

NS = "/compactinst"
TOPIC = "/idle/image"
INFO_TOPIC = "/idle/camera_info"


def test_input_is_subscribed_only_while_an_output_is(random_bundle, make_client):
    domain = next_domain()
    node = NodeProcess(
        domain,
        cpu_node_params(
            random_bundle,
            image_topic=TOPIC,
            camera_info_topic=INFO_TOPIC,
            diagnostics_period=0.25,
        ),
    )
    stop = threading.Event()
    try:
        client: Client = make_client(domain)
        client.subscribe(DiagnosticArray, "/diagnostics")  # does not count as an output
        images = client.publisher(Image, TOPIC)
        infos = client.publisher(CameraInfo, INFO_TOPIC)
        diag = client.wait_for(
            lambda: (
                client.latest_diagnostics().get("state") == "idle" and client.latest_diagnostics()
            ),
            60,
            f"node up and idle:\n{node.tail()}",
        )
        assert diag["_level"] == b"\x00" and "idle" in diag["_message"], diag
        assert diag["input_topic"] == "(not subscribed)"

        def stream() -> None:
            while not stop.wait(0.1):
                images.publish(image_msg(scene(64, 96), "bgr8"))

        threading.Thread(target=stream, daemon=True).start()
        stop.wait(1.5)
        assert images.get_subscription_count() == 0 and infos.get_subscription_count() == 0
        assert client.latest_diagnostics()["frames_received"] == "0", "idle node took frames"

        client.subscribe(Image, f"{NS}/semantic")
        client.wait_for(images.get_subscription_count, 10, "input subscribed on connect")
        client.wait_for(infos.get_subscription_count, 10, "camera_info subscribed on connect")
        client.wait_for(lambda: client.received(f"{NS}/semantic"), 30, "outputs flow")
        client.wait_for(lambda: client.latest_diagnostics()["state"] == "active", 10, "active")

        client.node.destroy_subscription(client.subs.pop(f"{NS}/semantic"))
        client.wait_for(lambda: not images.get_subscription_count(), 10, "input dropped again")
        client.wait_for(lambda: client.latest_diagnostics()["state"] == "idle", 10, "idle again")
        received = int(client.settled_diagnostics()["frames_received"])
        stop.wait(1.0)
        assert int(client.latest_diagnostics()["frames_received"]) == received
    finally:
        stop.set()
        code = node.stop()
    assert code == 0, node.log()
