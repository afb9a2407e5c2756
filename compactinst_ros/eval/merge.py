"""Exact merging of replays: the figures of one replay over the frames of many bags, built from
each bag's sufficient statistics (``Evaluator.statistics``) instead of averaging their figures.

* mask AP: pycocotools' ``accumulate`` over every part's per-image evaluations (computed where
  the part was replayed, ``metrics.coco_evaluation``), images taken part by part, exactly as
  one COCOeval scores a single GT file holding all of them in that order;
* PQ/SQ/RQ: the per-class TP/FP/FN counts and IoU sums (integers, see ``metrics.IOU_UNITS``)
  added; mIoU: the confusion matrices added;
* id switches and the other CLEAR-MOT counts: added (each bag's tracks start afresh);
* latency: percentiles of all parts' samples after each part's warm-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields

from .metrics import PanopticQuality, SemanticIoU, mask_ap_of
from .report import latency_stats
from .tracking_metrics import TrackingCounts


def merge_statistics(parts: Sequence[Mapping]) -> dict:
    """The accuracy block (as ``Evaluator.result``) of one replay over all ``parts``' frames."""
    frames = sum(len(p["image_ids"]) for p in parts)
    out: dict = {"frames_evaluated": frames}
    coco = [p["coco"] for p in parts if p.get("coco")]
    out["mask_ap"] = mask_ap_of(coco) if coco else None
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
