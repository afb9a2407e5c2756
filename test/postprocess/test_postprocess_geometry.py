"""Coordinate rule, valid region and letterbox geometry (rules 1 and 2 of docs/CONTRACTS.md)."""

from __future__ import annotations

import numpy as np
import pytest
from postprocess_scenes import LABELS, PERSON, class_logits, raw, rect_masks

from compactinst_ros.postprocess import bilinear_taps, postprocess, valid_region
from compactinst_ros.postprocess.resample import Resampler
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions


def test_taps_match_torch_bilinear_upsampling_without_letterbox() -> None:
    torch = pytest.importorskip("torch")
    grid = np.random.default_rng(0).normal(size=(3, 5, 7)).astype(np.float32)
    meta = FrameMeta.letterbox(40, 56, 40, 56)
    ours = Resampler(meta, 8, 5, 7).sample(grid, slice(0, 40))
    theirs = torch.nn.functional.interpolate(
        torch.from_numpy(grid)[None], size=(40, 56), mode="bilinear", align_corners=False
    )[0].numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_taps_follow_the_composed_formula_with_clamping() -> None:
    idx0, idx1, w1 = bilinear_taps(src_len=7, resized_len=5, grid_len=3, stride=2)
    pos = np.clip((np.arange(7) + 0.5) * (5 / 7) / 2 - 0.5, 0, 2)
    np.testing.assert_array_equal(idx0, np.floor(pos))
    np.testing.assert_array_equal(idx1, np.minimum(np.floor(pos) + 1, 2))
    np.testing.assert_allclose(w1, pos - np.floor(pos), atol=1e-7)
    assert idx0[0] == 0 and w1[0] == 0  # left border: position < 0 clamps to texel 0
    assert np.all(np.diff(idx0) >= 0)


def test_valid_region_counts_partially_covered_texels() -> None:
    meta = FrameMeta.letterbox(500, 1000, 512, 1000)  # resized 500 x 1000
    assert (meta.resized_h, meta.resized_w) == (500, 1000)
    assert valid_region(meta, 8, 64, 128) == (63, 125)
    meta = FrameMeta.letterbox(448, 320, 640, 320)
    assert valid_region(meta, 8, 80, 40) == (56, 40)


@pytest.mark.parametrize("vertical", [False, True])
def test_left_half_of_resized_image_is_left_half_of_camera(vertical: bool) -> None:
    # Camera 500x700 into 320x640: scale 0.64 (non-integer), resized 320x448, right padding.
    src, inp, grid = (500, 700), (320, 640), (40, 80)
    rect = (0, 40, 0, 28)  # texel columns < 28: input x < 224 = resized_w / 2
    if vertical:  # the transposed frame: bottom padding, top half
        src, inp, grid, rect = src[::-1], inp[::-1], grid[::-1], (0, 28, 0, 40)
    meta = FrameMeta.letterbox(*src, *inp)
    assert meta.scale == pytest.approx(0.64)
    masks = rect_masks(*grid, [rect])
    result = postprocess(
        raw(class_logits([PERSON]), masks), meta, LABELS, PostprocessOptions(), OutputSet()
    )
    expected = np.zeros(src, bool)
    if vertical:
        expected[: src[0] // 2] = True
    else:
        expected[:, : src[1] // 2] = True
    np.testing.assert_array_equal(result.instance_raster == 1, expected)
    np.testing.assert_array_equal(result.panoptic_raster == 11001, expected)
    x1, y1 = (src[1], src[0] // 2) if vertical else (src[1] // 2, src[0])
    np.testing.assert_array_equal(result.instances.box, [[0, 0, x1, y1]])
    assert result.instances.area[0] == expected.sum()
