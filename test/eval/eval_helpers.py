"""Helpers for replay/eval tests: tiny scenes with exact COCO instance + panoptic ground truth."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from compactinst_ros.eval.bags import write_image_bag
from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.structures import FrameMeta, FrameResult, Instances, Segments

THINGS = {1: "person", 2: "vehicle"}
STUFF = {5: "field", 7: "sky"}
T0 = 1_700_000_000_000_000_000
PERIOD_NS = 100_000_000


@dataclass
class Scene:
    """One frame: BGR image, panoptic id raster, segments {id: (category, iscrowd)}."""

    image: np.ndarray
    panoptic: np.ndarray
    segments: dict[int, tuple[int, bool]]
    stamp_ns: int


def make_scenes(n: int = 4, h: int = 48, w: int = 64, seed: int = 0) -> list[Scene]:
    """Sky above a random horizon, field below, 1-3 rectangles/ellipses of things on top."""
    rng = np.random.default_rng(seed)
    scenes = []
    for i in range(n):
        horizon = int(rng.integers(h // 4, h // 2))
        pan = np.full((h, w), 5, np.int64)
        pan[:horizon] = 7
        segments: dict[int, tuple[int, bool]] = {5: (5, False), 7: (7, False)}
        count = {1: 0, 2: 0}
        for _ in range(int(rng.integers(1, 4))):
            cat = int(rng.integers(1, 3))
            count[cat] += 1
            seg_id = cat * 1000 + count[cat]
            y0, x0 = int(rng.integers(0, h - 12)), int(rng.integers(0, w - 12))
            y1, x1 = y0 + int(rng.integers(8, 20)), x0 + int(rng.integers(8, 24))
            if cat == 1:
                pan[y0:y1, x0:x1] = seg_id
            else:
                m = np.zeros((h, w), np.uint8)
                cv2.ellipse(
                    m,
                    ((x0 + x1) // 2, (y0 + y1) // 2),
                    ((x1 - x0) // 2, (y1 - y0) // 2),
                    0,
                    0,
                    360,
                    1,
                    -1,
                )
                pan[m > 0] = seg_id
            segments[seg_id] = (cat, False)
        present = set(np.unique(pan).tolist())
        segments = {k: v for k, v in segments.items() if k in present}
        palette = {5: (40, 160, 60), 7: (230, 180, 120), 1: (30, 30, 200), 2: (200, 200, 200)}
        image = np.zeros((h, w, 3), np.uint8)
        for seg_id, (cat, _) in segments.items():
            image[pan == seg_id] = palette[cat]
        image = np.clip(image + rng.normal(0, 4, image.shape), 0, 255).astype(np.uint8)
        scenes.append(Scene(image, pan, segments, T0 + i * PERIOD_NS))
    return scenes


def write_gt(scenes: list[Scene], out: Path, stamps: bool = True) -> tuple[Path, Path, Path]:
    """COCO instance JSON, COCO panoptic JSON and PNG folder for ``scenes``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "pan").mkdir(exist_ok=True)
    cats = [{"id": c, "name": n, "isthing": 1} for c, n in THINGS.items()]
    cats += [{"id": c, "name": n, "isthing": 0} for c, n in STUFF.items()]
    images, anns, pan_anns = [], [], []
    for i, s in enumerate(scenes, start=1):
        h, w = s.panoptic.shape
        entry = {"id": i, "file_name": f"{i:04d}.jpg", "height": h, "width": w}
        if stamps:
            entry["stamp_ns"] = s.stamp_ns
        images.append(entry)
        rgb = np.stack([s.panoptic % 256, s.panoptic // 256 % 256, s.panoptic // 65536], -1)
        cv2.imwrite(str(out / "pan" / f"{i:04d}.png"), rgb[..., ::-1].astype(np.uint8))
        infos = []
        for seg_id, (cat, crowd) in s.segments.items():
            m = s.panoptic == seg_id
            infos.append(
                {"id": seg_id, "category_id": cat, "iscrowd": int(crowd), "area": int(m.sum())}
            )
            if cat in THINGS:
                rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
                ys, xs = np.nonzero(m)
                anns.append(
                    {
                        "id": len(anns) + 1,
                        "image_id": i,
                        "category_id": cat,
                        "segmentation": {
                            "size": rle["size"],
                            "counts": str(rle["counts"], "ascii"),
                        },
                        "area": int(m.sum()),
                        "iscrowd": int(crowd),
                        "bbox": [
                            int(xs.min()),
                            int(ys.min()),
                            int(np.ptp(xs)) + 1,
                            int(np.ptp(ys)) + 1,
                        ],
                    }
                )
        pan_anns.append({"image_id": i, "file_name": f"{i:04d}.png", "segments_info": infos})
    inst = out / "instances.json"
    inst.write_text(
        json.dumps(
            {"images": images, "annotations": anns, "categories": [c for c in cats if c["isthing"]]}
        )
    )
    pan = out / "panoptic.json"
    pan.write_text(json.dumps({"images": images, "annotations": pan_anns, "categories": cats}))
    return inst, pan, out / "pan"


def oracle_result(scene: Scene) -> FrameResult:
    """The scene's ground truth as a pipeline FrameResult (what a perfect model returns)."""
    h, w = scene.panoptic.shape
    things = [k for k, (c, _) in scene.segments.items() if c in THINGS]
    raster = np.zeros((h, w), np.uint16)
    for n, seg_id in enumerate(things, start=1):
        raster[scene.panoptic == seg_id] = n
    cats = np.array([scene.segments[k][0] for k in things], np.int32)
    instances = Instances(
        ids=np.arange(1, len(things) + 1, dtype=np.uint16),
        class_index=cats - 1,
        label_id=cats,
        score=np.ones(len(things), np.float32),
        box=np.zeros((len(things), 4), np.float32),
        area=np.array([(raster == n).sum() for n in range(1, len(things) + 1)], np.int64),
    )
    ids = np.array(list(scene.segments), np.int32)
    labels = np.array([c for c, _ in scene.segments.values()], np.int32)
    segments = Segments(
        ids=ids,
        label_id=labels,
        isthing=np.isin(labels, list(THINGS)),
        score=np.ones(len(ids), np.float32),
        area=np.array([(scene.panoptic == i).sum() for i in ids], np.int64),
    )
    semantic = scene.panoptic // 1000 + np.where(scene.panoptic < 1000, scene.panoptic, 0)
    return FrameResult(
        meta=FrameMeta.letterbox(h, w, 64, 64),
        instances=instances,
        instance_raster=raster,
        segments=segments,
        panoptic_raster=scene.panoptic.astype(np.int32),
        semantic_raster=semantic.astype(np.uint8),
        timings_ms={"inference": 1.0},
    )


def scene_bag(scenes: list[Scene], path: Path, storage: str, compressed: str | None = None) -> Path:
    """Write the scenes as a camera bag (bgr8 Image, or CompressedImage)."""
    return write_image_bag(
        path, ((s.stamp_ns, s.image) for s in scenes), storage=storage, compressed=compressed
    )


def instance_masks(gt: GroundTruth, image_id: int) -> list[tuple[int, np.ndarray]]:
    """(category id, HxW bool mask) of each non-crowd instance of ``gt``'s image ``image_id``."""
    if gt.instances is None:
        return []
    entry = gt.image(image_id)
    h, w = int(entry["height"]), int(entry["width"])
    out = []
    for ann in gt.instances["annotations"]:
        if int(ann["image_id"]) != image_id or ann.get("iscrowd", 0):
            continue
        seg = ann["segmentation"]
        if isinstance(seg, list):
            rle = mask_utils.merge(mask_utils.frPyObjects(seg, h, w))
        elif isinstance(seg.get("counts"), list):
            rle = mask_utils.frPyObjects(seg, h, w)
        else:
            rle = seg
        out.append((int(ann["category_id"]), mask_utils.decode(rle).astype(bool)))
    return out


def scored_replay_argv(
    bag: Path, model: Path, gt: tuple[Path, Path, Path], out: Path, *extra: str
) -> list[str]:
    """``compactinst replay`` argv scoring ``bag`` on the onnxruntime backend against the
    instance, panoptic JSON and panoptic PNG folder of write_gt, writing to ``out``."""
    inst, pan, pan_dir = gt
    return [
        "replay", str(bag), "--model", str(model), "--backend", "onnxruntime",
        "--gt-instances", str(inst), "--gt-panoptic", str(pan), "--gt-panoptic-dir", str(pan_dir),
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip
