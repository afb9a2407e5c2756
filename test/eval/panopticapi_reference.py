"""The COCO panoptic reference, panopticapi's ``pq_compute``, re-implemented rule for rule.

Reference: cocodataset/panopticapi, ``panopticapi/evaluation.py`` (``pq_compute``,
``pq_compute_single_core``, ``PQStat.pq_average``). Its PyPI package ``panopticapi-lite`` 0.2.0
pins ``numpy<2`` (and pulls scikit-image), which would downgrade the project's numpy, so the
algorithm lives here instead. It keeps the reference's interface and quirks on purpose, because
they are what eval/metrics.py is checked against:

* input = COCO panoptic JSON files plus PNG folders (id = R + 256 G + 256^2 B), read with PIL;
* GT areas come from ``segments_info[*]["area"]``, predicted areas from the PNG;
* a predicted id in the PNG but not in the JSON, one in the JSON but not in the PNG, and an
  unknown predicted category each raise KeyError; so does an image without a prediction;
* one crowd region per category is remembered per image: when several are listed, the last one
  wins (a dict keyed by category);
* per-category PQ = sum IoU / (TP + FP/2 + FN/2); categories with no TP, FP or FN are left out
  of the averages; results are fractions, not percent.

The reference's multi-process split and progress printing change nothing and are left out.
:func:`reference` feeds it in-memory frames the way ``PanopticQuality.add`` takes them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

OFFSET = 256 * 256 * 256
VOID = 0
#: one image: (id raster, {segment id: (category, iscrowd)}) for the GT, {id: category} predicted
Frame = tuple[np.ndarray, dict[int, tuple[int, bool]], np.ndarray, dict[int, int]]


@dataclass
class _CategoryCounts:
    iou: float = 0.0
    tp: int = 0
    fp: int = 0
    fn: int = 0


def _read_ids(path: Path) -> np.ndarray:
    rgb = np.array(Image.open(path), dtype=np.uint32)
    return rgb[..., 0] + 256 * rgb[..., 1] + 256 * 256 * rgb[..., 2]


def _score_image(
    gt_ann: dict,
    pred_ann: dict,
    gt_folder: Path,
    pred_folder: Path,
    categories: dict[int, dict],
    counts: dict[int, _CategoryCounts],
) -> None:
    gt_ids = _read_ids(gt_folder / gt_ann["file_name"])
    pred_ids = _read_ids(pred_folder / pred_ann["file_name"])
    gt_segments = {s["id"]: s for s in gt_ann["segments_info"]}
    pred_segments = {s["id"]: dict(s) for s in pred_ann["segments_info"]}

    not_in_png = set(pred_segments)
    for label, area in zip(*np.unique(pred_ids, return_counts=True), strict=True):
        if label not in pred_segments:
            if label == VOID:
                continue
            raise KeyError(
                f"image {gt_ann['image_id']}: segment {label} is in the PNG, not the JSON"
            )
        pred_segments[label]["area"] = area
        not_in_png.remove(label)
        if pred_segments[label]["category_id"] not in categories:
            raise KeyError(
                f"image {gt_ann['image_id']}: segment {label} has unknown category "
                f"{pred_segments[label]['category_id']}"
            )
    if not_in_png:
        raise KeyError(
            f"image {gt_ann['image_id']}: segments {sorted(not_in_png)} are in the "
            "JSON, not the PNG"
        )

    joint = gt_ids.astype(np.uint64) * OFFSET + pred_ids.astype(np.uint64)
    overlap = {
        (int(label) // OFFSET, int(label) % OFFSET): int(n)
        for label, n in zip(*np.unique(joint, return_counts=True), strict=True)
    }

    gt_matched, pred_matched = set(), set()
    for (gt_label, pred_label), intersection in overlap.items():
        if gt_label not in gt_segments or pred_label not in pred_segments:
            continue
        gt_seg, pred_seg = gt_segments[gt_label], pred_segments[pred_label]
        if gt_seg["iscrowd"] == 1 or gt_seg["category_id"] != pred_seg["category_id"]:
            continue
        union = (
            pred_seg["area"] + gt_seg["area"] - intersection - overlap.get((VOID, pred_label), 0)
        )
        iou = intersection / union
        if iou > 0.5:
            counts[gt_seg["category_id"]].tp += 1
            counts[gt_seg["category_id"]].iou += iou
            gt_matched.add(gt_label)
            pred_matched.add(pred_label)

    crowd_of_category = {}
    for gt_label, gt_seg in gt_segments.items():
        if gt_label in gt_matched:
            continue
        if gt_seg["iscrowd"] == 1:
            crowd_of_category[gt_seg["category_id"]] = gt_label
            continue
        counts[gt_seg["category_id"]].fn += 1

    for pred_label, pred_seg in pred_segments.items():
        if pred_label in pred_matched:
            continue
        ignored = overlap.get((VOID, pred_label), 0)
        if pred_seg["category_id"] in crowd_of_category:
            ignored += overlap.get((crowd_of_category[pred_seg["category_id"]], pred_label), 0)
        if ignored / pred_seg["area"] > 0.5:
            continue
        counts[pred_seg["category_id"]].fp += 1


def _average(
    counts: dict[int, _CategoryCounts], categories: dict[int, dict], isthing: bool | None
) -> dict:
    pq = sq = rq = 0.0
    n = 0
    for label, info in categories.items():
        if isthing is not None and (info["isthing"] == 1) != isthing:
            continue
        c = counts[label]
        if c.tp + c.fp + c.fn == 0:
            continue
        n += 1
        pq += c.iou / (c.tp + 0.5 * c.fp + 0.5 * c.fn)
        sq += c.iou / c.tp if c.tp != 0 else 0
        rq += c.tp / (c.tp + 0.5 * c.fp + 0.5 * c.fn)
    return {"pq": pq / n, "sq": sq / n, "rq": rq / n, "n": n}


def pq_compute(gt_json: Path, pred_json: Path, gt_folder: Path, pred_folder: Path) -> dict:
    """{"All", "Things", "Stuff": {pq, sq, rq, n}} (fractions) as panopticapi computes them."""
    gt = json.loads(Path(gt_json).read_text())
    pred = json.loads(Path(pred_json).read_text())
    categories = {c["id"]: c for c in gt["categories"]}
    pred_by_image = {a["image_id"]: a for a in pred["annotations"]}
    counts: dict[int, _CategoryCounts] = defaultdict(_CategoryCounts)
    for gt_ann in gt["annotations"]:
        if gt_ann["image_id"] not in pred_by_image:
            raise KeyError(f"no prediction for the image with id {gt_ann['image_id']}")
        _score_image(
            gt_ann,
            pred_by_image[gt_ann["image_id"]],
            Path(gt_folder),
            Path(pred_folder),
            categories,
            counts,
        )
    return {
        name: _average(counts, categories, isthing)
        for name, isthing in (("All", None), ("Things", True), ("Stuff", False))
    }


def ids_to_rgb(ids: np.ndarray) -> np.ndarray:
    """The PNG colours of an id raster (id = R + 256 G + 256^2 B)."""
    ids = ids.astype(np.int64)
    return np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)


def write_panoptic(
    root: Path, name: str, images: list[tuple[np.ndarray, list[dict]]], categories: dict[int, bool]
) -> tuple[Path, Path]:
    """COCO panoptic JSON + PNG folder; each segment's ``area`` is counted from its raster."""
    folder = root / name
    folder.mkdir(parents=True)
    annotations = []
    for image_id, (ids, segments) in enumerate(images, start=1):
        Image.fromarray(ids_to_rgb(ids)).save(folder / f"{image_id}.png")
        infos = [{"iscrowd": 0, "area": int((ids == s["id"]).sum()), **s} for s in segments]
        annotations.append(
            {"image_id": image_id, "file_name": f"{image_id}.png", "segments_info": infos}
        )
    cats = [{"id": c, "name": str(c), "isthing": int(t)} for c, t in categories.items()]
    path = root / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "annotations": annotations,
                "categories": cats,
                "images": [{"id": i} for i in range(1, len(images) + 1)],
            }
        )
    )
    return path, folder


def reference(tmp_path: Path, frames: list[Frame], categories: dict[int, bool]) -> dict:
    """panopticapi on ``frames`` written out as COCO panoptic files; percent like ours."""
    gt = [
        (g, [{"id": i, "category_id": c, "iscrowd": int(k)} for i, (c, k) in segs.items()])
        for g, segs, _, _ in frames
    ]
    pred = [(p, [{"id": i, "category_id": c} for i, c in segs.items()]) for _, _, p, segs in frames]
    gt_json, gt_dir = write_panoptic(tmp_path, "gt", gt, categories)
    pred_json, pred_dir = write_panoptic(tmp_path, "pred", pred, categories)
    result = pq_compute(gt_json, pred_json, gt_dir, pred_dir)
    return {
        name: {
            "PQ": 100 * result[key]["pq"],
            "SQ": 100 * result[key]["sq"],
            "RQ": 100 * result[key]["rq"],
            "n": result[key]["n"],
        }
        for name, key in (("all", "All"), ("things", "Things"), ("stuff", "Stuff"))
    }
