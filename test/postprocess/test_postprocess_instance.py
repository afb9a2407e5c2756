"""Instance rule on constructed logits with known answers (rule 3 of docs/CONTRACTS.md)."""

from __future__ import annotations

import numpy as np
import pytest
from postprocess_scenes import (
    CAR,
    LABELS,
    NO_OBJECT,
    PERSON,
    ROAD,
    class_logits,
    class_prob,
    identity_meta,
    raw,
    rect_masks,
    region,
)

from compactinst_ros.postprocess import RuleInputs, postprocess, select_instances
from compactinst_ros.structures import OutputSet, PostprocessOptions

GRID = (8, 16)
INSTANCE_ONLY = OutputSet(instance=True, panoptic=False, semantic=False)


def run(cls: np.ndarray, masks: np.ndarray, **options: float):
    """Instance outputs of one constructed frame at identity geometry."""
    return postprocess(
        raw(cls, masks), identity_meta(*GRID), LABELS, PostprocessOptions(**options), INSTANCE_ONLY
    )


def test_overlap_goes_to_higher_score_and_tables_match_raster() -> None:
    rects = [(1, 5, 2, 8), (3, 7, 6, 12)]
    result = run(class_logits([CAR, PERSON], [12.0, 14.0]), rect_masks(*GRID, rects))
    expected = np.zeros((64, 128), np.uint16)
    expected[region(rects[0], GRID)] = 2
    expected[region(rects[1], GRID)] = 1
    assert result.instance_raster.dtype == np.uint16
    np.testing.assert_array_equal(result.instance_raster, expected)
    inst = result.instances
    np.testing.assert_array_equal(inst.ids, [1, 2])
    np.testing.assert_array_equal(inst.class_index, [PERSON, CAR])
    np.testing.assert_array_equal(inst.label_id, [11, 12])
    np.testing.assert_allclose(inst.score, [class_prob(14.0), class_prob(12.0)], rtol=1e-5)
    np.testing.assert_array_equal(inst.box, [[48, 24, 96, 56], [16, 8, 64, 40]])
    a0, a1 = (region(r, GRID) for r in rects)
    np.testing.assert_array_equal(inst.area, [a1.sum(), (a0 & ~a1).sum()])
    for i, n in enumerate(inst.ids):
        assert inst.area[i] == np.count_nonzero(result.instance_raster == n)


@pytest.mark.parametrize("first", [0, 1])
def test_equal_scores_lower_query_index_ranks_first(first: int) -> None:
    rects = [(1, 4, 1, 5), (2, 5, 3, 7)]
    if first:
        rects.reverse()
    result = run(class_logits([CAR, CAR]), rect_masks(*GRID, rects))
    assert result.instances.score[0] == result.instances.score[1]
    expected = np.zeros((64, 128), np.uint16)
    expected[region(rects[1], GRID)] = 2
    expected[region(rects[0], GRID)] = 1
    np.testing.assert_array_equal(result.instance_raster, expected)


def test_no_confident_masks_gives_empty_result() -> None:
    masks = np.full((3, *GRID), -5.0, np.float32)
    result = run(class_logits([PERSON, CAR, PERSON]), masks)
    assert len(result.instances) == 0
    assert result.instances.box.shape == (0, 4)
    np.testing.assert_array_equal(result.instance_raster, np.zeros((64, 128), np.uint16))


def test_all_no_object_gives_empty_result() -> None:
    masks = rect_masks(*GRID, [(0, 8, 0, 16)] * 4)
    result = run(class_logits([NO_OBJECT] * 4), masks)
    assert len(result.instances) == 0
    assert not result.instance_raster.any()


def test_scores_below_threshold_are_dropped() -> None:
    rects = [(0, 2, 0, 2), (4, 6, 4, 6)]
    cls = class_logits([PERSON, CAR], [12.0, 0.5])  # p(car) = e^.5 / (e^.5 + 4) ~ 0.29
    result = run(cls, rect_masks(*GRID, rects), score_threshold=0.3)
    np.testing.assert_array_equal(result.instances.class_index, [PERSON])
    assert not result.instance_raster[region(rects[1], GRID)].any()


def test_stuff_classes_are_not_instances() -> None:
    rects = [(0, 4, 0, 16), (5, 7, 2, 4)]
    result = run(class_logits([ROAD, PERSON], [15.0, 12.0]), rect_masks(*GRID, rects))
    np.testing.assert_array_equal(result.instances.label_id, [11])
    assert not result.instance_raster[region(rects[0], GRID)].any()


def test_max_instances_caps_in_score_order() -> None:
    rects = [(0, 2, 2 * q, 2 * q + 2) for q in range(5)]
    cls = class_logits([PERSON] * 5, [16.0, 15.0, 14.0, 13.0, 12.0])
    result = run(cls, rect_masks(*GRID, rects), max_instances=3)
    np.testing.assert_array_equal(result.instances.ids, [1, 2, 3])
    for q in range(5):
        assert set(np.unique(result.instance_raster[region(rects[q], GRID)])) == {
            q + 1 if q < 3 else 0
        }


def test_query_counted_once_with_its_best_class() -> None:
    cls = np.zeros((1, LABELS.num_classes + 1), np.float32)
    cls[0, CAR], cls[0, PERSON] = 9.0, 8.0
    result = run(cls, rect_masks(*GRID, [(0, 4, 0, 4)]), score_threshold=0.0)
    np.testing.assert_array_equal(result.instances.class_index, [CAR])


def test_fully_occluded_instance_is_removed_and_ids_renumbered() -> None:
    rects = [(0, 6, 0, 8), (1, 3, 1, 3), (6, 8, 10, 14)]
    cls = class_logits([CAR, PERSON, PERSON], [14.0, 12.0, 10.0])
    frame = RuleInputs.of(
        raw(cls, rect_masks(*GRID, rects)), identity_meta(*GRID), LABELS, PostprocessOptions()
    )
    selection = select_instances(frame)
    np.testing.assert_array_equal(selection.query, [0, 1, 2])
    result = run(cls, rect_masks(*GRID, rects))
    np.testing.assert_array_equal(result.instances.ids, [1, 2])
    np.testing.assert_array_equal(result.instances.label_id, [12, 11])
    np.testing.assert_array_equal(np.unique(result.instance_raster), [0, 1, 2])
    assert (result.instance_raster[region(rects[2], GRID)] == 2).all()
    np.testing.assert_array_equal(result.instances.box[1], [80, 48, 112, 64])


def test_mask_score_ignores_padding_texels() -> None:
    # Camera 64x64 into a 64x128 input: grid columns >= 8 are padding; a query positive only
    # there has mask score 0 and is no instance even at score_threshold 0.
    from compactinst_ros.structures import FrameMeta

    meta = FrameMeta.letterbox(64, 64, 64, 128)
    masks = rect_masks(*GRID, [(0, 8, 9, 16), (0, 4, 0, 4)])
    result = postprocess(
        raw(class_logits([PERSON, CAR]), masks),
        meta,
        LABELS,
        PostprocessOptions(score_threshold=1e-6),
        INSTANCE_ONLY,
    )
    np.testing.assert_array_equal(result.instances.class_index, [CAR])
    assert result.instance_raster.shape == (64, 64)
