"""~/camera_info, ~/latency/pipeline and ~/overlay/compressed over real DDS (node subprocess)."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params
from ros_messages import raster_from_image
from test_ros_node import image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, JointState

NS = "/compactinst"
TOPIC = "/cam/image"
INFO_TOPIC = "/cam/camera_info"
H, W = 96, 128


def camera_info(sec: int, nanosec: int) -> CameraInfo:
    """A 128x96 pinhole CameraInfo with distinct K, P and D values, stamped (sec, nanosec)."""
    info = CameraInfo(width=W, height=H, distortion_model="plumb_bob")
    info.header.stamp.sec, info.header.stamp.nanosec = sec, nanosec
    info.header.frame_id = "cam_optical_from_driver"
    info.k = [100.5, 0.0, 63.5, 0.0, 101.5, 47.5, 0.0, 0.0, 1.0]
    info.p = [100.5, 0.0, 63.5, -5.0, 0.0, 101.5, 47.5, 0.0, 0.0, 0.0, 1.0, 0.0]
    info.d = [0.1, -0.2, 0.001, 0.002, 0.0]
    return info


def now_stamped(client: Client, frame: np.ndarray) -> Image:
    """A bgr8 Image of ``frame`` stamped with the client's clock now."""
    msg = image_msg(frame, "bgr8")
    msg.header.stamp = client.node.get_clock().now().to_msg()
    return msg


@pytest.fixture(scope="module")
def ros(random_bundle):
    """(client, image publisher, camera_info publisher) with a node relaying camera_info."""
    domain = next_domain()
    node = NodeProcess(
        domain,
        cpu_node_params(
            random_bundle,
            image_topic=TOPIC,
            # reliable input from the start: under auto the node re-subscribes once it sees the
            # publisher's QoS, and the one frame a test sends could fall in that switch
            input_reliability="reliable",
            camera_info_topic=INFO_TOPIC,
            camera_info_tolerance_ms=1.0,
            outputs=["instance_mask", "overlay", "latency"],
            overlay_jpeg_quality=95,
            diagnostics_period=0.25,
        ),
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        for topic, msg_type in (
            ("instance_mask", Image),
            ("overlay", Image),
            ("overlay/compressed", CompressedImage),
            ("camera_info", CameraInfo),
            ("latency/frame", JointState),
        ):
            client.subscribe(msg_type, f"{NS}/{topic}")
        images = client.publisher(Image, TOPIC)
        infos = client.publisher(CameraInfo, INFO_TOPIC)
        client.wait_for(
            lambda: images.get_subscription_count() and infos.get_subscription_count(),
            60,
            f"node subscribed to image and camera_info:\n{node.tail()}",
        )
        client.wait_for(lambda: all(client.matched(t) for t in client.subs), 20, "outputs")
        yield client, images, infos
    finally:
        client.close()
        assert node.stop() == 0, node.log()


def _stamp(msg: object) -> tuple[int, int]:
    return msg.header.stamp.sec, msg.header.stamp.nanosec


def _by_stamp(client: Client, topic: str, stamp: tuple[int, int]) -> object:
    return client.wait_for(
        lambda: next((m for m in client.received(topic) if _stamp(m) == stamp), None),
        30,
        f"{topic} for {stamp}",
    )


def test_camera_info_carries_the_frame_header_and_unchanged_intrinsics(ros):
    client, images, infos = ros
    msg = now_stamped(client, scene(H, W, 3))
    sec, nsec = _stamp(msg)
    # the driver's stamp may differ from the image's by less than camera_info_tolerance_ms
    infos.publish(camera_info(sec, nsec + 400_000 if nsec < 999_000_000 else nsec - 400_000))
    time.sleep(0.2)
    images.publish(msg)
    out = _by_stamp(client, f"{NS}/camera_info", (sec, nsec))
    mask = _by_stamp(client, f"{NS}/instance_mask", (sec, nsec))
    sent = camera_info(sec, nsec)
    assert out.header.frame_id == msg.header.frame_id  # the image's, not the driver's
    # outputs are at camera resolution: K, P, D and the size pass through unchanged
    np.testing.assert_array_equal(out.k, sent.k)
    np.testing.assert_array_equal(out.p, sent.p)
    np.testing.assert_array_equal(out.d, sent.d)
    assert (out.width, out.height) == (mask.width, mask.height) == (W, H)
    assert raster_from_image(mask).shape == (out.height, out.width)


def test_frames_without_camera_info_are_counted_and_warned(ros):
    client, images, infos = ros
    matched = now_stamped(client, scene(H, W, 4))
    infos.publish(camera_info(*_stamp(matched)))
    time.sleep(0.2)
    images.publish(matched)
    _by_stamp(client, f"{NS}/camera_info", _stamp(matched))
    before = int(client.settled_diagnostics()["camera_info_unmatched"])
    lonely = now_stamped(client, scene(H, W, 5))  # no camera_info within 1 ms of this stamp
    images.publish(lonely)
    _by_stamp(client, f"{NS}/instance_mask", _stamp(lonely))
    diag = client.wait_for(
        lambda: (
            (d := client.latest_diagnostics())
            and int(d["camera_info_unmatched"]) == before + 1
            and d
        ),
        10,
        "unmatched camera_info counted",
    )
    assert "without a matching camera_info" in diag["_message"]
    assert diag["_level"] >= b"\x01"
    assert "no camera_info on /cam/camera_info" in diag["camera_info_last_problem"]
    assert all(_stamp(m) != _stamp(lonely) for m in client.received(f"{NS}/camera_info"))


def test_pipeline_latency_is_publish_time_minus_the_stamp(ros):
    client, images, _ = ros
    msg = now_stamped(client, scene(H, W, 6))
    sent_ns = client.node.get_clock().now().nanoseconds
    images.publish(msg)
    record = _by_stamp(client, f"{NS}/latency/frame", _stamp(msg))
    got_ns = client.node.get_clock().now().nanoseconds
    stages = dict(zip(record.name, record.position, strict=True))
    stamp_ns = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
    # camera-to-output: DDS transport and the node's own time included, bounded by what we saw
    assert stages["node"] <= stages["pipeline"] <= (got_ns - stamp_ns) / 1e6
    assert stages["pipeline"] >= (sent_ns - stamp_ns) / 1e6


def test_compressed_overlay_is_the_overlay_as_jpeg(ros):
    client, images, _ = ros
    msg = now_stamped(client, scene(H, W, 7))
    images.publish(msg)
    jpeg = _by_stamp(client, f"{NS}/overlay/compressed", _stamp(msg))
    raw = _by_stamp(client, f"{NS}/overlay", _stamp(msg))
    assert jpeg.format == "bgr8; jpeg compressed bgr8" and bytes(jpeg.data[:2]) == b"\xff\xd8"
    decoded = cv2.imdecode(np.frombuffer(bytes(jpeg.data), np.uint8), cv2.IMREAD_COLOR)
    overlay = np.frombuffer(bytes(raw.data), np.uint8).reshape(H, W, 3)
    assert decoded.shape == overlay.shape
    assert np.abs(decoded.astype(int) - overlay).mean() < 6.0  # quality 95
    assert len(jpeg.data) < overlay.nbytes / 2
