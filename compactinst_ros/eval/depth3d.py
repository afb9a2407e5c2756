"""3-D accuracy of a replay: each frame's instances lifted with the bag's registered depth and
compared with a 3-D ground truth file (``compactinst synth --depth`` writes one, objects3d.json).

Per frame (matched to the truth by header stamp, and camera where the truth names cameras):

* the depth image nearest the frame's stamp within ``DEPTH_TOLERANCE_NS`` and both camera_infos
  are taken from the bag; the instances are lifted as the node lifts them (``spatial.lift``);
* predictions are paired one to one with the true objects by 2-D box IoU >= ``MATCH_IOU``,
  highest score first (class-blind: the class is AP's business, this measures position);
* a matched pair's error is the distance between the lifted centroid and the true one; the
  relative error divides it by the true object's distance from the camera.

The sufficient statistics are the per-pair errors and distances and the counts, so that
``replay-fleet`` merges drives exactly (:func:`merge`): medians and percentiles are taken over
all pairs, never averaged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DataError, InputError
from ..spatial import Instances3D, Intrinsics, LiftOptions, lift_depth
from ..spatial.tf_buffer import Transform

if TYPE_CHECKING:
    from ..spatial.tf_buffer import BufferCore
    from ..structures import FrameResult, Instances
    from .bags import BagFrame, ImageBag

#: a depth image pairs with a colour frame when their stamps differ by at most this
DEPTH_TOLERANCE_NS = 5_000_000
#: 2-D box IoU at which a prediction and a true object are the same object
MATCH_IOU = 0.5
#: the plot of error against distance, under the replay's --out
PLOT_NAME = "depth3d_error.png"


def depth_topic_for(image_topic: str, topics: Sequence[str]) -> str | None:
    """The registered depth topic of a colour ``image_topic``: an image topic in the same camera
    namespace with a ``depth`` element (``/cam/image_raw`` -> ``/cam/depth/image_raw``,
    ``/cam/aligned_depth_to_color/image_raw``); None when there is not exactly one."""
    from .bags import is_depth_topic

    base = image_topic.removesuffix("/compressed").rsplit("/", 1)[0]
    found = [t for t in topics if t.startswith(base + "/") and is_depth_topic(t[len(base) :])]
    return found[0] if len(found) == 1 else None


def depth_metres(msg: object, msgtype: str) -> np.ndarray:
    """(H, W) float32 metres, NaN where there is no return, of a deserialised depth message
    (16UC1 millimetres, 32FC1 metres, or image_transport's compressedDepth)."""
    from .. import image_formats
    from .bags import COMPRESSED

    if msgtype == COMPRESSED:
        data = np.asarray(msg.data, np.uint8)
        return image_formats.decode_compressed_depth(str(msg.format), data)
    encoding = str(msg.encoding)
    image = image_formats.array_from_buffer(
        msg.data, int(msg.height), int(msg.width), int(msg.step), encoding
    )
    return image_formats.depth_to_metres(encoding, image)


def intrinsics_of(raw: bytes) -> Intrinsics:
    """The Intrinsics of a CDR-serialised sensor_msgs/CameraInfo."""
    from .bags import CAMERA_INFO, typestore

    info = typestore().deserialize_cdr(raw, CAMERA_INFO)
    return Intrinsics.from_k(list(info.k), int(info.width), int(info.height))


class DepthSource:
    """A bag camera's registered depth and both camera_infos, looked up by the frame's stamp.

    The depth messages are read as the replay advances (frames come in stamp order), holding
    only those within the tolerance of the current frame; ``close`` ends the reading."""

    def __init__(self, bag_path: str | Path, colour: ImageBag, depth_topic: str | None = None):
        from .bags import ImageBag

        topic = depth_topic or depth_topic_for(colour.topic, colour.image_topics)
        if topic is None:
            raise DataError(
                f"bag '{bag_path}' has no depth topic beside {colour.topic} (image topics: "
                f"{', '.join(colour.image_topics)}); record the registered depth "
                "(e.g. /camera/depth/image_raw) to evaluate in 3-D"
            )
        self.topic = topic
        self._colour_infos = dict(colour.camera_infos())
        if not self._colour_infos:
            raise DataError(
                f"bag '{bag_path}' has no camera_info for {colour.topic}; record the camera's "
                "camera_info (its K places the masks in 3-D)"
            )
        self._bag = ImageBag(bag_path, topic)
        # Only a camera_info in the depth's own namespace describes the depth image (the bag's
        # only camera_info may be the colour camera's).
        own = self._bag.camera_info_topic
        same = own is not None and own.rsplit("/", 1)[0] == topic.rsplit("/", 1)[0]
        self._depth_infos = dict(self._bag.camera_infos()) if same else {}
        self._reading = self._bag.frames()
        self._held: list[BagFrame] = []  # read, not older than the last frame's tolerance

    def close(self) -> None:
        """Stop reading the depth topic."""
        self._bag.close()

    @staticmethod
    def _nearest(stamps: Iterable[int], stamp: int) -> int | None:
        best = min(stamps, key=lambda s: abs(s - stamp), default=None)
        return best if best is not None and abs(best - stamp) <= DEPTH_TOLERANCE_NS else None

    def for_frame(self, stamp_ns: int) -> tuple[np.ndarray, Intrinsics, Intrinsics | None] | None:
        """(depth metres, colour K, depth K or None for the colour's) of the frame at
        ``stamp_ns``; None when no depth image or colour camera_info lies within tolerance."""
        from .bags import typestore

        while not self._held or self._held[-1].stamp_ns <= stamp_ns + DEPTH_TOLERANCE_NS:
            frame = next(self._reading, None)
            if frame is None:
                break
            self._held.append(frame)
        self._held = [f for f in self._held if f.stamp_ns >= stamp_ns - DEPTH_TOLERANCE_NS]
        by_stamp = {f.stamp_ns: f for f in self._held}
        near = self._nearest(by_stamp, stamp_ns)
        colour = self._nearest(self._colour_infos, stamp_ns)
        if near is None or colour is None:
            return None
        frame = by_stamp[near]
        depth = depth_metres(typestore().deserialize_cdr(frame.raw, frame.msgtype), frame.msgtype)
        own = self._nearest(self._depth_infos, near)
        depth_k = intrinsics_of(self._depth_infos[own]) if own is not None else None
        return depth, intrinsics_of(self._colour_infos[colour]), depth_k

    def covers(self, stamp_ns: int) -> bool:
        """Whether the frame at ``stamp_ns`` has its depth and camera_infos."""
        return self.for_frame(stamp_ns) is not None

    def lift(
        self, stamp_ns: int, raster: np.ndarray, ids: np.ndarray, options: LiftOptions
    ) -> Instances3D | None:
        """The frame's instances lifted with its depth (None: no depth within tolerance)."""
        depth = self.for_frame(stamp_ns)
        return None if depth is None else lift_depth(raster, ids, *depth, options)


#: a cloud pairs with a frame when their stamps differ by at most this (the node's default)
CLOUD_TOLERANCE_NS = 50_000_000
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"


def camera_frame_of(bag: ImageBag) -> str:
    """The camera's frame: its camera_info's frame_id, as its frames' (DataError without one)."""
    from .bags import typestore

    infos = bag.camera_infos()
    if not infos:
        raise DataError(
            f"bag '{bag.path}' has no camera_info for {bag.topic}; record the camera's "
            "camera_info (its K places the masks in 3-D)"
        )
    return typestore().deserialize_cdr(infos[0][1], CAMERA_INFO).header.frame_id


def bag_transforms(bag: ImageBag) -> BufferCore:
    """Every transform of the bag's /tf and /tf_static in one tf2-algorithm buffer that holds
    the whole drive (not tf2's 10 s)."""
    from ..spatial.tf_buffer import BufferCore
    from .bags import typestore

    store, buffer = typestore(), BufferCore(cache_time_ns=1 << 62)
    for topic, msgtype, _, raw in bag.messages_of(["/tf", "/tf_static"]):
        for t in store.deserialize_cdr(raw, msgtype).transforms:
            stamp = t.header.stamp.sec * 1_000_000_000 + t.header.stamp.nanosec
            buffer.set_transform(
                t.header.frame_id, t.child_frame_id, stamp, Transform.of_msg(t),
                is_static=topic == "/tf_static",
            )  # fmt: skip
    return buffer

class CloudSource:
    """A bag's LiDAR, placed in the camera at each frame's stamp through the bag's /tf and
    /tf_static (the tf2-algorithm buffer, ``spatial.tf_buffer``), as the node places it with
    ``fixed_frame``: each point with the vehicle's pose at its own time (``compensate``), or,
    to show what that is worth, the whole cloud with the transforms at its stamp alone.

    The clouds are read as the replay advances (its frames come in stamp order), holding only
    those within the tolerance of the current frame, as ``DepthSource`` reads depth: a drive's
    clouds do not fit in memory. The transforms of the whole drive are read at the start."""

    def __init__(
        self, colour: ImageBag, topic: str, fixed_frame: str, compensate: bool = True
    ) -> None:
        from .bags import ImageBag, typestore

        self.topic, self.fixed_frame, self.compensate = topic, fixed_frame, compensate
        self._colour_infos = dict(colour.camera_infos())
        if not self._colour_infos:
            raise DataError(
                f"bag '{colour.path}' has no camera_info for {colour.topic}; record the "
                "camera's camera_info (its K places the masks in 3-D)"
            )
        self._store = typestore()
        self.buffer = bag_transforms(colour)
        self._bag = ImageBag(colour.path, colour.topic)  # a reader of its own for the clouds
        self._reading = self._bag.messages_of([topic])
        self._clouds: dict[int, object] = {}  # read, not older than the last frame's tolerance
        self._camera_frame = camera_frame_of(colour)

    def _paired(self, stamp_ns: int) -> tuple[int | None, int | None]:
        """The stamps of the frame's cloud (within CLOUD_TOLERANCE_NS) and colour camera_info."""
        while not self._clouds or max(self._clouds) <= stamp_ns + CLOUD_TOLERANCE_NS:
            found = next(self._reading, None)
            if found is None:
                break
            msg = self._store.deserialize_cdr(found[3], found[1])
            self._clouds[msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec] = msg
        old = [s for s in self._clouds if s < stamp_ns - CLOUD_TOLERANCE_NS]
        for s in old:
            del self._clouds[s]
        near = min(self._clouds, key=lambda s: abs(s - stamp_ns), default=None)
        if near is not None and abs(near - stamp_ns) > CLOUD_TOLERANCE_NS:
            near = None
        return near, DepthSource._nearest(self._colour_infos, stamp_ns)

    def covers(self, stamp_ns: int) -> bool:
        """Whether the frame at ``stamp_ns`` has a cloud and its camera_info."""
        return None not in self._paired(stamp_ns)

    def lift(
        self, stamp_ns: int, raster: np.ndarray, ids: np.ndarray, options: LiftOptions
    ) -> Instances3D | None:
        """The frame's instances lifted with the nearest cloud (None: none within tolerance);
        InputError where the transforms cannot place it."""
        from ..spatial import lift_cloud
        from ..spatial.cloud import placed_points
        from ..spatial.tf_buffer import TransformException

        near, colour = self._paired(stamp_ns)
        if near is None or colour is None:
            return None
        cloud = self._clouds[near]
        camera = self._camera_frame
        frame = cloud.header.frame_id

        def placement(taken: int) -> np.ndarray:
            if self.compensate:  # through the fixed frame, to the frame's stamp
                full = self.buffer.lookup_transform_full
                return full(camera, stamp_ns, frame, taken, self.fixed_frame)[0].matrix()
            return self.buffer.lookup_transform(camera, frame, taken)[0].matrix()

        try:
            xyz = placed_points(cloud, near, placement, self.compensate)
        except TransformException as exc:
            raise InputError(f"the cloud cannot be placed in the camera: {exc}") from None
        k = intrinsics_of(self._colour_infos[colour])
        return lift_cloud(raster, ids, xyz, k, options)[0]

    def close(self) -> None:
        """Stop reading the clouds."""
        self._bag.close()


class Truth3D:
    """objects3d.json: per image (by stamp, and camera where given) its objects' 3-D truth."""

    def __init__(self, path: str | Path) -> None:
        try:
            data = json.loads(Path(path).read_text())
            images = data["images"]
            self._by_stamp = {
                (img.get("camera"), int(img["stamp_ns"])): img["objects"] for img in images
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"3-D ground truth '{path}' cannot be read ({type(exc).__name__}: {exc}); pass "
                "the objects3d.json of 'compactinst synth --bag --depth' (images with stamp_ns "
                "and objects with bbox and centroid)"
            ) from None
        self.path = Path(path)
        self.cameras = {camera for camera, _ in self._by_stamp}

    def objects(self, stamp_ns: int, camera: str | None = None) -> list[dict] | None:
        """The true objects of the frame at ``stamp_ns`` (None: the file has no such frame)."""
        key = camera if camera in self.cameras else None
        return self._by_stamp.get((key, stamp_ns))


def box_iou(boxes: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(N, M) IoU of x0, y0, x1, y1 boxes (x1, y1 exclusive)."""
    lo = np.maximum(boxes[:, None, :2], truth[None, :, :2])
    hi = np.minimum(boxes[:, None, 2:], truth[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area = lambda b: np.prod(b[:, 2:] - b[:, :2], axis=1)  # noqa: E731
    return inter / (area(boxes)[:, None] + area(truth)[None, :] - inter)


def match_boxes(boxes: np.ndarray, scores: np.ndarray, truth: np.ndarray) -> list[tuple[int, int]]:
    """One-to-one (prediction, truth) pairs with IoU >= MATCH_IOU, highest score first, each
    prediction taking the free truth it overlaps most."""
    if len(boxes) == 0 or len(truth) == 0:
        return []
    iou = box_iou(boxes.astype(np.float64), truth.astype(np.float64))
    taken = np.zeros(len(truth), bool)
    pairs = []
    for i in np.argsort(-scores, kind="stable"):
        free = np.where(taken, -1.0, iou[i])
        j = int(np.argmax(free))
        if free[j] >= MATCH_IOU:
            taken[j] = True
            pairs.append((int(i), j))
    return pairs


@dataclass
class Depth3DEvaluator:
    """Accumulates the 3-D errors of a replay's frames (``add``), then summarises them."""

    truth: Truth3D
    source: DepthSource
    camera: str | None = None
    options: LiftOptions = field(default_factory=LiftOptions)
    #: the same frames scored another way, reported beside (a LiDAR placed without its motion)
    baseline: Depth3DEvaluator | None = None
    errors_m: list[float] = field(default_factory=list)
    refused_reasons: set[str] = field(default_factory=set)
    distances_m: list[float] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("frames", "no_truth", "no_depth", "refused", "objects", "matched", "no_support"), 0
        )
    )

    def add(self, stamp_ns: int, result: FrameResult) -> None:
        """Lift one replayed frame and score it against its truth (and by the baseline)."""
        if self.baseline is not None:
            self.baseline.add(stamp_ns, result)
        self.counts["frames"] += 1
        objects = self.truth.objects(stamp_ns, self.camera)
        if objects is None:
            self.counts["no_truth"] += 1
            return
        self.counts["objects"] += len(objects)
        inst = result.instances
        try:
            if result.instance_raster is None or len(inst) == 0 or not objects:
                if not self.source.covers(stamp_ns):
                    self.counts["no_depth"] += 1
                return
            lifted = self.source.lift(stamp_ns, result.instance_raster, inst.ids, self.options)
            if lifted is None:
                self.counts["no_depth"] += 1
                return
        except InputError as exc:  # a depth image or camera_info that cannot be used
            self.counts["refused"] += 1
            self.refused_reasons.add(str(exc))
            return
        truth_boxes = np.array([o["bbox"] for o in objects], np.float64)
        truth_boxes[:, 2:] += truth_boxes[:, :2]
        for i, j in match_boxes(inst.box, inst.score, truth_boxes):
            self.counts["matched"] += 1
            if not lifted.valid[i]:
                self.counts["no_support"] += 1
                continue
            true = np.asarray(objects[j]["centroid"], np.float64)
            self.errors_m.append(float(np.linalg.norm(lifted.centroid[i] - true)))
            self.distances_m.append(float(objects[j]["distance"]))

    def close(self) -> None:
        """Stop reading the bag (this evaluation's source and the baseline's)."""
        self.source.close()
        if self.baseline is not None:
            self.baseline.close()

    def statistics(self) -> dict:
        """The sufficient statistics (exactly mergeable): per-pair errors, distances, counts."""
        return {
            "errors_m": [round(e, 6) for e in self.errors_m],
            "distances_m": [round(d, 6) for d in self.distances_m],
            "refused_reasons": sorted(self.refused_reasons),
            **self.counts,
        }

    def blocks(self) -> dict:
        """The lockstep block's entries: ``depth3d`` (figures) and ``depth3d_statistics``."""
        stats = self.statistics()
        out = {"depth3d": summarise(stats), "depth3d_statistics": stats}
        if self.baseline is not None:
            baseline = self.baseline.statistics()
            out["depth3d_uncompensated"] = summarise(baseline)
            out["depth3d_uncompensated_statistics"] = baseline
        return out


