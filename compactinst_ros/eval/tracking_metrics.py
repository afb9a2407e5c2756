"""Identity metrics of tracked instance rasters: CLEAR-MOT counts with mask matching (MOTS).

A ground-truth object and a predicted instance of the same frame correspond when their mask IoU
is above ``iou_threshold`` (>= 0.5, so on non-overlapping rasters each object has at most one
partner and no assignment is needed, as in MOTS). Over the sequence:

* **id switch** (CLEAR-MOT IDSW): a ground-truth track is matched to a predicted id that differs
  from the id it was last matched to (frames where it is unmatched do not reset that memory);
* **miss**: a ground-truth object with no partner; **false positive**: a predicted instance with
  no partner; MOTA = 1 - (misses + false positives + id switches) / ground-truth objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import DataError


@dataclass(frozen=True)
class TrackingCounts:
    """CLEAR-MOT counts over a sequence (see the module docstring)."""

    gt_objects: int
    matches: int
    misses: int
    false_positives: int
    id_switches: int

    @property
    def mota(self) -> float:
        """Multi-object tracking accuracy; 1.0 is perfect, it can go below 0."""
        errors = self.misses + self.false_positives + self.id_switches
        return 1.0 - errors / self.gt_objects if self.gt_objects else float("nan")


def match_masks(
    gt: np.ndarray, pred: np.ndarray, iou_threshold: float = 0.5
) -> list[tuple[int, int]]:
    """(gt value, predicted value) pairs of two id rasters with mask IoU > ``iou_threshold``.

    0 is background in both; ``iou_threshold`` must be >= 0.5, which makes pairs unique.
    """
    if not 0.5 <= iou_threshold < 1.0:
        raise DataError(f"iou_threshold={iou_threshold} must be in [0.5, 1) for unique matches")
    if gt.shape != pred.shape:
        raise DataError(
            f"ground-truth raster {gt.shape} and prediction {pred.shape} differ in size; "
            "compare rasters of the same frames"
        )
    gt_values, gt_index = np.unique(gt.ravel(), return_inverse=True)
    pred_values, pred_index = np.unique(pred.ravel(), return_inverse=True)
    n_pred = pred_values.size
    joint = np.bincount(
        gt_index.ravel() * n_pred + pred_index.ravel(), minlength=gt_values.size * n_pred
    ).reshape(gt_values.size, n_pred)
    area_gt, area_pred = joint.sum(axis=1), joint.sum(axis=0)
    iou = joint / (area_gt[:, None] + area_pred[None, :] - joint)
    iou[gt_values == 0, :] = 0.0
    iou[:, pred_values == 0] = 0.0
    g, p = np.nonzero(iou > iou_threshold)
    return list(zip(gt_values[g].tolist(), pred_values[p].tolist(), strict=True))


class TrackingAccumulator:
    """CLEAR-MOT counts built frame by frame (replay adds each frame as it goes, no rasters kept).

    ``add`` takes one frame as ``tracking_counts`` takes each; ``counts`` gives the totals so far.
    """

    def __init__(self, iou_threshold: float = 0.5) -> None:
        self.iou_threshold = iou_threshold
        self.frames = 0
        self._last_pred: dict[int, int] = {}
        self._gt_objects = self._matches = self._false_positives = self._id_switches = 0

    def add(self, gt: np.ndarray, tracks: Mapping[int, int], pred: np.ndarray) -> None:
        """One frame: ground-truth id raster, its {object value: track id}, predicted track ids."""
        values = np.fromiter(tracks.keys(), np.int64, len(tracks))
        objects = np.where(np.isin(gt, values), gt, 0)
        present = set(np.unique(objects).tolist()) - {0}
        missing = set(tracks) - present - {0}
        if missing:
            raise DataError(
                f"frame {self.frames}: track ids given for values {sorted(missing)} "
                "that are not in its ground-truth raster"
            )
        pairs = match_masks(objects, pred, self.iou_threshold)
        self._gt_objects += len(present)
        self._matches += len(pairs)
        self._false_positives += np.unique(pred).size - int((pred == 0).any()) - len(pairs)
        for value, pred_id in pairs:
            track = tracks[value]
            if self._last_pred.get(track, pred_id) != pred_id:
                self._id_switches += 1
            self._last_pred[track] = pred_id
        self.frames += 1

    def counts(self) -> TrackingCounts:
        """The counts over the frames added so far."""
        return TrackingCounts(
            gt_objects=self._gt_objects,
            matches=self._matches,
            misses=self._gt_objects - self._matches,
            false_positives=self._false_positives,
            id_switches=self._id_switches,
        )


def tracking_counts(
    gt_rasters: Sequence[np.ndarray],
    gt_track_ids: Sequence[Mapping[int, int]],
    pred_rasters: Sequence[np.ndarray],
    iou_threshold: float = 0.5,
) -> TrackingCounts:
    """CLEAR-MOT counts of predicted id rasters against ground-truth tracks, frame by frame.

    ``gt_rasters[f]`` is frame f's ground-truth id raster (e.g. a panoptic raster) and
    ``gt_track_ids[f]`` maps its object values to track ids; values it does not map (stuff,
    void) count as background. ``pred_rasters[f]`` holds predicted track ids, 0 = background.
    """
    if not len(gt_rasters) == len(gt_track_ids) == len(pred_rasters):
        raise DataError(
            f"{len(gt_rasters)} ground-truth rasters, {len(gt_track_ids)} track-id maps and "
            f"{len(pred_rasters)} predictions: give one of each per frame"
        )
    accumulator = TrackingAccumulator(iou_threshold)
    for gt, tracks, pred in zip(gt_rasters, gt_track_ids, pred_rasters, strict=True):
        accumulator.add(gt, tracks, pred)
    return accumulator.counts()
