"""Accuracy metrics: COCO mask AP (pycocotools), panoptic quality (own numpy), semantic mIoU.

PQ follows the COCO panoptic definition (Kirillov et al.; panopticapi ``pq_compute``): a GT and
a predicted segment of the same category match iff IoU > 0.5, the union excludes the
prediction's pixels on GT void, crowd GT segments are never false negatives, a GT segment that
is listed but has no pixel is a false negative, and a prediction lying more than half on void
plus same-category crowd is not a false positive. On every input panopticapi accepts, the
result equals its ``pq_compute`` (``test/eval/test_eval_metrics_panopticapi.py``), except where
we chose otherwise:

* several crowd regions of one category in an image: a prediction on any of them is ignored
  (panopticapi remembers only the last one listed per category; with the regions merged into one
  segment, as Cityscapes' converted GT stores them, the two agree);
* GT pixels whose id is not listed are void (panopticapi counts them in the prediction's area
  but not as void; consistent GT has none);
* inputs panopticapi refuses with a KeyError are scored instead, because a replay should not
  abort on them: a predicted segment listed but absent from the raster is dropped, and predicted
  ids that are not listed or whose category the GT does not know are void (as torchmetrics
  treats unknown categories).

GT areas are counted from the raster (panopticapi reads ``segments_info`` areas; equal on
consistent GT).
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from ..coco import encode_rle
from ..errors import DataError
from ..structures import FrameResult, Instances
from .tracking_metrics import TrackingAccumulator, TrackingCounts

if TYPE_CHECKING:
    from .groundtruth import GroundTruth

#: pycocotools ``stats`` index -> report key (segm, maxDets 100)
AP_KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl")


def instances_to_coco(raster: np.ndarray, instances: Instances, image_id: int) -> list[dict]:
    """COCO result entries (segm RLE, category = label id, score) for one frame's instances."""
    return [
        {
            "image_id": int(image_id),
            "category_id": int(instances.label_id[i]),
            "segmentation": encode_rle(raster == instances.ids[i]),
            "score": float(instances.score[i]),
        }
        for i in range(len(instances))
    ]


