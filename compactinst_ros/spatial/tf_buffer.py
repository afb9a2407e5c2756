"""A transform buffer that follows tf2's algorithm, for where ``tf2_ros`` does not import.

Every apt install of ROS on a vehicle has tf2_ros, and the node uses its Buffer there. A pip
install (and CI) has no tf2 wheels, so this module does what tf2's C++ core does, read from its
source (ros2/geometry2, tf2/src/cache.cpp, static_cache.cpp, buffer_core.cpp), in numpy:

- one time cache per child frame, newest first, pruned to ``cache_time`` behind its newest
  entry; a stamp older than that window is refused (tf2's TF_OLD_DATA), an exact duplicate
  ignored; a static frame keeps one transform valid at every time;
- a lookup at time t takes the two entries around t and interpolates, translation linearly and
  rotation by slerp, unless their parents differ (then the older one, as tf2 does); t = 0 is
  "the latest time every transform of the chain has" (tf2's getLatestCommonTime);
- the chain: walk from the source up to its root and from the target up until the walks meet
  (tf2's walkToTopParent), so a target that is an ancestor of the source, the reverse, or a
  common parent all work; ``lookup_transform_full`` travels in time through a fixed frame;
- tf2's errors with its words: LookupException (a frame that does not exist),
  ConnectivityException (two trees), the three extrapolations (no data, into the future, into
  the past), InvalidArgumentException (an empty frame id or one starting with '/').

Times are integer nanoseconds; a Transform maps points of the child (source) frame into the
parent (target) frame. ``ros/tf.py`` gives this tf2_ros's API shape (messages, rclpy Time) and
chooses tf2_ros where it imports.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

import numpy as np

#: tf2's default cache time (BufferCore::DEFAULT_CACHE_TIME): 10 s
DEFAULT_CACHE_TIME_NS = 10_000_000_000
#: tf2's bound on a chain (MAX_GRAPH_DEPTH): deeper means a loop
MAX_GRAPH_DEPTH = 1000
#: tf2's tolerance on |q|^2 - 1 before a quaternion is refused (QUATERNION_NORMALIZATION_TOLERANCE)
QUATERNION_TOLERANCE = 10e-3


class TransformException(Exception):  # noqa: N818  (tf2's names, so the two read alike)
    """Base of every lookup error (tf2::TransformException)."""


class LookupException(TransformException):
    """A frame that does not exist, or a loop in the tree."""


class ConnectivityException(TransformException):
    """The two frames are in different trees."""


class ExtrapolationException(TransformException):
    """The time asked for is outside what a cache holds."""


class NoDataForExtrapolationException(ExtrapolationException):
    """The cache holds one time only (or none), and not the one asked for."""


class ForwardExtrapolationException(ExtrapolationException):
    """The time asked for is after the newest entry."""


class BackwardExtrapolationException(ExtrapolationException):
    """The time asked for is before the oldest entry."""


class InvalidArgumentException(TransformException):
    """An empty frame id, or one that starts with '/'."""


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Hamilton product a * b of (x, y, z, w) quaternions (rotate by b, then by a)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])  # fmt: skip


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """The 3x3 rotation matrix of a unit (x, y, z, w) quaternion."""
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def quat_from_matrix(rotation: np.ndarray) -> np.ndarray:
    """The unit (x, y, z, w) quaternion of a 3x3 rotation matrix (w >= 0; the largest of
    w, x, y, z taken from the diagonal first, so every rotation is accurate)."""
    m = np.asarray(rotation, np.float64)
    trace = np.trace(m)
    candidates = [trace, m[0, 0], m[1, 1], m[2, 2]]
    k = int(np.argmax(candidates))
    if k == 0:
        w = np.sqrt(1.0 + trace) / 2
        q = [(m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w),
             (m[1, 0] - m[0, 1]) / (4 * w), w]  # fmt: skip
    else:
        i = k - 1
        j, h = (i + 1) % 3, (i + 2) % 3
        big = np.sqrt(max(1.0 + m[i, i] - m[j, j] - m[h, h], 0.0)) / 2
        q = [0.0, 0.0, 0.0, (m[h, j] - m[j, h]) / (4 * big)]
        q[i], q[j], q[h] = big, (m[j, i] + m[i, j]) / (4 * big), (m[h, i] + m[i, h]) / (4 * big)
    q = np.asarray(q)
    return q if q[3] >= 0 else -q


def slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """Spherical interpolation from ``a`` (t = 0) to ``b`` (t = 1) the short way round, as
    tf2's Quaternion::slerp: nearly equal rotations give ``a``."""
    dot = float(np.dot(a, b)) / float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
    if abs(dot) >= 1.0 - np.finfo(float).eps:
        return np.array(a, float)
    theta = np.arccos(abs(dot))
    sign = -1.0 if dot < 0 else 1.0
    weights = np.sin([(1.0 - t) * theta, sign * t * theta]) / np.sin(theta)
    return weights[0] * np.asarray(a, float) + weights[1] * np.asarray(b, float)


