"""Camera encodings over real DDS: one node takes bayer, 16-bit, semi-planar YUV, OpenCV-type
and mono frames in turn on its raw input and segments each; lossless ones give bgr8's outputs
exactly, and a mono camera turns /diagnostics to a WARN saying why accuracy will be low."""

from __future__ import annotations

import array

import cv2
import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import Image

from compactinst_ros.image_formats import encode_bgr8

NS = "/compactinst"
TOPIC = "/cam/image"
H, W = 64, 80


def scene() -> np.ndarray:
    """A bgr8 scene with a few coloured boxes on a grey ground."""
    image = np.full((H, W, 3), 90, np.uint8)
    rng = np.random.default_rng(7)
    for k in range(4):
        x, y = 8 + 16 * k, 6 + 12 * (k % 3)
        cv2.rectangle(image, (x, y), (x + 14, y + 20), rng.integers(0, 255, 3).tolist(), -1)
    return image


def frame(encoding: str, sec: int) -> Image:
    """The scene as a camera publishing ``encoding`` sends it, stamped ``sec``."""
    data, step = encode_bgr8(scene(), encoding)
    msg = Image(height=H, width=W, encoding=encoding, is_bigendian=0, step=step)
    msg.data = array.array("B", data)
    msg.header.stamp.sec = sec
    msg.header.frame_id = "camera"
    return msg


@pytest.fixture(scope="module")
def ros(random_bundle):
    """(client, raw Image publisher) of one node reading <image_topic>."""
    domain = next_domain()
    node = NodeProcess(
        domain, cpu_node_params(random_bundle, image_topic=TOPIC, diagnostics_period=0.25)
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        client.subscribe(Image, f"{NS}/instance_mask")  # an output is wanted, so frames convert
        pub = client.publisher(Image, TOPIC, reliable=False)
        client.wait_for(
            lambda: pub.get_subscription_count() and client.matched(f"{NS}/instance_mask"),
            30,
            "node subscribed to the camera and publishing instance_mask",
        )
        yield client, pub
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def segment(client: Client, pub, encoding: str, sec: int) -> np.ndarray:
    """Publish the scene in ``encoding`` (again while best-effort loses it) and return the
    instance mask the node publishes for it."""
    msg = frame(encoding, sec)

    def output() -> Image | None:
        found = client.stamped(f"{NS}/instance_mask", sec)
        if found is None:
            pub.publish(msg)
        return found

    out = client.wait_for(output, 30, f"instance_mask of the {encoding} frame")
    return np.frombuffer(bytes(out.data), np.uint16).reshape(out.height, out.width)


def test_the_node_segments_every_encoding_and_warns_of_mono(ros):
    client, pub = ros
    reference = segment(client, pub, "bgr8", 100)
    assert reference.shape == (H, W)
    for sec, encoding in enumerate(
        ("rgb16", "8UC3", "bayer_rggb8", "bayer_gbrg16", "nv12", "nv24"), start=101
    ):
        mask = segment(client, pub, encoding, sec)
        assert mask.shape == (H, W), encoding
        if encoding in ("rgb16", "8UC3"):  # the same pixels reach the model: the same outputs
            np.testing.assert_array_equal(mask, reference, err_msg=encoding)
    diag = client.settled_diagnostics()
    assert int(diag["input_errors"]) == 0, diag.get("last_error")
    assert "single-channel" not in diag["_message"]
    segment(client, pub, "mono16", 200)
    warned = client.wait_for(
        lambda: (d := client.latest_diagnostics()) and "single-channel" in d["_message"] and d,
        20,
        "the mono warning on /diagnostics",
    )
    assert warned["_level"] == DiagnosticStatus.WARN
