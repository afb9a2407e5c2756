"""Semantic rule (rule 5 of the spec): class maps combined at low resolution, then upsampled.

``S[c] = sum_q p[q, c] * sigmoid(m_q)`` is formed on the (h, w) grid, summed query by query,
so only K class maps, never Q query masks, are sampled at camera resolution, in row chunks.
"""

from __future__ import annotations

import numpy as np

from ..labels import LabelSet
from .frame import RuleInputs
from .resample import DEFAULT_CHUNK_BYTES, rows_per_chunk, softmax

#: Pixels whose best class map value is below this are void (0): no query claims them.
SEMANTIC_VOID_FLOOR = np.float32(0.05)


def semantic_dtype(labels: LabelSet) -> type[np.unsignedinteger]:
    """uint8 when every label id fits (<= 255), else uint16."""
    return np.uint8 if max(labels.ids) <= 255 else np.uint16


def class_maps(class_probs: np.ndarray, mask_probs: np.ndarray) -> np.ndarray:
    """(K, h, w) float32 ``S[c] = sum_q p[q, c] * s_q`` for (Q, K) ``p`` and (Q, h, w) ``s``.

    Summed in query order, one rounded float32 multiply and add per query (never fused; see
    docs/gpu.md, "Float arithmetic"): the same bits on every IEEE-754 machine and thread count
    (a threaded BLAS product's last bits depend on how many threads split it), in the order the
    CUDA kernel sums.
    """
    q, h, w = mask_probs.shape
    probs = mask_probs.reshape(q, h * w)
    weights = np.ascontiguousarray(class_probs.T, np.float32)[:, :, None]  # (K, Q, 1)
    maps = np.zeros((len(weights), h * w), np.float32)
    term = np.empty_like(maps)
    for j in range(q):
        np.multiply(weights[:, j], probs[j], out=term)
        maps += term
    return maps.reshape(-1, h, w)


def semantic_lowres(frame: RuleInputs) -> np.ndarray:
    """(K, h, w) float32 class maps ``S[c] = sum_q softmax(class)[q, c] * sigmoid(m_q)``."""
    return class_maps(softmax(frame.class_logits)[:, :-1], frame.mask_probs)


def semantic_inference(frame: RuleInputs, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Rule 5: (src_h, src_w) label-id raster; argmax of upsampled S, void where max S < 0.05."""
    maps = semantic_lowres(frame)
    resampler, meta = frame.resampler(), frame.meta
    dtype = semantic_dtype(frame.labels)
    label_of = frame.labels.id_array.astype(dtype)
    raster = np.zeros((meta.src_h, meta.src_w), dtype)
    step = rows_per_chunk(len(maps), meta.src_w, chunk_bytes)
    for y in range(0, meta.src_h, step):
        rows = slice(y, min(y + step, meta.src_h))
        up = resampler.sample(maps, rows)
        best = up.argmax(axis=0)
        top = np.take_along_axis(up, best[None], axis=0)[0]
        raster[rows] = np.where(top >= SEMANTIC_VOID_FLOOR, label_of[best], 0)
    return raster
