"""Exact merging of replays: the figures of one replay over the frames of many bags, built from
each bag's sufficient statistics (``Evaluator.statistics``) instead of averaging their figures.
The accuracy part is ``metrics.merge_statistics`` (the figures of statistics, of one replay or
many); this module adds the latency part.

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

from .report import latency_stats


def merge_latency(blocks: Sequence[Mapping]) -> tuple[dict, dict[str, list[float]]]:
    """(per-stage statistics, samples) over every lockstep block's samples after its warm-up."""
    samples: dict[str, list[float]] = {}
    for block in blocks:
        warm = block["warmup_frames"]
        for stage, values in block["samples"].items():
            samples.setdefault(stage, []).extend(values[warm:])
    return latency_stats(samples, 0), samples
