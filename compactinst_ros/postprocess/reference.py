"""The numpy reference post-processing: the specification the CUDA kernels are held to.

``postprocess`` turns one frame's decoder outputs into camera-resolution results following
the rules in docs/CONTRACTS.md ("Post-processing rules"), explained in docs/postprocess.md.
Only the outputs named in the OutputSet are computed.
"""

from __future__ import annotations

import numpy as np

from ..errors import BundleError
from ..labels import LabelSet
from ..structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions, RawOutputs
from .instance import instance_inference
from .panoptic import panoptic_inference
from .resample import DEFAULT_CHUNK_BYTES
from .semantic import semantic_inference


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


def postprocess(
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> FrameResult:
    """Decoder outputs of one frame -> instance, panoptic and semantic results (timings empty).

    ``chunk_bytes`` bounds each float32 block sampled at camera resolution; results do not
    depend on it.
    """
    check_raw_outputs(raw, meta, labels)
    cls = np.asarray(raw.class_logits, np.float32)
    masks = np.ascontiguousarray(raw.mask_logits, np.float32)
    stride = raw.mask_stride
    result = FrameResult(meta=meta)
    if outputs.instance:
        result.instances, result.instance_raster = instance_inference(
            cls, masks, meta, labels, options, stride, chunk_bytes
        )
    if outputs.panoptic:
        result.segments, result.panoptic_raster = panoptic_inference(
            cls, masks, meta, labels, options, stride, chunk_bytes
        )
    if outputs.semantic:
        result.semantic_raster = semantic_inference(cls, masks, meta, labels, stride, chunk_bytes)
    return result