def coco_evaluation(gt_dataset: dict, predictions: list[dict], image_ids: list[int]) -> dict:
    """pycocotools' per-image segm evaluation over ``image_ids`` (JSON-ready): per category,
    area range and image, the detections' scores, matches and ignore flags and the GT's ignore
    flags. ``accumulate`` needs nothing else, so the evaluations of several replays merge into
    one exact AP (``mask_ap_of``) without their masks."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    # pycocotools writes into the annotation dicts (area, bbox, ignore): it gets copies
    gt_dataset = {**gt_dataset, "annotations": [dict(a) for a in gt_dataset["annotations"]]}
    predictions = [dict(p) for p in predictions]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = gt_dataset
        gt.createIndex()
        dt = gt.loadRes(predictions) if predictions else COCO()
        if not predictions:
            dt.dataset = {
                "images": gt_dataset["images"],
                "categories": gt_dataset["categories"],
                "annotations": [],
            }
            dt.createIndex()
        evaluator = COCOeval(gt, dt, "segm")
        evaluator.params.imgIds = sorted(int(i) for i in image_ids)
        evaluator.evaluate()
    p = evaluator.params
    images, n_img = [int(i) for i in p.imgIds], len(p.imgIds)
    evals = [
        [
            None
            if e is None
            else [
                e["dtScores"],
                (e["dtMatches"] > 0).astype(int).tolist(),
                e["dtIgnore"].astype(int).tolist(),
                e["gtIgnore"].astype(int).tolist(),
            ]
            for e in evaluator.evalImgs[n * n_img : (n + 1) * n_img]
        ]
        for n in range(len(p.catIds) * len(p.areaRng))
    ]
    return {"cat_ids": [int(c) for c in p.catIds], "image_ids": images, "evals": evals}


def mask_ap_of(evaluations: Sequence[dict]) -> dict:
    """AP, AP50, AP75, APs/m/l in percent (None where a bucket has no GT) of one COCOeval over
    every image of ``evaluations`` (``coco_evaluation``s), taken in order: pycocotools'
    ``accumulate`` and ``summarize`` on their per-image results."""
    from pycocotools.cocoeval import COCOeval

    cat_ids = evaluations[0]["cat_ids"]
    for part in evaluations:
        if part["cat_ids"] != cat_ids:
            raise DataError(
                f"drives' instance GT lists categories {cat_ids} and {part['cat_ids']}; "
                "give every drive the same category list"
            )
    evaluator = COCOeval(iouType="segm")
    p = evaluator.params
    p.imgIds = list(range(1, 1 + sum(len(e["image_ids"]) for e in evaluations)))
    p.catIds = list(cat_ids)
    t = len(p.iouThrs)
    evaluator.evalImgs = []
    for n in range(len(cat_ids) * len(p.areaRng)):
        for part in evaluations:
            for e in part["evals"][n]:
                if e is None:
                    evaluator.evalImgs.append(None)
                    continue
                scores, matches, ignore, gt_ignore = e
                evaluator.evalImgs.append(
                    {
                        "dtScores": scores,
                        "dtMatches": np.asarray(matches, np.float64).reshape(t, len(scores)),
                        "dtIgnore": np.asarray(ignore, bool).reshape(t, len(scores)),
                        "gtIgnore": np.asarray(gt_ignore, bool),
                    }
                )
    evaluator._paramsEval = copy.deepcopy(p)  # what evaluate() leaves for accumulate()
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.accumulate()
        evaluator.summarize()
    return {
        key: (None if value < 0 else round(float(value) * 100.0, 3))
        for key, value in zip(AP_KEYS, evaluator.stats[: len(AP_KEYS)], strict=True)
    }


def mask_ap(gt_dataset: dict, predictions: list[dict], image_ids: list[int]) -> dict:
    """AP, AP50, AP75, APs/m/l in percent over ``image_ids`` (None where a bucket has no GT)."""
    return mask_ap_of([coco_evaluation(gt_dataset, predictions, image_ids)])


#: matched IoUs (> 0.5, so multiples of 2**-53) are summed as exact integers in these units: the
#: sum is then the same in any order, and per-drive sums merge exactly (``eval/merge.py``)
IOU_UNITS = 2**53


@dataclass
class _ClassStats:
    iou: int = 0  # sum of the matched IoUs in 1 / IOU_UNITS
    tp: int = 0
    fp: int = 0
    fn: int = 0


@dataclass
class PanopticQuality:
    """Accumulates PQ/SQ/RQ over frames; ``categories`` maps category id -> isthing."""

    categories: dict[int, bool]
    stats: dict[int, _ClassStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stats = {c: _ClassStats() for c in self.categories}

    def add(
        self,
        gt: np.ndarray,
        gt_segments: dict[int, tuple[int, bool]],
        pred: np.ndarray,
        pred_segments: dict[int, int],
    ) -> None:
        """One frame: id rasters plus {gt id: (category, iscrowd)} and {pred id: category}.

        Id 0 and ids missing from the segment tables are void.
        """
        if gt.shape != pred.shape:
            raise ValueError(f"GT raster {gt.shape} and prediction {pred.shape} differ in size")
        pred_segments = {s: c for s, c in pred_segments.items() if c in self.categories and s}
        gt_ids = np.array([0, *gt_segments], np.int64)
        pred_ids = np.array([0, *pred_segments], np.int64)
        g = _index_of(gt.ravel(), gt_ids)
        p = _index_of(pred.ravel(), pred_ids)
        n_p = len(pred_ids)
        pairs, counts = np.unique(g * n_p + p, return_counts=True)
        inter = np.zeros((len(gt_ids), n_p), np.int64)
        inter[pairs // n_p, pairs % n_p] = counts
        gt_area = inter.sum(1)
        pred_area = inter.sum(0)
        gt_cat = np.array([-1, *(c for c, _ in gt_segments.values())], np.int64)
        crowd = np.array([False, *(bool(k) for _, k in gt_segments.values())])
        pred_cat = np.array([-2, *pred_segments.values()], np.int64)

        # Candidate matches: real segments, same category, GT not crowd; union without GT void.
        union = pred_area[None, :] + gt_area[:, None] - inter - inter[0][None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        ok = (gt_cat[:, None] == pred_cat[None, :]) & ~crowd[:, None] & (iou > 0.5)
        ok[0, :] = False
        ok[:, 0] = False
        gi, pj = np.nonzero(ok)
        matched_gt = np.zeros(len(gt_ids), bool)
        matched_pred = np.zeros(n_p, bool)
        matched_gt[gi] = True
        matched_pred[pj] = True
        for a, b in zip(gi, pj, strict=True):
            s = self.stats[int(gt_cat[a])]
            s.tp += 1
            s.iou += int(float(iou[a, b]) * IOU_UNITS)
        # A listed GT segment without pixels is still a miss; a listed prediction without
        # pixels (area 0) can neither match nor be a false positive.
        unmatched_gt = ~matched_gt & ~crowd
        unmatched_gt[0] = False
        for a in np.nonzero(unmatched_gt)[0]:
            self.stats[int(gt_cat[a])].fn += 1
        matched_pred[0] = True
        for b in np.nonzero(~matched_pred & (pred_area > 0))[0]:
            ignored = inter[0, b]
            same_crowd = crowd & (gt_cat == pred_cat[b])
            ignored += inter[same_crowd, b].sum()
            if ignored / pred_area[b] > 0.5:
                continue
            self.stats[int(pred_cat[b])].fp += 1

    def state(self) -> dict[str, list[int]]:
        """{category id: [IoU sum in 1 / IOU_UNITS, tp, fp, fn]}: integer sums, merged exactly."""
        return {str(c): [s.iou, s.tp, s.fp, s.fn] for c, s in self.stats.items()}

    def absorb(self, state: Mapping[str, Sequence[int]]) -> None:
        """Add another accumulator's ``state`` (another drive's frames) to these sums."""
        for cat, (iou, tp, fp, fn) in state.items():
            s = self.stats[int(cat)]
            s.iou, s.tp, s.fp, s.fn = s.iou + iou, s.tp + tp, s.fp + fp, s.fn + fn

    def result(self) -> dict:
        """{all, things, stuff: {PQ, SQ, RQ, n}} in percent plus per-category entries."""
        per_class = {}
        for cat, s in self.stats.items():
            if s.tp + s.fp + s.fn == 0:
                continue
            denom = s.tp + 0.5 * s.fp + 0.5 * s.fn
            sq = s.iou / (IOU_UNITS * s.tp) if s.tp else 0.0
            rq = s.tp / denom
            per_class[cat] = {
                "PQ": 100 * sq * rq,
                "SQ": 100 * sq,
                "RQ": 100 * rq,
                "isthing": self.categories[cat],
                "tp": s.tp,
                "fp": s.fp,
                "fn": s.fn,
            }
        out: dict = {}
        for name, keep in (("all", None), ("things", True), ("stuff", False)):
            rows = [v for v in per_class.values() if keep is None or v["isthing"] == keep]
            out[name] = {
                k: (round(float(np.mean([r[k] for r in rows])), 3) if rows else None)
                for k in ("PQ", "SQ", "RQ")
            }
            out[name]["n"] = len(rows)
        out["per_class"] = {
            str(c): {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
            for c, row in per_class.items()
        }
        return out


def _index_of(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position of each value in ``ids`` (ids[0] must be 0 = void); unknown values map to 0."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.clip(np.searchsorted(sorted_ids, values), 0, len(ids) - 1)
    found = sorted_ids[pos] == values
    return np.where(found, order[pos], 0).astype(np.int64)


@dataclass
class SemanticIoU:
    """Accumulates a confusion matrix over label ids; 0 in the ground truth is ignored."""

    class_ids: tuple[int, ...]
    confusion: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.class_ids) + 1  # last row/column: void / unknown label
        self.confusion = np.zeros((n, n), np.int64)
        self._ids = np.array([0, *self.class_ids], np.int64)

    def add(self, gt: np.ndarray, pred: np.ndarray) -> None:
        """One frame of HxW label-id rasters (0 = void)."""
        if gt.shape != pred.shape:
            raise ValueError(f"GT raster {gt.shape} and prediction {pred.shape} differ in size")
        n = len(self.class_ids)
        # index 0 -> void/unknown, moved to the last slot
        g = (_index_of(gt.ravel().astype(np.int64), self._ids) - 1) % (n + 1)
        p = (_index_of(pred.ravel().astype(np.int64), self._ids) - 1) % (n + 1)
        valid = g < n
        self.confusion += np.bincount(
            g[valid] * (n + 1) + p[valid], minlength=(n + 1) ** 2
        ).reshape(n + 1, n + 1)

    def absorb(self, class_ids: Sequence[int], confusion: Sequence[Sequence[int]]) -> None:
        """Add another confusion matrix over ``class_ids`` (last row/column void) to this one."""
        index = [self.class_ids.index(c) for c in class_ids] + [len(self.class_ids)]
        self.confusion[np.ix_(index, index)] += np.asarray(confusion, np.int64)

    def result(self) -> dict:
        """mIoU in percent over classes present in GT or prediction, plus per-class IoU."""
        n = len(self.class_ids)
        tp = np.diag(self.confusion)[:n].astype(np.float64)
        gt_total = self.confusion[:n].sum(1)
        pred_total = self.confusion[:n, :n].sum(0)
        union = gt_total + pred_total - tp
        present = union > 0
        iou = np.where(present, tp / np.maximum(union, 1), np.nan)
        return {
            "mIoU": round(float(np.nanmean(iou) * 100), 3) if present.any() else None,
            "per_class": {
                str(c): round(float(iou[i] * 100), 3)
                for i, c in enumerate(self.class_ids)
                if present[i]
            },
        }


class Evaluator:
    """Accumulates AP, PQ and mIoU of pipeline results against a matched GroundTruth."""

    def __init__(self, gt: GroundTruth) -> None:
        self.gt = gt
        self.predictions: list[dict] = []
        self.image_ids: list[int] = []
        cats = gt.categories
        self.pq = PanopticQuality({c.id: c.isthing for c in cats.values()}) if gt.panoptic else None
        self.miou = SemanticIoU(tuple(sorted(cats))) if gt.panoptic else None
        self.tracking = TrackingAccumulator() if gt.has_tracks else None

    def add(self, frame_index: int, result: FrameResult) -> bool:
        """Score one frame's result; False when no GT image is matched to the frame."""
        image_id = self.gt.frame_to_image.get(frame_index)
        if image_id is None:
            return False
        entry = self.gt.image(image_id)
        size = (result.meta.src_h, result.meta.src_w)
        if (int(entry["height"]), int(entry["width"])) != size:
            raise DataError(
                f"GT image {image_id} is {entry['height']}x{entry['width']} but frame "
                f"{frame_index} is {size[0]}x{size[1]}; the ground truth belongs to another bag"
            )
        self.image_ids.append(image_id)
        if self.gt.instances is not None:
            if result.instance_raster is None:
                raise DataError("the result has no instance raster; enable the instance output")
            self.predictions += instances_to_coco(
                result.instance_raster, result.instances, image_id
            )
        if self.pq is not None and self.miou is not None:
            if result.panoptic_raster is None:
                raise DataError("the result has no panoptic raster; enable the panoptic output")
            gt_ids, gt_segments = self.gt.panoptic_frame(image_id)
            segs = result.segments
            pred_segments = dict(zip(segs.ids.tolist(), segs.label_id.tolist(), strict=True))
            self.pq.add(gt_ids, gt_segments, result.panoptic_raster, pred_segments)
            if self.tracking is not None and result.instance_raster is not None:
                self.tracking.add(gt_ids, self.gt.track_ids(image_id), result.instance_raster)
            semantic = result.semantic_raster
            if semantic is None:
                semantic = semantic_from_panoptic(result.panoptic_raster, pred_segments)
            self.miou.add(self.gt.semantic_frame(image_id), semantic)
        return True

    def statistics(self) -> dict:
        """Sufficient statistics of the frames added (JSON-ready): the per-image COCO evaluation,
        PQ sums, the confusion matrix and tracking counts. Those of several replays merge into
        the figures of one replay over all their frames (``merge.py``)."""
        instances = self.gt.instances
        coco = None
        if instances is not None and self.image_ids:
            coco = coco_evaluation(instances, self.predictions, self.image_ids)
        cats = self.gt.categories.values()
        return {
            "image_ids": list(self.image_ids),
            "coco": coco,
            "categories": {str(c.id): c.isthing for c in cats},
            "panoptic": self.pq.state() if self.pq is not None else None,
            "semantic": (
                {"class_ids": list(self.miou.class_ids), "confusion": self.miou.confusion.tolist()}
                if self.miou is not None
                else None
            ),
            "tracking": (
                asdict(self.tracking.counts())
                if self.tracking is not None and self.tracking.frames
                else None
            ),
        }

    def result(self, statistics: dict | None = None) -> dict:
        """Metrics in percent: mask_ap, panoptic (PQ/SQ/RQ), semantic (mIoU); None if absent;
        with GT track ids, ``tracking``: CLEAR-MOT counts of the instance ids (id switches).
        ``statistics``: this evaluator's ``statistics()`` where already computed."""
        return merge_statistics([statistics or self.statistics()])


def semantic_from_panoptic(raster: np.ndarray, segments: dict[int, int]) -> np.ndarray:
    """Label-id raster from a panoptic id raster and {segment id: label id} (0 = void)."""
    ids = np.array([0, *segments], np.int64)
    labels = np.array([0, *segments.values()], np.int64)
    return labels[_index_of(raster.ravel().astype(np.int64), ids)].reshape(raster.shape)


def merge_statistics(parts: Sequence[Mapping]) -> dict:
    """The accuracy block (as ``Evaluator.result``) of one replay over all ``parts``' frames,
    from their sufficient statistics (``Evaluator.statistics``): exact, see ``merge.py``."""
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
