"""Transforms as ROS does them: tf2_ros's Buffer and TransformListener where tf2_ros imports (an
apt install of ROS on a vehicle), else ours with the same API shape over the tf2-algorithm core
of ``spatial/tf_buffer.py`` (a pip install, CI), so code written against one runs on the other.

``transform_tree(node)`` picks one and returns the buffer, the listener that feeds it from
``/tf`` and ``/tf_static`` (tf2_ros's QoS: /tf volatile, /tf_static transient local, both
reliable) and which it is. ``TRANSFORM_ERRORS`` catches the lookup errors of either.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from geometry_msgs.msg import TransformStamped
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.time import Time

from ..spatial.tf_buffer import DEFAULT_CACHE_TIME_NS, BufferCore, Transform, TransformException

try:  # an apt install of ROS: tf2_ros's buffer and its C++ core
    import tf2_ros
except ImportError:
    tf2_ros = None

#: the lookup errors of either buffer (tf2_ros re-exports tf2_py's)
TRANSFORM_ERRORS: tuple[type[Exception], ...] = (TransformException,) + (
    (tf2_ros.TransformException,) if tf2_ros is not None else ()
)
#: tf2_ros's subscription depth for /tf and /tf_static
TF_DEPTH = 100


def matrix_of(msg: Any) -> np.ndarray:
    """The 4x4 matrix of a geometry_msgs/TransformStamped: points of its child frame into its
    header's frame."""
    return Transform.of_msg(msg).matrix()


def _stamped(transform: Transform, target: str, source: str, stamp_ns: int) -> TransformStamped:
    msg = TransformStamped()
    msg.header.frame_id, msg.child_frame_id = target, source
    msg.header.stamp = Time(nanoseconds=stamp_ns).to_msg()
    t, r = msg.transform.translation, msg.transform.rotation
    t.x, t.y, t.z = (float(v) for v in transform.translation)
    r.x, r.y, r.z, r.w = (float(v) for v in transform.rotation)
    return msg


def _ns(time: Time | Any) -> int:
    """Nanoseconds of an rclpy Time or a builtin_interfaces/Time message."""
    if isinstance(time, Time):
        return time.nanoseconds
    return int(time.sec) * 1_000_000_000 + int(time.nanosec)


