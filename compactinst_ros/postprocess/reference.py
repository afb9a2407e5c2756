"""The numpy reference post-processing: the specification the CUDA kernels are held to.

``postprocess`` turns one frame's decoder outputs into camera-resolution results following
the rules in docs/CONTRACTS.md ("Post-processing rules"), explained in docs/postprocess.md.
Only the outputs named in the OutputSet are computed.
"""

from __future__ import annotations

from ..labels import LabelSet
from ..structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions, RawOutputs
from .frame import RuleInputs
from .instance import instance_inference
from .panoptic import panoptic_inference
from .resample import DEFAULT_CHUNK_BYTES
from .semantic import semantic_inference


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
    frame = RuleInputs.of(raw, meta, labels, options)
    result = FrameResult(meta=meta)
    if outputs.instance:
        result.instances, result.instance_raster = instance_inference(frame, chunk_bytes)
    if outputs.panoptic:
        result.segments, result.panoptic_raster = panoptic_inference(frame, chunk_bytes)
    if outputs.semantic:
        result.semantic_raster = semantic_inference(frame, chunk_bytes)
    return result
