"""CPU pre-processing: camera image -> letterboxed RGB float tensor for the encoder.

Normalisation (mean/std) is inside the encoder graph; here we only convert colour, resize with
bilinear interpolation (OpenCV INTER_LINEAR, half-pixel centres) and pad with the mean colour.
"""

from __future__ import annotations

import cv2
import numpy as np

from .image_formats import to_rgb
from .structures import FrameMeta


def letterbox(
    image: np.ndarray, encoding: str, meta: FrameMeta, pad_value: tuple[float, float, float]
) -> np.ndarray:
    """(1, 3, input_h, input_w) float32 RGB in 0..255, image at top-left, mean-colour padding."""
    rgb = to_rgb(image, encoding)
    if (meta.resized_h, meta.resized_w) != rgb.shape[:2]:
        rgb = cv2.resize(rgb, (meta.resized_w, meta.resized_h), interpolation=cv2.INTER_LINEAR)
    out = np.empty((3, meta.input_h, meta.input_w), np.float32)
    out[:] = np.asarray(pad_value, np.float32)[:, None, None]
    out[:, : meta.resized_h, : meta.resized_w] = rgb.transpose(2, 0, 1)
    return out[None]
