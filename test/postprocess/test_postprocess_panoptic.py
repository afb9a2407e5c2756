"""Panoptic rule on constructed logits with known answers (rule 4 of docs/CONTRACTS.md)."""

from __future__ import annotations

import numpy as np
import pytest
from postprocess_scenes import (
    CAR,
    LABELS,
    NO_OBJECT,
    PERSON,
    ROAD,
    SKY,
    class_logits,
    class_prob,
    identity_meta,
    raw,
    rect_masks,
    region,
)

from compactinst_ros.errors import ConfigError
from compactinst_ros.labels import LabelSet
from compactinst_ros.postprocess import postprocess, select_panoptic_queries
from compactinst_ros.structures import OutputSet, PostprocessOptions

GRID = (8, 16)
PANOPTIC_ONLY = OutputSet(instance=False, panoptic=True, semantic=False)


def run(cls: np.ndarray, masks: np.ndarray, labels: LabelSet = LABELS, **options: float):
    """Panoptic outputs of one constructed frame at identity geometry."""
    return postprocess(
        raw(cls, masks), identity_meta(*GRID), labels, PostprocessOptions(**options), PANOPTIC_ONLY
    )


def test_stuff_merges_and_things_get_label_times_1000_plus_n() -> None:
    rects = [(6, 8, 0, 16), (0, 2, 0, 6), (2, 5, 1, 4), (2, 5, 6, 9), (2, 5, 11, 14), None]
    classes = [ROAD, ROAD, PERSON, PERSON, CAR, NO_OBJECT]
    confidence = [12.0, 13.0, 12.0, 12.0, 12.0, 12.0]
    result = run(class_logits(classes, confidence), rect_masks(*GRID, rects))
    regions = [region(r, GRID) for r in rects[:5]]
    expected = np.zeros((64, 128), np.int32)
    for rect_region, segment in zip(regions, [3, 3, 11001, 11002, 12001], strict=True):
        expected[rect_region] = segment
    assert result.panoptic_raster.dtype == np.int32
    np.testing.assert_array_equal(result.panoptic_raster, expected)
    seg = result.segments
    np.testing.assert_array_equal(seg.ids, [3, 11001, 11002, 12001])
    np.testing.assert_array_equal(seg.label_id, [3, 11, 11, 12])
    np.testing.assert_array_equal(seg.isthing, [False, True, True, True])
    np.testing.assert_allclose(seg.score, [class_prob(13.0)] + [class_prob(12.0)] * 3, rtol=1e-6)
    np.testing.assert_array_equal(seg.area, [(expected == i).sum() for i in seg.ids])
    assert seg.area[0] == regions[0].sum() + regions[1].sum()


@pytest.mark.parametrize(("threshold", "kept"), [(0.8, False), (0.2, True)])
def test_overlap_threshold_drops_mostly_covered_segment(threshold: float, kept: bool) -> None:
    rects = [(0, 8, 0, 5), (2, 6, 2, 6)]  # query 1 keeps only texel column 5 of its 4 columns
    cls = class_logits([PERSON, CAR], [14.0, 12.0])
    result = run(cls, rect_masks(*GRID, rects), overlap_threshold=threshold)
    own = region(rects[1], GRID) & ~region(rects[0], GRID)
    assert (result.panoptic_raster[region(rects[0], GRID)] == 11001).all()
    assert (result.panoptic_raster[own] == (12001 if kept else 0)).all()
    np.testing.assert_array_equal(result.segments.ids, [11001, 12001] if kept else [11001])


def test_equal_scores_first_kept_query_wins_the_overlap() -> None:
    rects = [(1, 5, 1, 6), (3, 7, 4, 9)]
    result = run(class_logits([CAR, CAR]), rect_masks(*GRID, rects), overlap_threshold=0.0)
    first, second = (region(r, GRID) for r in rects)
    assert (result.panoptic_raster[first] == 12001).all()
    assert (result.panoptic_raster[second & ~first] == 12002).all()


def test_object_mask_threshold_and_no_object_select_queries() -> None:
    cls = class_logits([PERSON, NO_OBJECT, CAR, SKY], [12.0, 12.0, 1.0, 12.0])
    selection = select_panoptic_queries(cls, 0.8)
    np.testing.assert_array_equal(selection.query, [0, 3])
    np.testing.assert_array_equal(selection.class_index, [PERSON, SKY])
    np.testing.assert_allclose(selection.score, [class_prob(12.0)] * 2, rtol=1e-6)


def test_all_no_object_is_void() -> None:
    result = run(class_logits([NO_OBJECT] * 3), rect_masks(*GRID, [(0, 8, 0, 16)] * 3))
    assert len(result.segments) == 0
    np.testing.assert_array_equal(result.panoptic_raster, np.zeros((64, 128), np.int32))


def test_kept_queries_without_positive_pixels_give_void() -> None:
    masks = np.full((2, *GRID), -3.0, np.float32)
    result = run(class_logits([PERSON, ROAD]), masks)
    assert len(result.segments) == 0
    assert not result.panoptic_raster.any()


def test_stuff_label_ids_of_1000_or_more_are_rejected() -> None:
    labels = LabelSet(names=("a", "b"), ids=(1, 1000), isthing=(True, False))
    cls = np.zeros((1, 3), np.float32)
    with pytest.raises(ConfigError, match="renumber stuff labels below 1000"):
        run(cls, rect_masks(*GRID, [None]), labels=labels)
