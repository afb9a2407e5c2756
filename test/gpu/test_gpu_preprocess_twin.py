"""The numpy twin of the preprocessing kernel against the CPU letterbox (OpenCV)."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.gpu import twin
from compactinst_ros.gpu.frames import ENCODINGS, GEOMETRIES, PAD, encode, smooth_rgb
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import FrameMeta


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(("src_h", "src_w", "in_h", "in_w"), GEOMETRIES)
def test_preprocess_twin_matches_opencv(encoding, src_h, src_w, in_h, in_w) -> None:
    """Within 1 grey level of cv2 (fixed-point weights, uint8 rounding), padding exact."""
    raw = encode(smooth_rgb(src_h, src_w, 0), encoding)
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    cpu = letterbox(raw, encoding, meta, PAD)
    gpu = twin.letterbox(raw, encoding, meta, PAD)
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
    wrong = twin.letterbox(raw, "rgb8", meta, PAD)
    assert np.abs(wrong - cpu).max() > 50
