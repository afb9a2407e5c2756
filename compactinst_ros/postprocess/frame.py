"""What the post-processing rules read for one frame, checked and converted once.

The reference (``reference.py``), the tiled fast path (``fast.py``) and every rule take one
``RuleInputs``: the decoder outputs as float32 with their mask stride, the letterbox geometry,
the label set and the thresholds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import BundleError
from ..labels import LabelSet
from ..structures import FrameMeta, PostprocessOptions, RawOutputs
from .resample import Resampler, logit_threshold, sigmoid, valid_region


def check_raw_outputs(raw: RawOutputs, meta: FrameMeta, labels: LabelSet) -> None:
    """Raise BundleError when the decoder outputs do not fit the label set or the frame geometry."""
    cls, masks, stride = raw.class_logits, raw.mask_logits, raw.mask_stride
    if cls.ndim != 2 or masks.ndim != 3:
        raise BundleError(
            f"decoder outputs have shapes {cls.shape} and {masks.shape}; post-processing needs "
            "class logits (Q, K+1) and mask logits (Q, h, w) of one frame (drop the batch axis)"
        )
    if cls.shape[0] != masks.shape[0]:
        raise BundleError(
            f"class logits have {cls.shape[0]} queries but mask logits {masks.shape[0]}; the "
            "decoder outputs are from different models"
        )
    if cls.shape[1] != labels.num_classes + 1:
        raise BundleError(
            f"class logits have {cls.shape[1]} columns but the label set has "
            f"{labels.num_classes} classes (+1 no-object); the bundle's labels do not match its "
            "decoder"
        )
    h, w = masks.shape[1:]
    if stride < 1 or h * stride < meta.resized_h or w * stride < meta.resized_w:
        raise BundleError(
            f"mask grid {h}x{w} at stride {stride} does not cover the "
            f"resized image {meta.resized_h}x{meta.resized_w}; the bundle's mask stride or input "
            "size is wrong"
        )


@dataclass(frozen=True)
class RuleInputs:
    """One frame as the rules read it; build it with ``of``, which checks and converts."""

    class_logits: np.ndarray  # (Q, K+1) float32
    mask_logits: np.ndarray  # (Q, h, w) float32, C-contiguous
    stride: int  # model-input pixels per mask texel
    meta: FrameMeta
    labels: LabelSet
    options: PostprocessOptions

    @classmethod
    def of(
        cls, raw: RawOutputs, meta: FrameMeta, labels: LabelSet, options: PostprocessOptions
    ) -> RuleInputs:
        """``raw`` as float32 after ``check_raw_outputs`` (BundleError when it does not fit)."""
        check_raw_outputs(raw, meta, labels)
        return cls(
            np.asarray(raw.class_logits, np.float32),
            np.ascontiguousarray(raw.mask_logits, np.float32),
            raw.mask_stride,
            meta,
            labels,
            options,
        )

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(h, w) of the mask grid."""
        return self.mask_logits.shape[1], self.mask_logits.shape[2]

    @functools.cached_property
    def mask_probs(self) -> np.ndarray:
        """(Q, h, w) float32 ``sigmoid(mask_logits)``, computed once for the rules that read it."""
        return sigmoid(self.mask_logits)

    @property
    def threshold(self) -> np.float32:
        """T = logit(mask_threshold): a mask is on where its logit is > T (rules 3 and 4)."""
        return logit_threshold(self.options.mask_threshold)

    def valid_region(self) -> tuple[int, int]:
        """Rows and columns of the mask grid that overlap the resized image (rule 2)."""
        return valid_region(self.meta, self.stride, *self.grid_shape)

    def resampler(self) -> Resampler:
        """Sampler from this frame's mask grid (or maps of its shape) to its camera pixels."""
        return Resampler(self.meta, self.stride, *self.grid_shape)