def summarise(stats: Mapping) -> dict:
    """The 3-D figures of ``stats``: pairs, median and p90 error in metres and in % of the
    object's distance (percentiles of the per-pair relative errors)."""
    errors = np.asarray(stats["errors_m"], np.float64)
    relative = errors / np.asarray(stats["distances_m"], np.float64) * 100.0
    out: dict = {k: stats[k] for k in stats if k not in ("errors_m", "distances_m")}
    out["refused_reasons"] = sorted(set(stats.get("refused_reasons", [])))
    out["lifted"] = len(errors)
    if len(errors):
        out["centroid_error_m"] = {
            "median": round(float(np.median(errors)), 4),
            "p90": round(float(np.percentile(errors, 90)), 4),
        }
        out["centroid_error_pct"] = {
            "median": round(float(np.median(relative)), 3),
            "p90": round(float(np.percentile(relative, 90)), 3),
        }
    return out


def merge(parts: Sequence[Mapping]) -> dict:
    """The statistics of one evaluation over all ``parts`` (concatenated pairs, summed counts)."""
    merged: dict = {"errors_m": [], "distances_m": []}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list):
                merged[key] = merged.get(key, []) + value
            else:
                merged[key] = merged.get(key, 0) + value
    return merged


def summary_line(figures: Mapping) -> str:
    """``3-D: N matched, centroid error median A m (B %), p90 C m (D %)``."""
    if not figures.get("lifted"):
        refused = figures.get("refused_reasons") or []
        return (
            f"3-D: 0 matched with depth ({figures.get('matched', 0)} matched in 2-D, "
            f"{figures.get('no_depth', 0)} frames without depth within "
            f"{DEPTH_TOLERANCE_NS / 1e6:g} ms, {figures.get('refused', 0)} refused"
            + (f": {refused[0]}" if refused else "")
            + ")"
        )
    m, pct = figures["centroid_error_m"], figures["centroid_error_pct"]
    return (
        f"3-D: {figures['lifted']} matched, centroid error median {m['median']:.3f} m "
        f"({pct['median']:.1f} %), p90 {m['p90']:.3f} m ({pct['p90']:.1f} %)"
    )


