"""Constructed decoder outputs with known post-processing answers (test helpers, no pytest)."""

from __future__ import annotations

import numpy as np

from compactinst_ros.labels import LabelSet
from compactinst_ros.structures import FrameMeta, RawOutputs

#: Two things and two stuff classes with non-contiguous label ids.
LABELS = LabelSet(
    names=("person", "car", "road", "sky"), ids=(11, 12, 3, 7), isthing=(True, True, False, False)
)
PERSON, CAR, ROAD, SKY = 0, 1, 2, 3
NO_OBJECT = None
#: Logit magnitude that makes sigmoid saturate to exactly 0/1 in float32 at every camera pixel,
#: so region borders are exact texel edges (x8 pixels) with no interpolation band.
SHARP = 1000.0
STRIDE = 8


def identity_meta(grid_h: int, grid_w: int) -> FrameMeta:
    """Camera frame == model input == grid * stride (scale 1, no padding)."""
    return FrameMeta.letterbox(grid_h * STRIDE, grid_w * STRIDE, grid_h * STRIDE, grid_w * STRIDE)


def class_logits(classes: list[int | None], confidence: list[float] | float = 12.0) -> np.ndarray:
    """(Q, K+1) logits: ``confidence`` on each query's class (None = no-object), 0 elsewhere."""
    k = LABELS.num_classes
    conf = np.broadcast_to(np.asarray(confidence, np.float32), (len(classes),))
    out = np.zeros((len(classes), k + 1), np.float32)
    for q, c in enumerate(classes):
        out[q, k if c is None else c] = conf[q]
    return out


def rect_masks(
    grid_h: int, grid_w: int, rects: list[tuple[int, int, int, int] | None], on: float = SHARP
) -> np.ndarray:
    """(Q, h, w) logits: ``on`` inside texel rectangle (r0, r1, c0, c1), ``-on`` outside."""
    out = np.full((len(rects), grid_h, grid_w), -on, np.float32)
    for q, rect in enumerate(rects):
        if rect is not None:
            r0, r1, c0, c1 = rect
            out[q, r0:r1, c0:c1] = on
    return out


def raw(cls: np.ndarray, masks: np.ndarray) -> RawOutputs:
    """RawOutputs at the test stride."""
    return RawOutputs(class_logits=cls, mask_logits=masks, mask_stride=STRIDE)


def class_prob(confidence: float) -> float:
    """Softmax probability of the confident class in a ``class_logits`` row (float64)."""
    k = LABELS.num_classes
    return float(np.exp(confidence) / (np.exp(confidence) + k))


def region(rect: tuple[int, int, int, int], grid: tuple[int, int]) -> np.ndarray:
    """Camera pixels > T of a ``rect_masks`` rectangle under ``identity_meta``: (H, W) bool.

    Bilinear sampling of a separable indicator is the product of two 1-D linear interpolations
    (``np.interp`` clamps like the border rule), so the region is ``fy * fx > 1/2``: the
    rectangle's texel edges x8 with slightly rounded corners.
    """
    r0, r1, c0, c1 = rect
    fracs = []
    for lo, hi, n in ((r0, r1, grid[0]), (c0, c1, grid[1])):
        pos = (np.arange(n * STRIDE) + 0.5) / STRIDE - 0.5
        fracs.append(np.interp(pos, np.arange(n), ((np.arange(n) >= lo) & (np.arange(n) < hi))))
    return np.outer(fracs[0], fracs[1]) > 0.5