class TransformBuffer:
    """tf2_ros.Buffer's API over ``BufferCore``: TransformStamped in and out, rclpy times (a
    time of 0 asks for the latest common time), a ``timeout`` that waits for the transform to
    arrive, and tf2's errors (``TRANSFORM_ERRORS``)."""

    def __init__(self, cache_time: Duration | None = None, node: Node | None = None) -> None:
        """``node``: unused, as in tf2_ros (whose Buffer takes it for its services)."""
        del node
        ns = cache_time.nanoseconds if cache_time is not None else DEFAULT_CACHE_TIME_NS
        self.core = BufferCore(ns)
        self._arrived = threading.Condition()
        self.ignored: list[str] = []  # why transforms were ignored, newest last (tf2 logs them)

    def set_transform(self, transform: TransformStamped, authority: str) -> bool:
        """Store a transform; False (the reason in ``ignored``) where tf2 ignores it."""
        return self._set(transform, authority, False)

    def set_transform_static(self, transform: TransformStamped, authority: str) -> bool:
        """Store a transform valid at every time."""
        return self._set(transform, authority, True)

    def _set(self, msg: TransformStamped, authority: str, is_static: bool) -> bool:
        why = self.core.set_transform(
            msg.header.frame_id, msg.child_frame_id, _ns(msg.header.stamp), Transform.of_msg(msg),
            is_static,
        )  # fmt: skip
        if why is not None:
            self.ignored = [*self.ignored[-9:], f"{why} (from {authority})"]
            return False
        with self._arrived:
            self._arrived.notify_all()
        return True

    def _wait(self, ready: Any, timeout: Duration | None) -> None:
        seconds = timeout.nanoseconds / 1e9 if timeout is not None else 0.0
        if seconds > 0:
            with self._arrived:
                self._arrived.wait_for(ready, seconds)

    def lookup_transform(
        self, target_frame: str, source_frame: str, time: Time, timeout: Duration | None = None
    ) -> TransformStamped:
        """target_frame <- source_frame at ``time``, waiting up to ``timeout`` for it."""
        stamp = _ns(time)
        self._wait(lambda: self.core.can_transform(target_frame, source_frame, stamp), timeout)
        transform, used = self.core.lookup_transform(target_frame, source_frame, stamp)
        return _stamped(transform, target_frame, source_frame, used)

    def lookup_transform_full(
        self,
        target_frame: str,
        target_time: Time,
        source_frame: str,
        source_time: Time,
        fixed_frame: str,
        timeout: Duration | None = None,
    ) -> TransformStamped:
        """target_frame at ``target_time`` <- source_frame at ``source_time`` through
        ``fixed_frame`` (a frame that does not move between the two times)."""
        target_ns, source_ns = _ns(target_time), _ns(source_time)

        def ready() -> bool:
            return self.core.can_transform(fixed_frame, source_frame, source_ns) and (
                self.core.can_transform(target_frame, fixed_frame, target_ns)
            )

        self._wait(ready, timeout)
        transform, used = self.core.lookup_transform_full(
            target_frame, target_ns, source_frame, source_ns, fixed_frame
        )
        return _stamped(transform, target_frame, source_frame, used)

    def can_transform(
        self, target_frame: str, source_frame: str, time: Time, timeout: Duration | None = None
    ) -> bool:
        """Whether the lookup would succeed (after waiting up to ``timeout``)."""
        stamp = _ns(time)
        self._wait(lambda: self.core.can_transform(target_frame, source_frame, stamp), timeout)
        return self.core.can_transform(target_frame, source_frame, stamp)

    def clear(self) -> None:
        """Forget the time-stamped transforms (static ones stay, as in tf2)."""
        self.core.clear()

    def all_frames_as_string(self) -> str:
        """The frames known, one per line (tf2_ros's debugging view)."""
        return "".join(f"Frame {frame}\n" for frame in self.core.all_frames())


class TransformListener:
    """tf2_ros.TransformListener's shape: subscribes ``node`` to /tf and /tf_static and feeds
    ``buffer`` (needs tf2_msgs: ``compactinst ros build-interfaces`` on a pip install)."""

    def __init__(self, buffer: TransformBuffer, node: Node) -> None:
        import tf2_msgs.msg as tf2_msgs

        self.buffer, self.node = buffer, node
        dynamic = QoSProfile(depth=TF_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        static = QoSProfile(
            depth=TF_DEPTH,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self._subs = [
            node.create_subscription(tf2_msgs.TFMessage, "/tf", self._on_tf, dynamic),
            node.create_subscription(tf2_msgs.TFMessage, "/tf_static", self._on_static, static),
        ]

    def _on_tf(self, msg: Any) -> None:
        for transform in msg.transforms:
            self.buffer.set_transform(transform, "/tf")

    def _on_static(self, msg: Any) -> None:
        for transform in msg.transforms:
            self.buffer.set_transform_static(transform, "/tf_static")

    def unregister(self) -> None:
        """Unsubscribe (tf2_ros's name)."""
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs = []


def transform_tree(node: Node) -> tuple[Any, Any, str]:
    """(buffer, listener, "tf2_ros" or "compactinst") for ``node``: tf2_ros's where it imports,
    else ours, fed from /tf and /tf_static either way; ``listener.unregister()`` stops it."""
    if tf2_ros is not None:
        buffer = tf2_ros.Buffer(node=node)
        return buffer, tf2_ros.TransformListener(buffer, node), "tf2_ros"
    buffer = TransformBuffer(node=node)
    return buffer, TransformListener(buffer, node), "compactinst"
