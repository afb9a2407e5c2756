"""Sampling of low-resolution mask grids straight at camera pixels (rules 1 and 2 of the spec).

A camera pixel samples the stride-``s`` mask grid once, bilinearly, with the composed letterbox
and upsampling transform; there is no intermediate tensor at the padded model-input size. The
sampling is separable, so each axis has per-pixel taps ``(idx0, idx1, w1)`` and a row range of
the camera frame is computed as a vertical blend at low resolution followed by a horizontal one.
"""

from __future__ import annotations

import math

import numpy as np

from ..structures import FrameMeta

#: Upper bound on one (maps, rows, width) float32 block. A few temporaries of this size live at
#: once; 2 MiB keeps them in cache and is faster on CPU than larger blocks (any size is exact).
DEFAULT_CHUNK_BYTES = 2 * 1024 * 1024

Taps = tuple[np.ndarray, np.ndarray, np.ndarray]


def logit_threshold(mask_threshold: float) -> np.float32:
    """T = logit(mask_threshold): ``sigmoid(m) > t`` is evaluated as ``m > T`` (0 for 0.5)."""
    return np.float32(math.log(mask_threshold / (1.0 - mask_threshold)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """float32 logistic ``1 / (1 + exp(-x))``, the kernels' operation order (the GPU twin uses
    this one); exp overflow for x < -88 correctly gives 0."""
    with np.errstate(over="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-x.astype(np.float32, copy=False)))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax in float32 with the row maximum subtracted first, as the selection kernel."""
    z = logits.astype(np.float32) - logits.max(axis=-1, keepdims=True).astype(np.float32)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def bilinear_taps(src_len: int, resized_len: int, grid_len: int, stride: int) -> Taps:
    """Per camera pixel along one axis: texel indices ``idx0 <= idx1`` and the weight of idx1.

    Position ``(x + 0.5) * (resized_len / src_len) / stride - 0.5`` clamped to
    ``[0, grid_len - 1]`` (PyTorch's align_corners=False border), computed in float64;
    ``idx1 = min(idx0 + 1, grid_len - 1)``; the sample is ``(1 - w1) * g[idx0] + w1 * g[idx1]``.
    """
    pos = (np.arange(src_len, dtype=np.float64) + 0.5) * (resized_len / src_len) / stride - 0.5
    pos = np.clip(pos, 0.0, grid_len - 1)
    idx0 = np.floor(pos).astype(np.intp)
    idx1 = np.minimum(idx0 + 1, grid_len - 1)
    return idx0, idx1, (pos - idx0).astype(np.float32)


def valid_region(meta: FrameMeta, stride: int, grid_h: int, grid_w: int) -> tuple[int, int]:
    """Rows and columns ``(vh, vw)`` of the grid that overlap the resized image (rule 2).

    Texel ``(i, j)`` is valid when ``i < resized_h / s`` and ``j < resized_w / s``, i.e. the
    first ``ceil(resized / s)`` rows and columns; padding-only texels never count in scores.
    """
    return min(grid_h, -(-meta.resized_h // stride)), min(grid_w, -(-meta.resized_w // stride))


class Resampler:
    """Separable bilinear sampler from one (h, w) mask grid geometry to the camera frame."""

    def __init__(self, meta: FrameMeta, stride: int, grid_h: int, grid_w: int) -> None:
        self.height, self.width = meta.src_h, meta.src_w
        self.rows_taps = bilinear_taps(meta.src_h, meta.resized_h, grid_h, stride)
        self.cols_taps = bilinear_taps(meta.src_w, meta.resized_w, grid_w, stride)

    def sample(
        self, grids: np.ndarray, rows: slice, cols: slice | np.ndarray | None = None
    ) -> np.ndarray:
        """(N, len(rows), len(cols)) float32 samples of (N, h, w) grids for a camera window.

        ``cols`` may be an index array (any columns, in order); each sample is the same float32
        arithmetic whatever the window, so windows of one frame agree bit for bit.
        """
        i0, i1, wy = (t[rows] for t in self.rows_taps)
        j0, j1, wx = (t[cols] for t in self.cols_taps) if cols is not None else self.cols_taps
        top = grids[:, i0, :]
        vert = grids[:, i1, :]
        vert -= top
        vert *= wy[None, :, None]
        vert += top  # top + (bottom - top) * wy, in place
        left = vert[:, :, j0]
        out = vert[:, :, j1]
        out -= left
        out *= wx
        out += left  # left + (right - left) * wx, in place
        return out

    def camera_span(self, lo: np.ndarray, hi: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
        """Camera pixel range [start, stop) whose taps touch texels lo..hi (inclusive) on an axis.

        Taps are monotone in the pixel index, so the pixels are those with ``idx1 >= lo`` and
        ``idx0 <= hi``; outside that range a bilinear sample only blends texels outside lo..hi.
        """
        idx0, idx1, _ = self.rows_taps if axis == 0 else self.cols_taps
        start = np.searchsorted(idx1, lo, side="left")
        stop = np.searchsorted(idx0, hi, side="right")
        return start, np.maximum(stop, start)


def rows_per_chunk(n_maps: int, width: int, chunk_bytes: int) -> int:
    """Rows of an (n_maps, rows, width) float32 block that fit in ``chunk_bytes`` (at least 1)."""
    return max(1, chunk_bytes // max(1, 4 * n_maps * width))
