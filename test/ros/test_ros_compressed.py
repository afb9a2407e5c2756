"""CompressedImage input over real DDS: a payload that is not the format its message names, or a
format the node does not decode, is counted and reported on /diagnostics, and the next good frame
is processed."""

from __future__ import annotations

import array

import cv2
import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import CompressedImage, Image

NS = "/compactinst"
TOPIC = "/cam/image"
_stamp = iter(range(5000, 10**6))


def compressed(ext: str, fmt: str, seed: int = 0) -> CompressedImage:
    """A CompressedImage holding a 64x80 scene encoded as ``ext`` and labelled ``fmt``."""
    rng = np.random.default_rng(seed)
    scene = np.full((64, 80, 3), 90, np.uint8)
    cv2.rectangle(scene, (10, 8), (40, 30), rng.integers(0, 255, 3).tolist(), -1)
    ok, data = cv2.imencode(ext, scene)
    assert ok, ext
    msg = CompressedImage(format=fmt, data=array.array("B", data.tobytes()))
    msg.header.stamp.sec = next(_stamp)
    msg.header.frame_id = "camera_compressed"
    return msg


@pytest.fixture(scope="module")
def ros(random_bundle):
    """(client, compressed-image publisher) of a node reading only <image_topic>/compressed."""
    domain = next_domain()
    node = NodeProcess(
        domain,
        cpu_node_params(
            random_bundle,
            image_topic=TOPIC,
            input_transport="compressed",
            diagnostics_period=0.25,
        ),
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        client.subscribe(Image, f"{NS}/instance_mask")  # an output is wanted, so frames decode
        comp = client.publisher(CompressedImage, TOPIC + "/compressed", reliable=False)
        client.wait_for(
            lambda: (
                client.latest_diagnostics().get("input_reliability") == "compressed=best_effort"
            ),
            30,
            "node ready with QoS matched to the compressed publisher",
        )
        client.wait_for(
            lambda: comp.get_subscription_count() and client.matched(f"{NS}/instance_mask")
        )
        yield client, comp
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


BAD = {
    "bmp labelled jpeg": (".bmp", "jpeg", "says 'jpeg' but the data is bmp"),
    "png labelled jpeg": (".png", "bgr8; jpeg compressed bgr8", "says 'jpeg' but the data is png"),
    "bmp format": (".bmp", "bmp", "format 'bmp' is not supported; publish one of ['jpeg', 'png']"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_wrong_format_is_reported_and_the_next_frame_processed(ros, case):
    client, comp = ros
    ext, fmt, text = BAD[case]
    before = int(client.settled_diagnostics()["input_errors"])
    seen = len(client.received("/diagnostics"))
    comp.publish(compressed(ext, fmt))
    diag = client.wait_for(
        lambda: (d := client.latest_diagnostics()) and int(d["input_errors"]) > before and d,
        20,
        f"{case} on /diagnostics",
    )
    assert text in diag["last_error"], diag["last_error"]
    warned = [
        m.status[0]
        for m in client.received("/diagnostics")[seen:]
        if m.status[0].level == DiagnosticStatus.WARN
    ]
    assert any("bad input frame" in s.message for s in warned), [s.message for s in warned]
    good = compressed(".jpg", "jpeg", seed=1)
    comp.publish(good)
    client.wait_for(
        lambda: client.stamped(f"{NS}/instance_mask", good.header.stamp.sec),
        30,
        "output of the good frame after the bad one",
    )
