"""ros/tf.py: our buffer in tf2_ros's API shape, with the real rclpy and geometry_msgs types
(TransformStamped in and out, rclpy Time and Duration, 0 = latest, a timeout that waits for a
transform another thread sets). The node's use of it, fed from /tf and /tf_static, is in
test_ros_depth.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from rclpy.duration import Duration
from rclpy.time import Time

from compactinst_ros.ros import tf
from compactinst_ros.spatial.tf_buffer import ForwardExtrapolationException, LookupException


def stamped(parent: str, child: str, x: float, sec: int) -> TransformStamped:
    msg = TransformStamped(child_frame_id=child)
    msg.header.frame_id = parent
    msg.header.stamp.sec = sec
    msg.transform.translation.x, msg.transform.rotation.w = x, 1.0
    return msg


def test_the_buffer_speaks_tf2_ros_messages_and_times() -> None:
    buffer = tf.TransformBuffer()
    assert buffer.set_transform(stamped("odom", "base_link", 0.0, 10), "test")
    assert buffer.set_transform(stamped("odom", "base_link", 2.0, 12), "test")
    assert buffer.set_transform_static(stamped("base_link", "lidar", 0.5, 0), "test")
    got = buffer.lookup_transform("odom", "lidar", Time(seconds=11))
    assert isinstance(got, TransformStamped)
    assert (got.header.frame_id, got.child_frame_id) == ("odom", "lidar")
    assert (got.header.stamp.sec, got.header.stamp.nanosec) == (11, 0)
    assert got.transform.translation.x == pytest.approx(1.5)
    latest = buffer.lookup_transform("odom", "lidar", Time())  # 0: the latest common time
    assert latest.header.stamp.sec == 12 and latest.transform.translation.x == pytest.approx(2.5)
    np.testing.assert_allclose(tf.matrix_of(latest)[:3, 3], [2.5, 0, 0])
    with pytest.raises(ForwardExtrapolationException):
        buffer.lookup_transform("odom", "lidar", Time(seconds=13))
    with pytest.raises(tf.TRANSFORM_ERRORS):
        buffer.lookup_transform("odom", "nowhere", Time(seconds=11))
    assert not buffer.can_transform("odom", "nowhere", Time(seconds=11))
    assert not buffer.set_transform(stamped("a", "a", 0.0, 1), "me")
    assert buffer.ignored[-1].startswith("TF_SELF_TRANSFORM") and "(from me)" in buffer.ignored[-1]
    assert "Frame lidar\n" in buffer.all_frames_as_string()


def test_a_timeout_waits_for_a_transform_another_thread_sets() -> None:
    buffer = tf.TransformBuffer()

    def later() -> None:
        time.sleep(0.2)
        buffer.set_transform(stamped("map", "odom", 3.0, 5), "late")

    threading.Thread(target=later).start()
    with pytest.raises(LookupException):  # no timeout: at once
        buffer.lookup_transform("map", "odom", Time(seconds=5))
    got = buffer.lookup_transform("map", "odom", Time(seconds=5), Duration(seconds=5))
    assert got.transform.translation.x == 3.0
    start = time.monotonic()
    assert not buffer.can_transform("map", "gone", Time(seconds=5), Duration(seconds=0.3))
    assert time.monotonic() - start >= 0.3


def test_time_travel_through_a_fixed_frame() -> None:
    buffer = tf.TransformBuffer()
    for sec in (10, 11):
        buffer.set_transform(stamped("odom", "base_link", 20.0 * (sec - 10), sec), "odometry")
    buffer.set_transform_static(stamped("base_link", "lidar", 0.0, 0), "urdf")
    buffer.set_transform_static(stamped("base_link", "camera", 0.0, 0), "urdf")
    got = buffer.lookup_transform_full(
        "camera", Time(seconds=11), "lidar", Time(seconds=10, nanoseconds=500_000_000), "odom"
    )
    assert got.transform.translation.x == pytest.approx(-10.0)  # 0.5 s at 20 m/s

