"""Ground truth for replay: COCO instance JSON and/or COCO panoptic JSON + PNGs, matched to frames.

A GT image matches a bag frame by header stamp when its entry carries one (``stamp_ns``: int
nanoseconds, or ``stamp``: ``{"sec", "nanosec"}`` / int ns / float seconds, or a stamp-named
``file_name`` such as ``1700000000123456789.png`` or ``1700000000.123456789.png``), otherwise by
``frame_index`` or, with ``match="index"``, by its position in id order. With several cameras
each GT image names its camera (``"camera"``: the camera's name or image topic) and is matched
among that camera's frames only (``GroundTruth.for_camera``).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, InputError
from ..image_formats import read_image
from .bags import camera_name

MATCH_MODES = ("auto", "stamp", "index")
_STAMP_NAME = re.compile(r"^(?:(?P<ns>\d{16,20})|(?P<sec>\d{9,10})[._](?P<nsec>\d{9}))\.\w+$")


@dataclass(frozen=True)
class Category:
    """One GT category (COCO id, name, thing/stuff)."""

    id: int
    name: str
    isthing: bool


def image_stamp_ns(entry: dict) -> int | None:
    """Header stamp of a GT image entry in ns, or None when it carries none."""
    if "stamp_ns" in entry:
        return int(entry["stamp_ns"])
    stamp = entry.get("stamp")
    if stamp is None:
        return _stamp_from_file_name(str(entry.get("file_name", "")))
    if isinstance(stamp, dict):
        return int(stamp["sec"]) * 1_000_000_000 + int(stamp.get("nanosec", 0))
    if isinstance(stamp, float):
        return round(stamp * 1e9)
    return int(stamp)


def _stamp_from_file_name(name: str) -> int | None:
    """Stamp-named frames (bag extraction tools): ``<ns>.png`` or ``<sec>.<nanosec>.png``."""
    match = _STAMP_NAME.match(Path(name).name)
    if match is None:
        return None
    if match["nsec"] is not None:
        return int(match["sec"]) * 1_000_000_000 + int(match["nsec"])
    return int(match["ns"])


def read_json_object(
    path: Path, what: str, keys: tuple[str, ...], form: str, missing_fix: str = ""
) -> dict:
    """The JSON object in ``path`` with ``keys``; DataError naming ``what`` and the problem
    (missing file, not JSON, or not ``form``)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{what} '{path}' does not exist{missing_fix}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{what} '{path}' is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or any(key not in data for key in keys):
        needs = " and ".join(f"'{key}'" for key in keys)
        raise DataError(f"{what} '{path}' is not {form}: it needs {needs}")
    return data


def _read_json(path: Path, what: str) -> dict:
    return read_json_object(path, what, ("images", "categories"), "COCO format")