@dataclass(frozen=True)
class Transform:
    """A rigid transform: points of the child frame into the parent frame, p' = R p + t."""

    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))
    rotation: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 0.0, 1.0]))

    @classmethod
    def of_msg(cls, msg: object) -> Transform:
        """The transform of a geometry_msgs/Transform or TransformStamped (an rclpy message
        or a bag's deserialised one: the same fields)."""
        t = getattr(msg, "transform", msg)
        r = t.rotation
        return cls(
            np.array([t.translation.x, t.translation.y, t.translation.z]),
            np.array([r.x, r.y, r.z, r.w]),
        )

    def __mul__(self, other: Transform) -> Transform:
        """``self`` after ``other``: parent <- self.child = other.parent <- other.child."""
        moved = quat_matrix(self.rotation) @ other.translation + self.translation
        return Transform(moved, quat_multiply(self.rotation, other.rotation))

    def inverse(self) -> Transform:
        """The transform the other way."""
        conj = self.rotation * np.array([-1.0, -1.0, -1.0, 1.0])
        return Transform(-(quat_matrix(conj) @ self.translation), conj)

    def matrix(self) -> np.ndarray:
        """The 4x4 homogeneous matrix."""
        out = np.eye(4)
        out[:3, :3] = quat_matrix(self.rotation)
        out[:3, 3] = self.translation
        return out

    def apply(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) points of the child frame in the parent frame, in their dtype."""
        rotation = quat_matrix(self.rotation).astype(points.dtype)
        return points @ rotation.T + self.translation.astype(points.dtype)


@dataclass(frozen=True)
class Stamped:
    """One cache entry: the parent and the transform parent <- child at ``stamp`` (ns)."""

    stamp: int
    parent: str
    transform: Transform


def _time(ns: int) -> str:
    """A time as tf2 prints it (seconds with nine decimals)."""
    return f"{ns / 1e9:.9f}"


class TimeCache:
    """The transforms of one child frame over the last ``cache_time_ns`` (tf2::TimeCache)."""

    def __init__(self, cache_time_ns: int = DEFAULT_CACHE_TIME_NS) -> None:
        self.cache_time_ns = cache_time_ns
        self._stamps: list[int] = []  # ascending (tf2 keeps newest first; the order is ours)
        self._items: list[Stamped] = []

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, item: Stamped) -> bool:
        """Add ``item`` in time order, pruning what fell out of the window; False (nothing
        added) for a stamp older than the window, True (nothing added) for an exact duplicate."""
        latest = self._stamps[-1] if self._stamps else None
        self._prune()
        if latest is not None and item.stamp < latest - self.cache_time_ns:
            return False
        low = bisect.bisect_left(self._stamps, item.stamp)
        high = bisect.bisect_right(self._stamps, item.stamp)
        if any(_same(self._items[i], item) for i in range(low, high)):
            return True
        self._stamps.insert(high, item.stamp)
        self._items.insert(high, item)
        return True

    def _prune(self) -> None:
        if not self._stamps:
            return
        cut = bisect.bisect_left(self._stamps, self._stamps[-1] - self.cache_time_ns)
        del self._stamps[:cut], self._items[:cut]

    def get(self, time_ns: int) -> Stamped:
        """The transform at ``time_ns`` (0: the newest), interpolated between the entries
        around it unless they have different parents; ExtrapolationException otherwise."""
        if not self._items:
            raise NoDataForExtrapolationException(
                f"Lookup would require extrapolation at time {_time(time_ns)}, but only time "
                f"{_time(0)} is in the buffer"
            )
        if time_ns == 0:
            return self._items[-1]
        if len(self._items) == 1:
            only = self._items[0]
            if only.stamp == time_ns:
                return only
            raise NoDataForExtrapolationException(
                f"Lookup would require extrapolation at time {_time(time_ns)}, but only time "
                f"{_time(only.stamp)} is in the buffer"
            )
        earliest, latest = self._stamps[0], self._stamps[-1]
        if time_ns > latest:
            raise ForwardExtrapolationException(
                "Lookup would require extrapolation into the future.  Requested time "
                f"{_time(time_ns)} but the latest data is at time {_time(latest)}"
            )
        if time_ns < earliest:
            raise BackwardExtrapolationException(
                "Lookup would require extrapolation into the past.  Requested time "
                f"{_time(time_ns)} but the earliest data is at time {_time(earliest)}"
            )
        i = bisect.bisect_right(self._stamps, time_ns) - 1  # the newest at or before
        older = self._items[i]
        if older.stamp == time_ns or i + 1 == len(self._items):
            return older
        newer = self._items[i + 1]
        if older.parent != newer.parent:
            return older  # reparented: no interpolation across it
        ratio = (time_ns - older.stamp) / (newer.stamp - older.stamp)
        a, b = older.transform, newer.transform
        translation = a.translation + (b.translation - a.translation) * ratio
        rotation = slerp(a.rotation, b.rotation, ratio)
        return Stamped(time_ns, older.parent, Transform(translation, rotation))

    def latest(self) -> tuple[int, str] | None:
        """(stamp, parent) of the newest entry; None when empty."""
        return (self._stamps[-1], self._items[-1].parent) if self._items else None


class StaticCache:
    """One transform valid at every time (tf2::StaticCache); its latest time is 0."""

    def __init__(self) -> None:
        self._item: Stamped | None = None

    def __len__(self) -> int:
        return 1

    def insert(self, item: Stamped) -> bool:
        """Replace the transform."""
        self._item = item
        return True

    def get(self, time_ns: int) -> Stamped:
        """The transform, at whatever time is asked."""
        assert self._item is not None
        return Stamped(time_ns, self._item.parent, self._item.transform)

    def latest(self) -> tuple[int, str] | None:
        """(0, parent): valid at every time."""
        return (0, self._item.parent) if self._item else None


def _compose(steps: list[Transform]) -> Transform:
    """The transform of a walk up the tree: the first step applied first."""
    out = Transform()
    for step in steps:
        out = step * out
    return out


def _disconnected(target: str, source: str) -> str:
    """tf2's ConnectivityException text (its missing space kept)."""
    return (
        f"Could not find a connection between '{target}' and '{source}' because they are not "
        "part of the same tree.Tf has two or more unconnected trees."
    )


