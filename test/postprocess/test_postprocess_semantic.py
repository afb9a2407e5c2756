"""Semantic rule on constructed logits with known answers (rule 5 of docs/CONTRACTS.md)."""

from __future__ import annotations

import numpy as np
from postprocess_scenes import (
    CAR,
    LABELS,
    NO_OBJECT,
    PERSON,
    ROAD,
    SKY,
    class_logits,
    identity_meta,
    raw,
    rect_masks,
)

from compactinst_ros.labels import LabelSet
from compactinst_ros.postprocess import (
    SEMANTIC_VOID_FLOOR,
    RuleInputs,
    class_maps,
    postprocess,
    semantic_lowres,
)
from compactinst_ros.structures import OutputSet, PostprocessOptions

GRID = (8, 16)
SEMANTIC_ONLY = OutputSet(instance=False, panoptic=False, semantic=True)


def run(cls: np.ndarray, masks: np.ndarray, labels: LabelSet = LABELS) -> np.ndarray:
    """Semantic raster of one constructed frame at identity geometry."""
    result = postprocess(
        raw(cls, masks), identity_meta(*GRID), labels, PostprocessOptions(), SEMANTIC_ONLY
    )
    assert result.instance_raster is None and result.panoptic_raster is None
    return result.semantic_raster


def test_regions_get_label_ids_and_uncovered_pixels_are_void() -> None:
    rects = [(0, 4, 0, 8), (4, 8, 0, 8), (0, 8, 10, 16)]
    raster = run(class_logits([SKY, ROAD, CAR]), rect_masks(*GRID, rects))
    assert raster.dtype == np.uint8
    assert (raster[:, :64][:32] == 7).all() and (raster[:, :64][32:] == 3).all()
    assert (raster[:, 80:] == 12).all()
    assert (raster[:, 68:76] == 0).all()  # more than 1/2 texel away from any region: S < 0.05


def test_semantic_extends_to_the_void_floor_not_to_the_mask_threshold() -> None:
    # S is upsampled after the sigmoid: a 0-to-1 ramp between texel centres 7 and 8 stays above
    # the 0.05 floor for all but the last pixel of the 8-pixel ramp.
    raster = run(class_logits([PERSON]), rect_masks(*GRID, [(0, 8, 0, 8)]))
    ramp = (np.arange(60, 68) + 0.5) / 8 - 0.5 - 7  # 1 - weight of texel 8 at pixels 60..67
    expected = np.where(1 - ramp >= 0.05, 11, 0)
    np.testing.assert_array_equal(raster[0, 60:68], expected)
    assert (raster[:, :60] == 11).all() and (raster[:, 68:] == 0).all()


def test_higher_summed_probability_wins_overlaps() -> None:
    rects = [(0, 8, 0, 10), (0, 8, 6, 16)]
    raster = run(class_logits([PERSON, CAR], [3.0, 6.0]), rect_masks(*GRID, rects))
    assert (raster[:, 56:] == 12).all() and (raster[:, :40] == 11).all()


def test_all_no_object_is_void() -> None:
    raster = run(class_logits([NO_OBJECT] * 4), rect_masks(*GRID, [(0, 8, 0, 16)] * 4))
    np.testing.assert_array_equal(raster, np.zeros((64, 128), np.uint8))


def test_low_probability_everywhere_is_void() -> None:
    frame = raw(class_logits([PERSON]), np.full((1, *GRID), -4.0, np.float32))
    maps = semantic_lowres(RuleInputs.of(frame, identity_meta(*GRID), LABELS, PostprocessOptions()))
    assert maps.max() < SEMANTIC_VOID_FLOOR
    assert not run(class_logits([PERSON]), np.full((1, *GRID), -4.0, np.float32)).any()


def test_label_ids_above_255_give_uint16() -> None:
    labels = LabelSet(names=("big", "small"), ids=(300, 7), isthing=(True, False))
    cls = np.array([[12.0, 0.0, 0.0], [0.0, 12.0, 0.0]], np.float32)
    raster = run(cls, rect_masks(*GRID, [(0, 8, 0, 8), (0, 8, 8, 16)]), labels)
    assert raster.dtype == np.uint16
    assert (raster[:, :60] == 300).all() and (raster[:, 68:] == 7).all()


def test_class_maps_sum_in_query_order() -> None:
    """S is the float32 sum of the per-query terms taken in query order, whatever the sizes.

    A BLAS product splits and reorders the sum (its last bits follow its thread count); the
    rule fixes the order so every machine and the CUDA kernel's loop agree.
    """
    rng = np.random.default_rng(3)
    probs = rng.random((50, 9), dtype=np.float32)
    masks = rng.random((50, 32, 48), dtype=np.float32)
    expected = masks[0][None] * probs[0][:, None, None]
    for q in range(1, 50):
        expected = expected + masks[q][None] * probs[q][:, None, None]
    np.testing.assert_array_equal(class_maps(probs, masks), expected)
    np.testing.assert_allclose(
        class_maps(probs, masks), np.einsum("qc,qhw->chw", probs, masks), rtol=1e-5
    )
