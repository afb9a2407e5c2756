"""CLEAR-MOT id switches, misses and false positives on constructed mask sequences."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.errors import DataError
from compactinst_ros.eval.tracking_metrics import match_masks, tracking_counts


def _raster(*boxes: tuple[int, int, int]) -> np.ndarray:
    """20x40 raster with (value, x, width) full-height boxes."""
    raster = np.zeros((20, 40), np.int32)
    for value, x, width in boxes:
        raster[:, x : x + width] = value
    return raster


def test_match_masks_needs_iou_above_threshold():
    gt = _raster((5, 0, 10), (7, 20, 10))
    pred = _raster((3, 0, 10), (9, 24, 10))  # IoU 6/14 < 0.5 for the second
    assert match_masks(gt, pred) == [(5, 3)]
    assert match_masks(gt, _raster((3, 1, 10))) == [(5, 3)]  # 9/11
    with pytest.raises(DataError, match=r"\[0\.5, 1\)"):
        match_masks(gt, pred, iou_threshold=0.3)
    with pytest.raises(DataError, match="size"):
        match_masks(gt, pred[:, :10])


def test_counts_switches_not_gaps():
    """GT track 100 keeps id 1, loses its match for a frame, then swaps to id 2: one switch."""
    gt = [_raster((5, 0, 10)), _raster((5, 2, 10)), _raster((5, 4, 10)), _raster((5, 6, 10))]
    tracks = [{5: 100}] * 4
    pred = [_raster((1, 0, 10)), _raster((1, 2, 10)), _raster(), _raster((2, 6, 10))]
    counts = tracking_counts(gt, tracks, pred)
    assert (counts.gt_objects, counts.matches, counts.misses) == (4, 3, 1)
    assert (counts.false_positives, counts.id_switches) == (0, 1)
    assert counts.mota == pytest.approx(1 - 2 / 4)
    back = tracking_counts(gt, tracks, [*pred[:3], _raster((1, 6, 10))])
    assert back.id_switches == 0  # unmatched frames do not reset the remembered id


def test_swapped_ids_and_false_positives():
    """Two objects whose predicted ids swap: a switch each; an extra prediction is a FP."""
    gt = [_raster((1, 0, 8), (2, 20, 8))] * 3
    tracks = [{1: 11, 2: 12}] * 3
    pred = [
        _raster((4, 0, 8), (6, 20, 8)),
        _raster((6, 0, 8), (4, 20, 8), (9, 32, 6)),
        _raster((6, 0, 8), (4, 20, 8)),
    ]
    counts = tracking_counts(gt, tracks, pred)
    assert (counts.id_switches, counts.false_positives, counts.misses) == (2, 1, 0)


def test_unmapped_gt_values_are_background_and_bad_input():
    gt = [_raster((1, 0, 10), (2000, 20, 20))]  # 2000: stuff in a panoptic raster
    counts = tracking_counts(gt, [{1: 5}], [_raster((3, 0, 10))])
    assert (counts.gt_objects, counts.matches, counts.false_positives) == (1, 1, 0)
    with pytest.raises(DataError, match="one of each per frame"):
        tracking_counts(gt, [], [])
    with pytest.raises(DataError, match="not in its ground-truth raster"):
        tracking_counts(gt, [{1: 5, 3: 6}], [_raster()])
    assert np.isnan(tracking_counts([], [], []).mota)
