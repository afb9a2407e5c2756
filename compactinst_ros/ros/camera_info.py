"""camera_info next to the outputs: the CameraInfo whose stamp matches a frame's, re-stamped.

Every output is at camera resolution (no crop, no resize), so the intrinsics K, the projection P,
the distortion D and the rectification R of the camera's CameraInfo describe the masks as they
are: they pass through unchanged; only the header becomes the output frame's (the exact input
stamp and frame_id), so a message filter pairs ``~/camera_info`` with any output by stamp.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Generic, TypeVar

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo

from .qos import frame_qos

Item = TypeVar("Item")


def stamp_ns(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


class StampMatcher(Generic[Item]):
    """The last ``keep`` items by stamp; ``match`` finds the nearest within ``tolerance_ns``.

    Thread-safe (items come on the executor thread, frames are matched on the worker thread).
    An exact stamp is a dict lookup; otherwise the few kept stamps are scanned.
    """

    def __init__(self, tolerance_ns: int, keep: int = 30) -> None:
        self.tolerance_ns = tolerance_ns
        self._lock = threading.Lock()
        self._order: deque[int] = deque()
        self._items: dict[int, Item] = {}
        self._keep = keep

    def add(self, stamp: int, item: Item) -> None:
        """Remember ``item`` under ``stamp``; the oldest goes when more than ``keep`` are held."""
        with self._lock:
            if stamp not in self._items:
                self._order.append(stamp)
            self._items[stamp] = item
            while len(self._order) > self._keep:
                del self._items[self._order.popleft()]

    def match(self, stamp: int) -> Item | None:
        """The item whose stamp is nearest ``stamp`` if within the tolerance, else None."""
        with self._lock:
            exact = self._items.get(stamp)
            if exact is not None or not self._order:
                return exact
            nearest = min(self._order, key=lambda s: abs(s - stamp))
            if abs(nearest - stamp) <= self.tolerance_ns:
                return self._items[nearest]
        return None


class CameraInfoRelay:
    """Subscribes to the camera's CameraInfo and publishes ``~/camera_info`` per output frame
    (``<prefix>camera_info``: a camera's ``~/<name>/camera_info`` in a node of several)."""

    def __init__(
        self,
        node: Node,
        topic: str,
        tolerance_ms: float,
        reliability: ReliabilityPolicy,
        prefix: str = "~/",
    ) -> None:
        self.node = node
        self.topic = topic
        self.matcher: StampMatcher[CameraInfo] = StampMatcher(int(tolerance_ms * 1e6))
        self.pub = node.create_publisher(
            CameraInfo, f"{prefix}camera_info", frame_qos(reliability)
        )
        self._sub: Any = None
        self._lock = threading.Lock()
        self.matched = 0
        self.unmatched = 0
        self._reported = 0
        self.last_problem = ""

    def start(self) -> None:
        """Subscribe (best effort matches reliable and best-effort camera drivers alike)."""
        if self._sub is None:
            qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
            self._sub = self.node.create_subscription(CameraInfo, self.topic, self._on_info, qos)

    def stop(self) -> None:
        """Unsubscribe (the node is idle or inactive)."""
        if self._sub is not None:
            self.node.destroy_subscription(self._sub)
            self._sub = None

    def _on_info(self, msg: CameraInfo) -> None:
        self.matcher.add(stamp_ns(msg.header.stamp), msg)

    def publish(self, header: Any, height: int, width: int) -> bool:
        """Publish the frame's CameraInfo with ``header``; False (counted) when none matches."""
        info = self.matcher.match(stamp_ns(header.stamp))
        problem = ""
        if info is None:
            problem = (
                f"no camera_info on {self.topic} within "
                f"{self.matcher.tolerance_ns / 1e6:g} ms of the frame's stamp; check that the "
                "camera publishes it with the image's stamp, or raise camera_info_tolerance_ms"
            )
        elif (info.height, info.width) != (height, width) and info.height and info.width:
            problem = (
                f"camera_info is {info.width}x{info.height} but the image is {width}x{height}; "
                "point camera_info_topic at the camera_info of the image topic"
            )
        with self._lock:
            if problem:
                self.unmatched += 1
                self.last_problem = problem
            else:
                self.matched += 1
        if problem:
            return False
        if self.pub.get_subscription_count() > 0:
            info.header = header
            self.pub.publish(info)
        return True

    def check(self) -> tuple[list[tuple[bytes, str]], dict[str, object]]:
        """/diagnostics problems (WARN for frames unmatched since the last check) and values."""
        with self._lock:
            new = self.unmatched - self._reported
            self._reported = self.unmatched
            values: dict[str, object] = {
                "camera_info_topic": self.topic,
                "camera_info_matched": self.matched,
                "camera_info_unmatched": self.unmatched,
                "camera_info_last_problem": self.last_problem,
            }
        problems = []
        if new:
            problems.append(
                (DiagnosticStatus.WARN, f"{new} frame(s) without a matching camera_info")
            )
        return problems, values

    def destroy(self) -> None:
        """Unsubscribe and remove the publisher."""
        self.stop()
        self.node.destroy_publisher(self.pub)
