"""A camera's registered depth input and its 3-D outputs ``~/detections_3d`` and ``~/markers_3d``.

The depth image (``16UC1`` mm, ``32FC1`` m; with ``depth_transport`` compressedDepth,
image_transport's PNG/RVL CompressedImage on ``<depth topic>/compressedDepth``; registered to the
colour camera) is paired with each frame by stamp within ``depth_tolerance_ms``; the frame's
instances are lifted with it (``spatial.lift_depth``: eroded masks, percentile depth, inlier band)
using the colour camera_info's K and, for a depth of another size, the depth's own camera_info
(``<depth namespace>/camera_info``), through ``Pipeline.lift_depth``: on the GPU with the
TensorRT backend, where the frame's instance raster already is, else on the CPU.
``~/detections_3d`` (vision_msgs/Detection3DArray) carries one detection per lifted instance with
the 2-D detection's id (the instance / track id), class id and score; ``~/markers_3d``
(visualization_msgs/MarkerArray, where installed) draws each as a box with a "<class> <distance>
m" caption in rviz. Each is published only while subscribed. A frame without
depth within the tolerance still gets its 2-D outputs: its 3-D is skipped and counted, as are
refused depth images (wrong encoding, a size that no camera_info explains), with the reason on
/diagnostics.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_msgs.msg import Header

from ..errors import InputError
from ..labels import LabelSet
from ..palette import palette_colours
from ..spatial import Instances3D, Intrinsics, prepare_lifting
from ..spatial.boxes import BODY_UP, OPTICAL_UP, oriented_boxes
from ..spatial.cloud import placed_points
from ..spatial.tf_buffer import Transform, quat_from_matrix, quat_matrix
from ..structures import FrameResult
from . import convert
from .camera_info import StampMatcher, stamp_ns
from .qos import frame_qos
from .tf import TRANSFORM_ERRORS, matrix_of, transform_tree

if TYPE_CHECKING:
    from ..pipeline import Pipeline

try:
    import visualization_msgs.msg as visualization_msgs
except ImportError:  # an install without rviz's messages: no ~/markers_3d
    visualization_msgs = None
try:
    import tf2_msgs.msg as tf2_msgs
except ImportError:  # no /tf_static reader: no LiDAR input
    tf2_msgs = None

#: smallest marker box side, m (a flat instance still shows)
MIN_MARKER_M = 0.05
#: depth images held for pairing (a few frames of a 30 Hz camera behind the colour stream)
DEPTH_KEEP = 30
#: seconds between two log lines about frames without 3-D (each is still counted)
PROBLEM_LOG_S = 5.0


def intrinsics(info: CameraInfo) -> Intrinsics:
    """The Intrinsics of a CameraInfo message."""
    return Intrinsics.from_k(list(info.k), int(info.width), int(info.height))


def _set_pose(pose: Any, position: np.ndarray, rotation: np.ndarray) -> None:
    """Fill a geometry_msgs/Pose."""
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in position)
    o = pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in rotation)


@dataclass(frozen=True)
class Boxes3D:
    """The lifted instances as published: centroids (N, 3), oriented boxes (quaternions (N, 4)
    and sizes (N, 3)), covariances (N, 3, 3) and the up direction, in the camera's optical
    frame or, with a placement, in the output frame (spatial/boxes.py)."""

    centroids: np.ndarray
    orientations: np.ndarray
    sizes: np.ndarray
    covariances: np.ndarray
    up: np.ndarray

    @classmethod
    def of(cls, lifted: Instances3D, placement: Transform | None) -> Boxes3D:
        """``lifted`` moved by ``placement`` (output frame <- camera; None: the camera's)."""
        if placement is None:
            centroids, cov, up = lifted.centroid.astype(np.float64), lifted.covariance, OPTICAL_UP
        else:
            turn = quat_matrix(placement.rotation)
            centroids = placement.apply(lifted.centroid.astype(np.float64))
            cov, up = turn @ lifted.covariance.astype(np.float64) @ turn.T, BODY_UP
        rotations, sizes = oriented_boxes(cov, up)
        orientations = np.array(
            [quat_from_matrix(r) if np.isfinite(r).all() else [0.0, 0.0, 0.0, 1.0]
             for r in rotations]
        ).reshape(-1, 4)  # fmt: skip
        sizes = np.where(np.isfinite(sizes), np.maximum(sizes, MIN_MARKER_M), MIN_MARKER_M)
        return cls(centroids, orientations, sizes, np.asarray(cov, np.float64), up)


def detections_3d_msg(
    header: Any,
    result: FrameResult,
    lifted: Instances3D,
    vision_msgs: Any,
    placement: Transform | None = None,
) -> Any:
    """vision_msgs/Detection3DArray: per lifted instance ``id`` = the 2-D detection's id,
    class_id = label id, score; the centroid as the pose and the box centre; the box oriented on
    the ground plane by its inliers' spread (``Boxes3D``); the pose's covariance the inliers'
    covariance (position block, m^2; the rotation block 0: not estimated). In the camera's
    optical frame, or with ``placement`` (output frame <- camera at the frame's stamp;
    ``header`` already names the output frame) in the output frame."""
    out = vision_msgs.Detection3DArray()
    out.header = header
    inst = result.instances
    boxes = Boxes3D.of(lifted, placement)
    for i in np.flatnonzero(lifted.valid):
        det = vision_msgs.Detection3D()
        det.header = header
        det.id = str(int(inst.ids[i]))
        hyp = vision_msgs.ObjectHypothesisWithPose()
        hyp.hypothesis.class_id = str(int(inst.label_id[i]))
        hyp.hypothesis.score = float(inst.score[i])
        _set_pose(hyp.pose.pose, boxes.centroids[i], boxes.orientations[i])
        covariance = np.zeros((6, 6))
        covariance[:3, :3] = boxes.covariances[i]
        hyp.pose.covariance = covariance.ravel().tolist()
        det.results.append(hyp)
        det.bbox.center = hyp.pose.pose
        det.bbox.size.x, det.bbox.size.y, det.bbox.size.z = (float(v) for v in boxes.sizes[i])
        out.detections.append(det)
    return out


def markers_msg(
    header: Any,
    result: FrameResult,
    lifted: Instances3D,
    labels: LabelSet,
    placement: Transform | None = None,
) -> Any:
    """visualization_msgs/MarkerArray for rviz: a DELETEALL (the last frame's go), then per
    lifted instance its oriented box (``Boxes3D``, as in ~/detections_3d) in the instance's
    overlay colour, and a caption "<class> <distance> m" above it (ids = the instance ids); in
    the output frame of ``placement`` as ``detections_3d_msg``."""
    out = visualization_msgs.MarkerArray()
    clear = visualization_msgs.Marker(action=visualization_msgs.Marker.DELETEALL)
    clear.header = header
    out.markers.append(clear)
    inst = result.instances
    names = dict(zip(labels.ids, labels.names, strict=True))
    colours = palette_colours(inst.ids) / 255.0
    boxes = Boxes3D.of(lifted, placement)
    for i in np.flatnonzero(lifted.valid):
        box = visualization_msgs.Marker(
            ns="instances", id=int(inst.ids[i]), type=visualization_msgs.Marker.CUBE
        )
        box.header = header
        _set_pose(box.pose, boxes.centroids[i], boxes.orientations[i])
        box.scale.x, box.scale.y, box.scale.z = (float(v) for v in boxes.sizes[i])
        r, g, b = (float(c) for c in colours[i])
        box.color.r, box.color.g, box.color.b, box.color.a = r, g, b, 0.5
        text = visualization_msgs.Marker(
            ns="captions", id=int(inst.ids[i]), type=visualization_msgs.Marker.TEXT_VIEW_FACING
        )
        text.header = header
        above = boxes.centroids[i] + boxes.up * (boxes.sizes[i][2] / 2 + 0.1)
        _set_pose(text.pose, above, [0.0, 0.0, 0.0, 1.0])
        text.scale.z = 0.25
        text.color.r = text.color.g = text.color.b = text.color.a = 1.0
        label = int(inst.label_id[i])
        text.text = f"{names.get(label, label)} {float(lifted.distance[i]):.1f} m"
        out.markers += [box, text]
    return out


class DepthInput:
    """Subscribes to a camera's depth image and its camera_info; lifts and publishes each
    frame's instances (``publish``) and reports pairing on /diagnostics (``check``).

    With ``output_frame`` (``base_link``, ``map``) ``~/detections_3d`` and ``~/markers_3d``
    are in that frame: the camera placed in it at the frame's stamp through /tf and /tf_static
    (ros/tf.py); a frame whose camera cannot be placed publishes an empty array, counted and
    named. Lifting, the captions' distances and ``~/cloud_labelled`` stay in the camera's
    optical frame."""

    #: the input's name in /diagnostics keys and messages
    kind = "depth"

    def __init__(
        self,
        node: Node,
        topic: str,
        tolerance_ms: float,
        colour_infos: StampMatcher[CameraInfo] | None,
        reliability: ReliabilityPolicy,
        vision_msgs: Any,
        labels: LabelSet,
        prefix: str = "~/",
        transport: str = "raw",
        output_frame: str = "",
    ) -> None:
        self.node = node
        self.output_frame = output_frame
        self.tf_buffer: Any = None  # made at each start where used (ros/tf.py)
        self.tf_kind = ""
        self._tf_listener: Any = None
        # compressedDepth: image_transport's topic under the depth image's, with the same
        # camera_info beside the depth image
        self.topic = f"{topic.rstrip('/')}/compressedDepth" if transport != "raw" else topic
        self.message_type = CompressedImage if transport != "raw" else Image
        self.info_topic = f"{topic.rstrip('/').rsplit('/', 1)[0]}/camera_info"
        self.colour_infos = colour_infos
        self.vision_msgs = vision_msgs
        self.labels = labels
        self.prefix = prefix
        self.reliability = reliability
        tolerance_ns = int(tolerance_ms * 1e6)
        self.frames: StampMatcher[Image | CompressedImage] = StampMatcher(tolerance_ns, DEPTH_KEEP)
        self.infos: StampMatcher[CameraInfo] = StampMatcher(tolerance_ns, DEPTH_KEEP)
        self.pub = node.create_publisher(
            vision_msgs.Detection3DArray, f"{prefix}detections_3d", frame_qos(reliability)
        )
        self.markers = None
        if visualization_msgs is not None:
            self.markers = node.create_publisher(
                visualization_msgs.MarkerArray, f"{prefix}markers_3d", frame_qos(reliability)
            )
        self._subs: list[Any] = []
        self._lock = threading.Lock()
        self.counts = {"paired": 0, "missing": 0, "refused": 0}
        self._reported = dict(self.counts)
        self._logged_at: dict[str, float] = {}  # kind of problem -> when last logged
        self.last_problem = ""
        self.age_ms: float | None = None

    def uses_transforms(self) -> bool:
        """Whether this input reads /tf and /tf_static (for ``output_frame``)."""
        return bool(self.output_frame)

    def start(self) -> None:
        """Subscribe (best effort matches reliable and best-effort drivers alike), and feed a
        transform buffer from /tf and /tf_static where transforms are used."""
        if not self._subs:
            prepare_lifting()
            qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
            self._subs = [
                self.node.create_subscription(self.message_type, self.topic, self._on_depth, qos),
            ]
            if self.message_type is not PointCloud2:
                self._subs.append(
                    self.node.create_subscription(CameraInfo, self.info_topic, self._on_info, qos)
                )
            if self.uses_transforms():
                # a new buffer per start: /tf_static is latched and comes again, and what /tf
                # said while idle is gone either way
                self.tf_buffer, self._tf_listener, self.tf_kind = transform_tree(self.node)

    def stop(self) -> None:
        """Unsubscribe from the inputs and the transforms (the camera is idle or inactive)."""
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs = []
        if self._tf_listener is not None:
            self._tf_listener.unregister()
            self._tf_listener = None

    def _on_depth(self, msg: Image | CompressedImage) -> None:
        self.frames.add(stamp_ns(msg.header.stamp), msg)

    def _on_info(self, msg: CameraInfo) -> None:
        self.infos.add(stamp_ns(msg.header.stamp), msg)

    def _markers_wanted(self) -> bool:
        return self.markers is not None and self.markers.get_subscription_count() > 0

    def wanted(self) -> bool:
        """Whether ``~/detections_3d`` or ``~/markers_3d`` has a subscriber (the frame then
        needs its instances)."""
        return self.pub.get_subscription_count() > 0 or self._markers_wanted()

    #: what a frame pairs with, and what to check when none came within the tolerance
    PAIRED_WITH = "depth image"
    MISSING_ADVICE = (
        "check that the depth camera runs and is stamped with the colour frames' clock, or raise "
        "depth_tolerance_ms"
    )

    def _paired(self, stamp: int) -> Any:
        """The message paired with the frame stamped ``stamp``; None (counted as missing, with
        what to check) when none came within the tolerance."""
        message = self.frames.match(stamp)
        if message is None:
            self._count(
                "missing",
                f"no {self.PAIRED_WITH} on {self.topic} within "
                f"{self.frames.tolerance_ns / 1e6:g} ms of the frame's stamp; "
                f"{self.MISSING_ADVICE}",
            )
        return message

    def _lift(self, header: Any, result: FrameResult, pipeline: Pipeline) -> Instances3D | None:
        """The frame's instances in 3-D (lifted by ``pipeline``, which inferred the frame);
        None (counted, the reason kept) when they cannot be."""
        stamp = stamp_ns(header.stamp)
        depth = self._paired(stamp)
        if depth is None:
            return None
        colour = self.colour_infos.match(stamp) if self.colour_infos is not None else None
        try:
            if colour is None:
                raise InputError(
                    "no camera_info for the frame: set camera_info_topic (its K places the "
                    "masks in 3-D)"
                )
            own = self.infos.match(stamp_ns(depth.header.stamp))
            lifted = pipeline.lift_depth(
                result,
                convert.depth_from_msg(depth),
                intrinsics(colour),
                intrinsics(own) if own is not None else None,
            )
        except InputError as exc:
            self._count("refused", f"depth refused: {exc}")
            return None
        age = (stamp - stamp_ns(depth.header.stamp)) / 1e6
        with self._lock:
            self.counts["paired"] += 1
            self.age_ms = age
        return lifted

    def _count(self, kind: str, problem: str, log: bool = True) -> None:
        """Count a frame without 3-D, keep why for /diagnostics, and (``log``) log it at most
        every PROBLEM_LOG_S seconds per kind of problem (a refused depth stream would otherwise
        fill the log; a missing depth must not hide a refused one)."""
        now = time.monotonic()
        with self._lock:
            self.counts[kind] += 1
            self.last_problem = problem
            due = log and now - self._logged_at.get(kind, -PROBLEM_LOG_S) >= PROBLEM_LOG_S
            if due:
                self._logged_at[kind] = now
        if due:
            self.node.get_logger().warning(f"frame without 3-D: {problem}")

    def lift(self, header: Any, result: FrameResult, pipeline: Pipeline) -> Instances3D | None:
        """The frame's instances in 3-D, lifted once for the 3-D outputs and the overlay's
        captions by ``pipeline``, the one that inferred the frame (``Pipeline.lift_depth``);
        None without an instance raster, or when the frame cannot be lifted (then counted, the
        reason kept for /diagnostics)."""
        if result.instance_raster is None:
            return None
        return self._lift(header, result, pipeline)

    def publish(self, header: Any, result: FrameResult, lifted: Instances3D | None) -> None:
        """Publish the frame's 3-D outputs that are subscribed; a frame without 3-D (``lifted``
        None: no depth paired, or refused) still gets an empty Detection3DArray with its
        header, so that a subscriber synchronising on the frames never waits for it."""
        placement = None
        if self.output_frame:
            placement = self._output_placement(header) if lifted is not None else None
            header = Header(stamp=header.stamp, frame_id=self.output_frame)
        if lifted is None or (self.output_frame and placement is None):
            if self.pub.get_subscription_count() > 0:
                empty = self.vision_msgs.Detection3DArray()
                empty.header = header
                self.pub.publish(empty)
            return
        if self.pub.get_subscription_count() > 0:
            msg = detections_3d_msg(header, result, lifted, self.vision_msgs, placement)
            self.pub.publish(msg)
        if self._markers_wanted():
            self.markers.publish(markers_msg(header, result, lifted, self.labels, placement))

    def _output_placement(self, header: Any) -> Transform | None:
        """output_frame <- the camera's frame at the frame's stamp; None (counted, named) where
        the transforms cannot place it."""
        try:
            placed = self.tf_buffer.lookup_transform(
                self.output_frame, header.frame_id, Time.from_msg(header.stamp)
            )
        except TRANSFORM_ERRORS as exc:
            self._count(
                "refused",
                f"cannot place the camera's frame '{header.frame_id}' in output_frame "
                f"'{self.output_frame}': {exc}; publish the transforms on /tf or /tf_static",
            )
            return None
        return Transform.of_msg(placed)

    def check(self) -> tuple[list[tuple[bytes, str]], dict[str, object]]:
        """/diagnostics problems (WARN for frames without 3-D since the last check), the pairing
        rate and the depth's age (frame stamp - depth stamp of the last pair, ms)."""
        with self._lock:
            counts = dict(self.counts)
            new = {k: counts[k] - self._reported[k] for k in counts if k != "paired"}
            self._reported = counts
            tried = sum(counts.values())
            age = None if self.age_ms is None else round(self.age_ms, 3)
            values: dict[str, object] = {
                "topic": self.topic,
                **counts,
                "pairing_rate": round(counts["paired"] / tried, 4) if tried else None,
                "age_ms": age,
                "last_problem": self.last_problem,
            }
            if self.uses_transforms():  # whose buffer places it: tf2_ros's, or ours (pip)
                values["transforms"] = self.tf_kind
        problems = [
            (DiagnosticStatus.WARN, f"{n} frame(s) without 3-D: {self.kind} {reason}")
            for reason, n in new.items()
            if n
        ]
        return problems, {f"{self.kind}_{k}": v for k, v in values.items()}

    def destroy(self) -> None:
        """Unsubscribe and remove the publisher."""
        self.stop()
        self.node.destroy_publisher(self.pub)
        if self.markers is not None:
            self.node.destroy_publisher(self.markers)


#: ``~/cloud_labelled``: the cloud's points in masks, in the camera's optical frame, with the
#: instance id and label id of the mask each lies in (the instance table's column names)
LABELLED_CLOUD = np.dtype([("x", "f4"), ("y", "f4"), ("z", "f4"), ("id", "u4"), ("label_id", "i4")])


class CloudInput(DepthInput):
    """A camera's LiDAR cloud: paired by stamp, brought into the camera's optical frame (the
    frame's ``frame_id``) through the transforms of /tf and /tf_static (ros/tf.py: tf2_ros's
    buffer, or ours where it does not import), projected into the masks; ``~/cloud_labelled``
    carries the points in masks with their instance and label ids.

    Without ``fixed_frame`` the cloud is placed at its own stamp: right for a LiDAR on a parked
    vehicle, or one that moves against the camera. On a moving vehicle the cloud was captured
    up to ``cloud_tolerance_ms`` before or after the frame (about 1 m at 20 m/s and 50 ms), so
    with ``fixed_frame`` (odom, map) it is moved through that frame from its stamp to the
    frame's (tf2's lookup_transform_full)."""

    PAIRED_WITH = "cloud"
    MISSING_ADVICE = "check that the LiDAR runs on the cameras' clock, or raise cloud_tolerance_ms"

    kind = "cloud"

    def __init__(self, *args: Any, fixed_frame: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fixed_frame = fixed_frame
        self.message_type = PointCloud2
        self._unplaced: set[str] = set()  # cloud frames named once in the log
        self.labelled = self.node.create_publisher(
            PointCloud2, f"{self.prefix}cloud_labelled", frame_qos(self.reliability)
        )
        self._points: tuple[np.ndarray, np.ndarray] | None = None  # the last lift's

    def wanted(self) -> bool:
        """Whether a 3-D output, ``~/cloud_labelled`` included, has a subscriber."""
        return super().wanted() or self.labelled.get_subscription_count() > 0

    def lift(self, header: Any, result: FrameResult, pipeline: Pipeline) -> Instances3D | None:
        """As :meth:`DepthInput.lift`, keeping the points of this lift for ``~/cloud_labelled``."""
        self._points = None
        return super().lift(header, result, pipeline)

    def publish(self, header: Any, result: FrameResult, lifted: Instances3D | None) -> None:
        """The 3-D outputs of :class:`DepthInput`, and the labelled cloud while subscribed."""
        super().publish(header, result, lifted)
        if lifted is None or self._points is None or self.labelled.get_subscription_count() == 0:
            return
        xyz, ids = self._points
        inside = np.flatnonzero(ids)
        labels = np.zeros(int(ids.max(initial=0)) + 1, np.int32)
        labels[result.instances.ids] = result.instances.label_id
        columns = {"x": xyz[inside, 0], "y": xyz[inside, 1], "z": xyz[inside, 2]}
        columns |= {"id": ids[inside], "label_id": labels[ids[inside]]}
        self.labelled.publish(convert._table_msg(header, LABELLED_CLOUD, columns))

    def destroy(self) -> None:
        """Unsubscribe and remove the publishers."""
        super().destroy()
        self.node.destroy_publisher(self.labelled)

    def uses_transforms(self) -> bool:
        """Always: the transforms place the cloud in the camera."""
        return True

    def _placement_at(self, header: Any, cloud: PointCloud2, taken_ns: int) -> np.ndarray:
        """The 4x4 matrix taking points of the cloud's frame captured at ``taken_ns`` into the
        camera's optical frame (class doc); tf2's error where the transforms cannot place
        them."""
        camera, frame = header.frame_id, cloud.header.frame_id
        taken = Time(nanoseconds=taken_ns)
        if self.fixed_frame:
            at_frame = Time.from_msg(header.stamp)
            placed = self.tf_buffer.lookup_transform_full(
                camera, at_frame, frame, taken, self.fixed_frame
            )
        else:
            placed = self.tf_buffer.lookup_transform(camera, frame, taken)
        return matrix_of(placed)

    def _unplaceable(self, header: Any, cloud: PointCloud2, error: Exception) -> None:
        """Count a cloud the transforms cannot place; named in the log once per cloud frame."""
        camera, frame = header.frame_id, cloud.header.frame_id
        through = f" through '{self.fixed_frame}'" if self.fixed_frame else ""
        problem = (
            f"cannot place the cloud's frame '{frame}' in the camera's '{camera}'{through}: "
            f"{error}; publish the transforms on /tf (moving parts) or /tf_static "
            "(static_transform_publisher for a fixed mount)"
        )
        if frame not in self._unplaced:
            self._unplaced.add(frame)
            self.node.get_logger().warning(problem)
        self._count("refused", problem, log=False)  # named once per frame, above

    def _in_camera(self, header: Any, cloud: PointCloud2) -> np.ndarray:
        """The cloud's points in the camera's optical frame: each moved with the pose at its own
        capture time where the cloud has per-point times and ``fixed_frame`` is set (a sweep on
        a moving vehicle), else all with the pose at the cloud's stamp. InputError for a cloud
        that cannot be read; tf2's error for one that cannot be placed."""
        return placed_points(
            cloud, stamp_ns(cloud.header.stamp),
            lambda taken: self._placement_at(header, cloud, taken), bool(self.fixed_frame),
        )  # fmt: skip

    def _lift(self, header: Any, result: FrameResult, pipeline: Pipeline) -> Instances3D | None:
        """The cloud lifted through ``Pipeline.lift_cloud``: on the GPU with TensorRT, else on
        the host."""
        stamp = stamp_ns(header.stamp)
        cloud = self._paired(stamp)
        if cloud is None:
            return None
        colour = self.colour_infos.match(stamp) if self.colour_infos is not None else None
        try:
            if colour is None:
                raise InputError(
                    "no camera_info for the frame: set camera_info_topic (its K places the "
                    "masks in 3-D)"
                )
            xyz = self._in_camera(header, cloud)
            lifted, point_ids = pipeline.lift_cloud(result, xyz, intrinsics(colour))
            self._points = (xyz, point_ids)
        except TRANSFORM_ERRORS as exc:
            self._unplaceable(header, cloud, exc)
            return None
        except InputError as exc:
            self._count("refused", f"cloud refused: {exc}")
            return None
        with self._lock:
            self.counts["paired"] += 1
            self.age_ms = (stamp - stamp_ns(cloud.header.stamp)) / 1e6
        return lifted