def plot(stats: Mapping, path: Path) -> Path | None:
    """Scatter of the centroid error (m and %) against the true distance; None: no pairs."""
    if not stats["errors_m"]:
        return None
    from .plots import pyplot, save_figure

    plt = pyplot()

    errors, distances = np.asarray(stats["errors_m"]), np.asarray(stats["distances_m"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].scatter(distances, errors, s=8, alpha=0.6)
    axes[0].set(xlabel="true distance (m)", ylabel="centroid error (m)")
    axes[1].scatter(distances, errors / distances * 100.0, s=8, alpha=0.6)
    axes[1].set(xlabel="true distance (m)", ylabel="centroid error (% of distance)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"3-D centroid error of {len(errors)} matched instances")
    save_figure(plt, fig, path)
    return path


#: the frame a LiDAR drive's clouds are moved through (the vehicle's odometry)
FIXED_FRAME = "odom"


def uncompensated_evaluator(bag: ImageBag, gt_3d: str | Path) -> Depth3DEvaluator | None:
    """The evaluator that places ``bag``'s LiDAR clouds at their stamps alone (no motion
    compensation), the figure a drive's compensated 3-D is reported beside; None where the
    camera has a depth image beside it or the bag has no cloud."""
    from .bags import POINTCLOUD2, camera_name

    clouds = sorted(t for t, msgtype in bag.topic_types.items() if msgtype == POINTCLOUD2)
    if depth_topic_for(bag.topic, bag.image_topics) is not None or not clouds:
        return None
    source = CloudSource(bag, clouds[0], FIXED_FRAME, False)
    return Depth3DEvaluator(Truth3D(gt_3d), source, camera_name(bag.topic))


def open_evaluator(bag: ImageBag, gt_3d: str | Path) -> Depth3DEvaluator:
    """The evaluator of a replay of ``bag``'s camera against the 3-D truth ``gt_3d``, the
    truth's frames of this camera: with the depth topic beside the camera's, else with the
    bag's LiDAR (its first PointCloud2 topic) compensated for the vehicle's motion through
    FIXED_FRAME, beside a ``baseline`` that places each cloud at its stamp alone."""
    from .bags import camera_name

    camera = camera_name(bag.topic)
    baseline = uncompensated_evaluator(bag, gt_3d)
    if baseline is None:
        return Depth3DEvaluator(Truth3D(gt_3d), DepthSource(bag.path, bag), camera)
    compensated = CloudSource(bag, baseline.source.topic, FIXED_FRAME)
    return Depth3DEvaluator(baseline.truth, compensated, camera, baseline=baseline)


def score_published(
    truth: Truth3D,
    camera: str | None,
    published: Iterable[tuple[int, Instances, dict[int, np.ndarray]]],
    into_output: Transform,
) -> dict:
    """The statistics (as ``Depth3DEvaluator.statistics``) of 3-D detections a node published:
    per frame (recorded stamp, its instance table, instance id -> published centroid in the
    output frame), the table's boxes matched to the truth's as lockstep matches them, each
    matched instance's error against the true centroid moved into the output frame by
    ``into_output`` (output frame <- camera). A matched instance the node published no 3-D
    for counts as ``no_support``."""
    errors: list[float] = []
    distances: list[float] = []
    counts = dict.fromkeys(
        ("frames", "no_truth", "no_depth", "refused", "objects", "matched", "no_support"), 0
    )
    for stamp, inst, centroids in published:
        counts["frames"] += 1
        objects = truth.objects(stamp, camera)
        if objects is None:
            counts["no_truth"] += 1
            continue
        counts["objects"] += len(objects)
        if not objects or not len(inst):
            continue
        boxes = np.array([o["bbox"] for o in objects], np.float64)
        boxes[:, 2:] += boxes[:, :2]
        for i, j in match_boxes(inst.box, inst.score, boxes):
            counts["matched"] += 1
            got = centroids.get(int(inst.ids[i]))
            if got is None:
                counts["no_support"] += 1
                continue
            true = into_output.apply(np.asarray([objects[j]["centroid"]], np.float64))[0]
            errors.append(float(np.linalg.norm(got - true)))
            distances.append(float(objects[j]["distance"]))
    return {
        "errors_m": [round(e, 6) for e in errors],
        "distances_m": [round(d, 6) for d in distances],
        "refused_reasons": [],
        **counts,
    }


def depth3d_plots(report: Mapping, out: Path) -> list[str]:
    """The error-against-distance plot of a replay report's lockstep 3-D evaluation (names
    relative to ``out``; none without one)."""
    stats = report["modes"].get("lockstep", {}).get("depth3d_statistics")
    if not stats or plot(stats, out / PLOT_NAME) is None:
        return []
    return [PLOT_NAME]


def merged_figures(
    blocks: Sequence[Mapping], key: str = "depth3d_statistics"
) -> dict | None:
    """The 3-D figures of one evaluation over the frames of several lockstep blocks (the
    drives of a fleet), from their statistics under ``key`` (``depth3d_uncompensated_statistics``:
    the LiDAR drives' clouds placed without their motion); None when none has them."""
    parts = [b[key] for b in blocks if b.get(key)]
    return summarise(merge(parts)) if parts else None