def _same(a: Stamped, b: Stamped) -> bool:
    return (
        a.stamp == b.stamp
        and a.parent == b.parent
        and np.array_equal(a.transform.translation, b.transform.translation)
        and np.array_equal(a.transform.rotation, b.transform.rotation)
    )


class BufferCore:
    """Frames and their caches, thread-safe, with tf2's lookups (module doc)."""

    def __init__(self, cache_time_ns: int = DEFAULT_CACHE_TIME_NS) -> None:
        self.cache_time_ns = cache_time_ns
        self._frames: dict[str, TimeCache | StaticCache] = {}
        self._known: set[str] = set()  # children and parents: a root has no cache
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget the time-stamped transforms; static ones stay (tf2's clear)."""
        with self._lock:
            for child, cache in list(self._frames.items()):
                if isinstance(cache, TimeCache):
                    self._frames[child] = TimeCache(self.cache_time_ns)

    def set_transform(
        self,
        parent: str,
        child: str,
        stamp_ns: int,
        transform: Transform,
        is_static: bool = False,
    ) -> str | None:
        """Store parent <- child at ``stamp_ns``; None when stored, else why it was ignored, in
        tf2's words (TF_SELF_TRANSFORM, TF_NO_CHILD_FRAME_ID, TF_NO_FRAME_ID, TF_NAN_INPUT,
        TF_DENORMALIZED_QUATERNION, TF_OLD_DATA); the caller logs it."""
        parent, child = parent.lstrip("/"), child.lstrip("/")
        values = np.concatenate([transform.translation, transform.rotation])
        if child == parent:
            return f"TF_SELF_TRANSFORM: frame_id and child_frame_id '{child}' are the same"
        if not child:
            return "TF_NO_CHILD_FRAME_ID: child_frame_id not set"
        if not parent:
            return f"TF_NO_FRAME_ID: frame_id not set for child_frame_id '{child}'"
        if np.isnan(values).any():
            return f"TF_NAN_INPUT: a nan value in the transform of '{child}'"
        if abs(float(np.dot(transform.rotation, transform.rotation)) - 1.0) >= QUATERNION_TOLERANCE:
            return f"TF_DENORMALIZED_QUATERNION: an invalid quaternion for '{child}'"
        item = Stamped(int(stamp_ns), parent, transform)
        with self._lock:
            cache = self._frames.get(child)
            if cache is None or isinstance(cache, StaticCache) != is_static:
                cache = StaticCache() if is_static else TimeCache(self.cache_time_ns)
                self._frames[child] = cache
            if not cache.insert(item):
                return (
                    f"TF_OLD_DATA ignoring data from the past for frame {child} at time "
                    f"{_time(item.stamp)}"
                )
            self._known |= {parent, child}
        return None

    def all_frames(self) -> list[str]:
        """Every frame named so far, as a child or a parent."""
        with self._lock:
            return sorted(self._known)

    def _check(self, frame: str, argument: str) -> None:
        if not frame:
            raise InvalidArgumentException(
                f'Invalid argument "{frame}" passed to {argument} - in tf2 frame_ids cannot be '
                "empty"
            )
        if frame.startswith("/"):
            raise InvalidArgumentException(
                f'Invalid argument "{frame}" passed to {argument} - in tf2 frame_ids cannot '
                "start with a '/'"
            )
        if frame not in self._known:
            raise LookupException(f'"{frame}" passed to {argument} does not exist. ')

    def lookup_transform(self, target: str, source: str, time_ns: int) -> tuple[Transform, int]:
        """(target <- source at ``time_ns``, the time used: ``time_ns``, or for 0 the latest
        common time); the TransformException subclass tf2 raises otherwise."""
        with self._lock:
            if target == source:
                cache = self._frames.get(target)
                latest = cache.latest() if cache is not None else None
                return Transform(), (latest[0] if time_ns == 0 and latest else time_ns)
            self._check(target, "lookupTransform argument target_frame")
            self._check(source, "lookupTransform argument source_frame")
            if time_ns == 0:
                time_ns = self._latest_common_time(target, source)
            return self._walk(target, source, time_ns), time_ns

    def lookup_transform_full(
        self, target: str, target_ns: int, source: str, source_ns: int, fixed: str
    ) -> tuple[Transform, int]:
        """target at ``target_ns`` <- source at ``source_ns``, through ``fixed``, a frame that
        does not move between the two times (tf2's "time travel": a point seen by a sensor at
        one time, placed where it is at another as the vehicle moves)."""
        into_fixed, _ = self.lookup_transform(fixed, source, source_ns)
        from_fixed, used = self.lookup_transform(target, fixed, target_ns)
        return from_fixed * into_fixed, used

    def can_transform(self, target: str, source: str, time_ns: int) -> bool:
        """Whether ``lookup_transform`` would succeed."""
        try:
            self.lookup_transform(target, source, time_ns)
        except TransformException:
            return False
        return True

    def _parent_chain(
        self, frame: str, time_ns: int
    ) -> tuple[list[str], list[Transform], TransformException | None]:
        """From ``frame`` up at ``time_ns``: the frames reached (``frame`` first), each one's
        transform into the next, and the extrapolation error that stopped the walk before a
        root (None where it reached one)."""
        frames, transforms = [frame], []
        while (cache := self._frames.get(frames[-1])) is not None:
            try:
                item = cache.get(time_ns)
            except ExtrapolationException as exc:
                return frames, transforms, exc
            frames.append(item.parent)
            transforms.append(item.transform)
            if len(frames) > MAX_GRAPH_DEPTH:
                raise LookupException(
                    "The tf tree is invalid because it contains a loop.\n"
                    + "\n".join(sorted(self._known))
                )
        return frames, transforms, None

    def _walk(self, target: str, source: str, time_ns: int) -> Transform:
        """target <- source at ``time_ns`` (tf2's walkToTopParent with TransformAccum): both
        walks up to the first frame they share, the source's transform composed with the
        inverse of the target's."""
        source_frames, source_up, source_error = self._parent_chain(source, time_ns)
        target_frames, target_up, target_error = self._parent_chain(target, time_ns)
        common = next((f for f in target_frames if f in source_frames), None)
        if common is None:
            error = target_error or source_error  # tf2 reports the target walk's first
            if error is not None:
                where = f", when looking up transform from frame [{source}] to frame [{target}]"
                raise type(error)(f"{error}{where}")
            raise ConnectivityException(_disconnected(target, source))
        return _compose(target_up[: target_frames.index(common)]).inverse() * _compose(
            source_up[: source_frames.index(common)]
        )

    def _latest_common_time(self, target: str, source: str) -> int:
        """The newest time every transform between ``target`` and ``source`` has (static
        transforms count as always; 0 where all are static)."""
        def chain(frame: str) -> list[tuple[str, int]]:  # [(parent, its latest stamp)]
            out: list[tuple[str, int]] = []
            while (cache := self._frames.get(frame)) is not None:
                latest = cache.latest()
                if latest is None:
                    break
                out.append((latest[1], latest[0]))
                frame = latest[1]
                if len(out) > MAX_GRAPH_DEPTH:
                    raise LookupException("The tf tree is invalid because it contains a loop.")
            return out

        up_source, up_target = chain(source), chain(target)
        source_frames = [source] + [p for p, _ in up_source]
        target_frames = [target] + [p for p, _ in up_target]
        common = next((f for f in target_frames if f in source_frames), None)
        if common is None:
            raise ConnectivityException(_disconnected(target, source))
        stamps = [s for _, s in up_source[: source_frames.index(common)]]
        stamps += [s for _, s in up_target[: target_frames.index(common)]]
        stamps = [s for s in stamps if s != 0]
        return min(stamps) if stamps else 0
