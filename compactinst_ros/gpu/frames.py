"""Synthetic inputs of the GPU parity checks, shared by test/gpu and scripts/gpu_check.py: decoder
outputs (blob and near-tie mask logits) with the letterbox geometries to run them at, and camera
frames in every encoding the kernels read. Not used by the runtime."""

from __future__ import annotations

import cv2
import numpy as np

from ..labels import SYNTHETIC_LABELS
from ..structures import FrameMeta, PostprocessOptions, RawOutputs

#: Post-processing options of the parity frames (lower thresholds than the defaults: more kept).
OPTIONS = PostprocessOptions(score_threshold=0.2, object_mask_threshold=0.5)
#: Mean colour the letterbox pads with (the default bundle's).
PAD = (123.675, 116.28, 103.53)
#: Every camera encoding the kernels read.
ENCODINGS = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "uyvy", "yuyv"]
#: Letterbox geometries of the pre-processing checks: (src_h, src_w, input_h, input_w).
GEOMETRIES = [(120, 200, 64, 128), (64, 128, 64, 128), (50, 300, 64, 128), (130, 90, 64, 128)]


def blob_frame(seed: int, q: int = 20, h: int = 16, w: int = 32) -> RawOutputs:
    """Mask logits with spatial structure (Gaussian blobs) and peaked class logits."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    cy, cx = rng.uniform(0, h, q), rng.uniform(0, w, q)
    r = rng.uniform(1.5, 6.0, q)
    d2 = (yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2
    masks = (6.0 * np.exp(-d2 / (2 * r[:, None, None] ** 2)) - 3.0).astype(np.float32)
    masks += rng.normal(0, 0.3, masks.shape).astype(np.float32)
    k = SYNTHETIC_LABELS.num_classes
    logits = rng.normal(0, 1, (q, k + 1)).astype(np.float32)
    logits[np.arange(q), rng.integers(0, k + 1, q)] += rng.uniform(2, 8, q).astype(np.float32)
    return RawOutputs(class_logits=logits, mask_logits=masks, mask_stride=8)


def random_frame(seed: int, q: int = 12, h: int = 8, w: int = 16) -> RawOutputs:
    """Unstructured logits: many near-ties between queries, the hardest case for culling."""
    rng = np.random.default_rng(seed)
    k = SYNTHETIC_LABELS.num_classes
    return RawOutputs(
        class_logits=rng.normal(0, 3, (q, k + 1)).astype(np.float32),
        mask_logits=rng.normal(0, 2, (q, h, w)).astype(np.float32),
        mask_stride=8,
    )


#: Post-processing parity cases: (decoder outputs, src_h, src_w, input_h, input_w).
CASES = [
    (blob_frame(0), 100, 200, 128, 256),
    (blob_frame(1), 128, 256, 128, 256),
    (blob_frame(2), 90, 256, 128, 256),  # letterbox: padding rows at the bottom
    (blob_frame(3), 300, 333, 128, 256),  # upscale-free odd sizes, padding on the right
    (random_frame(4), 70, 130, 64, 128),
    (random_frame(5), 64, 128, 64, 128),
]


def speck_frame() -> tuple[RawOutputs, FrameMeta]:
    """Three confident thing queries on an 8x8 mask grid of a 64x64 input shown at 32x32: two
    large blobs and a single texel between them in rank (a speck of a few camera pixels)."""
    k = SYNTHETIC_LABELS.num_classes
    thing = int(np.flatnonzero(SYNTHETIC_LABELS.thing_mask)[0])
    masks = np.full((3, 8, 8), -8.0, np.float32)
    masks[0, 0:4, 0:4] = 8.0
    masks[1, 6, 1] = 8.0  # the speck
    masks[2, 4:8, 4:8] = 8.0
    cls = np.full((3, k + 1), -8.0, np.float32)
    cls[:, thing] = 9.0
    return RawOutputs(cls, masks, 8), FrameMeta.letterbox(32, 32, 64, 64)


def smooth_rgb(h: int, w: int, seed: int) -> np.ndarray:
    """A natural-looking RGB frame (smooth gradients + texture), uint8."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([xx / w * 255, yy / h * 255, (xx + yy) / (h + w) * 255], axis=-1)
    noise = cv2.GaussianBlur(rng.uniform(0, 255, (h, w, 3)).astype(np.float32), (0, 0), 2.0)
    return np.clip(0.6 * base + 0.4 * noise, 0, 255).astype(np.uint8)


def encode(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """The raw frame a camera would publish in ``encoding`` for this RGB content."""
    if encoding == "rgb8":
        return rgb
    if encoding == "bgr8":
        return np.ascontiguousarray(rgb[..., ::-1])
    if encoding == "rgba8":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2RGBA)
    if encoding == "bgra8":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGRA)
    if encoding == "mono8":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[..., None]
    yuv = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV)  # full-range-ish source; only consistency matters
    y, u, v = (yuv[..., i].astype(np.int32) for i in range(3))
    u2 = ((u[:, 0::2] + u[:, 1::2]) // 2).astype(np.uint8)
    v2 = ((v[:, 0::2] + v[:, 1::2]) // 2).astype(np.uint8)
    y0, y1 = y[:, 0::2].astype(np.uint8), y[:, 1::2].astype(np.uint8)
    order = (u2, y0, v2, y1) if encoding == "uyvy" else (y0, u2, y1, v2)
    return np.stack(order, axis=-1).reshape(rgb.shape[0], rgb.shape[1], 2)