class GroundTruth:
    """COCO instance and/or panoptic annotations plus their frame index -> image id matching."""

    def __init__(
        self,
        instances_json: str | Path | None = None,
        panoptic_json: str | Path | None = None,
        panoptic_dir: str | Path | None = None,
    ) -> None:
        if instances_json is None and panoptic_json is None:
            raise DataError("no ground truth given; pass --gt-instances and/or --gt-panoptic")
        self.instances = _read_json(Path(instances_json), "instance GT") if instances_json else None
        self.panoptic = _read_json(Path(panoptic_json), "panoptic GT") if panoptic_json else None
        self.panoptic_dir: Path | None = None
        if self.panoptic is not None:
            folder = Path(panoptic_dir) if panoptic_dir else Path(panoptic_json).with_suffix("")
            if not folder.is_dir():
                raise DataError(
                    f"panoptic PNG folder '{folder}' does not exist; pass --gt-panoptic-dir"
                )
            self.panoptic_dir = folder
            self._pan_by_image = {int(a["image_id"]): a for a in self.panoptic["annotations"]}
        if self.instances is not None:
            for i, ann in enumerate(self.instances.get("annotations", []), start=1):
                ann.setdefault("id", i)
                ann.setdefault("iscrowd", 0)
        self.categories: dict[int, Category] = {}
        for source in (self.instances, self.panoptic):
            for c in source["categories"] if source else []:
                isthing = bool(c.get("isthing", source is self.instances))
                self.categories[int(c["id"])] = Category(int(c["id"]), str(c["name"]), isthing)
        images: dict[int, dict] = {}
        for source in (self.panoptic, self.instances):
            for entry in source["images"] if source else []:
                images[int(entry["id"])] = entry
        self.images = images
        self.frame_to_image: dict[int, int] = {}
        self.unmatched_images = 0  # GT images that met no frame in the last ``match``

    def match(
        self, stamps_ns: list[int], mode: str = "auto", tolerance_ns: int = 1_000_000
    ) -> dict[int, int]:
        """Match bag frames (by index, header stamps given) to GT image ids; DataError if none."""
        if mode not in MATCH_MODES:
            raise DataError(f"match mode '{mode}' is unknown; choose one of {MATCH_MODES}")
        entries = sorted(self.images.values(), key=lambda e: int(e["id"]))
        gt_stamps = [image_stamp_ns(e) for e in entries]
        if mode == "auto":
            mode = "stamp" if all(s is not None for s in gt_stamps) else "index"
        matched: dict[int, int] = {}
        shared: dict[int, list[int]] = {}  # frame -> every GT image on its stamp
        if mode == "stamp":
            if not stamps_ns:
                raise DataError("the bag has no frames to match ground truth against")
            bag = np.asarray(stamps_ns, np.int64)
            order = np.argsort(bag, kind="stable")
            for entry, stamp in zip(entries, gt_stamps, strict=True):
                if stamp is None:
                    continue
                pos = int(np.searchsorted(bag[order], stamp))
                near = [order[p] for p in (pos - 1, pos) if 0 <= p < len(bag)]
                best = min(near, key=lambda f: abs(int(bag[f]) - stamp))
                if abs(int(bag[best]) - stamp) <= tolerance_ns:
                    matched[int(best)] = int(entry["id"])
                    shared.setdefault(int(best), []).append(int(entry["id"]))
            how = (
                f"by header stamp (GT {min(s for s in gt_stamps if s is not None)}.."
                f"{max(s for s in gt_stamps if s is not None)} ns, bag "
                f"{min(stamps_ns)}..{max(stamps_ns)} ns, tolerance {tolerance_ns} ns)"
                if any(s is not None for s in gt_stamps)
                else "by header stamp (the GT images carry no 'stamp'/'stamp_ns')"
            )
        else:
            stamped = [s for s in gt_stamps if s is not None]
            if stamped and stamps_ns and (
                max(stamped) < min(stamps_ns) - tolerance_ns
                or min(stamped) > max(stamps_ns) + tolerance_ns
            ):
                raise DataError(
                    f"--match index pairs frames by position, but the GT images' stamps "
                    f"({min(stamped)}..{max(stamped)} ns) lie outside this bag's "
                    f"({min(stamps_ns)}..{max(stamps_ns)} ns): GT of another recording? Pass the "
                    "GT of this drive, or remove 'stamp_ns' from its images to pair by position"
                )
            for position, entry in enumerate(entries):
                frame = int(entry.get("frame_index", position))
                if 0 <= frame < len(stamps_ns):
                    matched[frame] = int(entry["id"])
            how = f"by frame index (GT has {len(entries)} images, bag {len(stamps_ns)} frames)"
        if not matched:
            raise DataError(
                f"ground truth matches no frame of the bag {how}; check that the GT belongs to "
                "this recording and the image topic, add 'stamp_ns' to the GT image entries, "
                "or use --match index"
            )
        doubled = {f: ids for f, ids in shared.items() if len(ids) > 1}
        if doubled:
            frame, ids = min(doubled.items())
            cameras = sorted({str(self.images[i].get("camera", "?")) for i in ids})
            raise DataError(
                f"{sum(map(len, doubled.values()))} GT images share the stamps of "
                f"{len(doubled)} frames (frame {frame}: GT images {ids}, cameras "
                f"{', '.join(cameras)}): the GT holds several images per stamp, so a frame's "
                "score would depend on which one it meets; give each GT image its \"camera\" "
                "and replay the cameras with --cameras, or use GT of this topic only"
            )
        self.frame_to_image = matched
        self.unmatched_images = len(self.images) - len(matched)
        return matched

    @property
    def cameras(self) -> list[str]:
        """The cameras the GT images name (``"camera"``), sorted; empty for one-camera GT."""
        return sorted({str(e["camera"]) for e in self.images.values() if "camera" in e})

    def for_topic(self, topic: str) -> GroundTruth:
        """The GT of a one-camera replay of ``topic``: all of it when the GT names no camera,
        else the images of the camera that ``topic`` is (``for_camera``); DataError when the
        GT names cameras but not this one (a one-camera replay must not score one camera's
        frames against another camera's images of the same stamps)."""
        if not self.cameras:
            return self
        view = self.for_camera(camera_name(topic), topic)
        if not view.images:
            raise DataError(
                f"the ground truth is of the cameras {', '.join(self.cameras)}, none of them "
                f"the replayed topic {topic} (camera {camera_name(topic)}); pick that camera's "
                "topic with --topic, or replay every camera with --cameras all"
            )
        return view

    def for_camera(self, camera: str, topic: str) -> GroundTruth:
        """The GT of one camera: the images whose ``camera`` is ``camera`` or ``topic`` (the
        annotations stay shared: scoring reads only the matched images'); DataError when no
        image names a camera, since frames of several cameras share their stamps."""
        named = {str(e["camera"]) for e in self.images.values() if "camera" in e}
        if not named:
            raise DataError(
                "the ground truth names no camera, but the replay has several; give every GT "
                'image entry "camera": <camera name or image topic> (compactinst synth --bag '
                "--cameras writes it)"
            )
        view = copy.copy(self)
        view.images = {i: e for i, e in self.images.items() if e.get("camera") in (camera, topic)}
        view.frame_to_image = {}
        return view

    def image(self, image_id: int) -> dict:
        """The GT image entry (height, width, file_name, ...)."""
        return self.images[image_id]

    def panoptic_frame(self, image_id: int) -> tuple[np.ndarray, dict[int, tuple[int, bool]]]:
        """GT panoptic id raster (H, W) int64 and {segment id: (category id, iscrowd)}."""
        if self.panoptic is None or self.panoptic_dir is None:
            raise DataError("no panoptic ground truth loaded; pass --gt-panoptic")
        ann = self._pan_by_image.get(image_id)
        if ann is None:
            raise DataError(f"panoptic GT has no annotation for image id {image_id}")
        path = self.panoptic_dir / ann["file_name"]
        try:
            bgr = read_image(path)
        except InputError as exc:
            raise DataError(f"panoptic ground truth: {exc}") from None
        rgb = bgr.astype(np.int64)[..., ::-1]
        ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
        segments = {
            int(s["id"]): (int(s["category_id"]), bool(s.get("iscrowd", 0)))
            for s in ann["segments_info"]
        }
        return ids, segments

    @property
    def has_tracks(self) -> bool:
        """Whether the panoptic GT names a ``track_id`` for its things (``synth --sequence``)."""
        if self.panoptic is None:
            return False
        annotations = self.panoptic["annotations"]
        return any("track_id" in s for a in annotations for s in a["segments_info"])

    def track_ids(self, image_id: int) -> dict[int, int]:
        """{panoptic segment id: track id} of the image's segments that carry a ``track_id``."""
        ann = self._pan_by_image.get(image_id, {"segments_info": []})
        return {int(s["id"]): int(s["track_id"]) for s in ann["segments_info"] if "track_id" in s}

    def semantic_frame(self, image_id: int) -> np.ndarray:
        """GT semantic raster (category id per pixel, 0 = void) from the panoptic GT."""
        ids, segments = self.panoptic_frame(image_id)
        if not segments:
            return np.zeros(ids.shape, np.int64)
        seg_ids = np.array([0, *segments], np.int64)
        cats = np.array([0, *(c for c, _ in segments.values())], np.int64)
        order = np.argsort(seg_ids)
        pos = np.clip(np.searchsorted(seg_ids[order], ids), 0, len(seg_ids) - 1)
        hit = seg_ids[order][pos] == ids
        return np.where(hit, cats[order][pos], 0)
