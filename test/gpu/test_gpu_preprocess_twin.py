"""The numpy twin of the preprocessing kernel against the CPU letterbox (OpenCV)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from compactinst_ros.postprocess import gpu_twin
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import FrameMeta

PAD = (123.675, 116.28, 103.53)


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


ENCODINGS = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "uyvy", "yuyv"]
GEOMETRIES = [(120, 200, 64, 128), (64, 128, 64, 128), (50, 300, 64, 128), (130, 90, 64, 128)]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(("src_h", "src_w", "in_h", "in_w"), GEOMETRIES)
def test_preprocess_twin_matches_opencv(encoding, src_h, src_w, in_h, in_w) -> None:
    """Within 1 grey level of cv2 (fixed-point weights, uint8 rounding), padding exact."""
    raw = encode(smooth_rgb(src_h, src_w, 0), encoding)
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    cpu = letterbox(raw, encoding, meta, PAD)
    gpu = gpu_twin.letterbox(raw, encoding, meta, PAD)
    assert gpu.shape == cpu.shape == (1, 3, in_h, in_w)
    assert gpu.dtype == np.float32
    diff = np.abs(gpu - cpu)
    tol = 2.5 if encoding in ("uyvy", "yuyv") else 1.0
    assert diff.max() <= tol, diff.max()
    assert diff.mean() < 0.3
    np.testing.assert_array_equal(gpu[:, :, meta.resized_h :], cpu[:, :, meta.resized_h :])
    np.testing.assert_array_equal(gpu[:, :, :, meta.resized_w :], cpu[:, :, :, meta.resized_w :])


def test_preprocess_twin_detects_channel_swap() -> None:
    """A BGR frame read as RGB is far off: the comparison above can fail."""
    raw = encode(smooth_rgb(64, 128, 1), "bgr8")
    meta = FrameMeta.letterbox(64, 128, 64, 128)
    cpu = letterbox(raw, "bgr8", meta, PAD)
    wrong = gpu_twin.letterbox(raw, "rgb8", meta, PAD)
    assert np.abs(wrong - cpu).max() > 50
