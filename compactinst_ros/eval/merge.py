"""Exact merging of replays: the figures of one replay over the frames of many bags, built from
each bag's sufficient statistics (``Evaluator.statistics``) instead of averaging their figures.

* mask AP: one COCOeval over every part's images (ids renumbered, part by part, so they are
  unique), exactly as pycocotools scores a single GT file holding all of them;
* PQ/SQ/RQ: the per-class TP/FP/FN counts and IoU sums (integers, see ``metrics.IOU_UNITS``)
  added; mIoU: the confusion matrices added;
* id switches and the other CLEAR-MOT counts: added (each bag's tracks start afresh);
* latency: percentiles of all parts' samples after each part's warm-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields

from ..errors import DataError
from .metrics import PanopticQuality, SemanticIoU, mask_ap
from .report import latency_stats
from .tracking_metrics import TrackingCounts


def _coco_union(parts: Sequence[Mapping]) -> tuple[dict | None, list[dict], list[int]]:
    """(GT dataset, predictions, image ids) of every part's COCO images, ids renumbered 1..N in
    part order (each part's images in id order) and annotation ids 1..M."""
    categories: dict[int, dict] = {}
    images: list[dict] = []
    annotations: list[dict] = []
    predictions: list[dict] = []
    image_ids: list[int] = []
    seen = False
    for part in parts:
        coco = part.get("instances")
        if coco is None:
            continue
        seen = True
        for cat in coco["categories"]:
            known = categories.setdefault(int(cat["id"]), cat)
            if known.get("name") != cat.get("name"):
                raise DataError(
                    f"category {cat['id']} is '{known.get('name')}' in one drive's ground truth "
                    f"and '{cat.get('name')}' in another's; give all drives one label set"
                )
        new_id = {old: len(images) + n for n, old in enumerate(sorted(set(part["image_ids"])), 1)}
        for entry in sorted(coco["images"], key=lambda e: int(e["id"])):
            images.append({**entry, "id": new_id[int(entry["id"])]})
        for ann in coco["annotations"]:
            annotations.append(
                {**ann, "id": len(annotations) + 1, "image_id": new_id[int(ann["image_id"])]}
            )
        predictions += [{**p, "image_id": new_id[int(p["image_id"])]} for p in part["predictions"]]
        image_ids += [new_id[int(i)] for i in part["image_ids"]]
    if not seen:
        return None, [], []
    dataset = {"images": images, "annotations": annotations}
    dataset["categories"] = list(categories.values())
    return dataset, predictions, image_ids


def merge_statistics(parts: Sequence[Mapping]) -> dict:
    """The accuracy block (as ``Evaluator.result``) of one replay over all ``parts``' frames."""
    frames = sum(len(p["image_ids"]) for p in parts)
    out: dict = {"frames_evaluated": frames}
    dataset, predictions, image_ids = _coco_union(parts)
    out["mask_ap"] = mask_ap(dataset, predictions, image_ids) if dataset and image_ids else None
    categories: dict[int, bool] = {}
    for part in parts:
        categories.update({int(c): bool(t) for c, t in part["categories"].items()})
    panoptic = [p["panoptic"] for p in parts if p.get("panoptic") is not None]
    out["panoptic"] = None
    if panoptic and frames:
        pq = PanopticQuality(categories)
        for state in panoptic:
            pq.absorb(state)
        out["panoptic"] = pq.result()
    semantic = [p["semantic"] for p in parts if p.get("semantic") is not None]
    out["semantic"] = None
    if semantic and frames:
        miou = SemanticIoU(tuple(sorted({c for s in semantic for c in s["class_ids"]})))
        for block in semantic:
            miou.absorb(block["class_ids"], block["confusion"])
        out["semantic"] = miou.result()
    tracking = [p["tracking"] for p in parts if p.get("tracking")]
    if tracking:
        names = [f.name for f in fields(TrackingCounts)]
        out["tracking"] = asdict(TrackingCounts(*(sum(t[n] for t in tracking) for n in names)))
    return out


def merge_latency(blocks: Sequence[Mapping]) -> tuple[dict, dict[str, list[float]]]:
    """(per-stage statistics, samples) over every lockstep block's samples after its warm-up."""
    samples: dict[str, list[float]] = {}
    for block in blocks:
        warm = block["warmup_frames"]
        for stage, values in block["samples"].items():
            samples.setdefault(stage, []).extend(values[warm:])
    return latency_stats(samples, 0), samples
