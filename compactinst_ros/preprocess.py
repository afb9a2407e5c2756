"""CPU pre-processing: camera image -> letterboxed RGB float tensor for the encoder.

Normalisation (mean/std) is inside the encoder graph; here we only convert colour, resize with
bilinear interpolation (OpenCV INTER_LINEAR, half-pixel centres) and pad with the mean colour.

Encodings whose RGB is a choice of their channels (bgr8, rgba8, bgra8, mono8) are resized as
they come and their channels picked while the tensor is written: resizing treats each channel
alone with the same integer arithmetic, so picking before or after gives the same bytes, and a
1080p bgr8 frame skips a full-resolution colour conversion. Other encodings (YUV) are converted
first, since their RGB mixes channels.
"""

from __future__ import annotations

import cv2
import numpy as np

from .image_formats import to_rgb, validate_image
from .structures import FrameMeta

#: encoding -> the source channel of R, G and B, for encodings whose RGB picks channels
RGB_CHANNELS = {
    "rgb8": (0, 1, 2),
    "bgr8": (2, 1, 0),
    "rgba8": (0, 1, 2),
    "bgra8": (2, 1, 0),
    "mono8": (0, 0, 0),
}


def letterbox(
    image: np.ndarray,
    encoding: str,
    meta: FrameMeta,
    pad_value: tuple[float, float, float],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """(1, 3, input_h, input_w) float32 RGB in 0..255, image at top-left, mean-colour padding.

    ``out``: a (3, input_h, input_w) float32 array to write into (a slot of a batch tensor),
    which then comes back with a leading axis, so a batch is written with no extra copy.
    """
    channels = RGB_CHANNELS.get(encoding.lower())
    source = validate_image(image, encoding) if channels else to_rgb(image, encoding)
    channels = channels or (0, 1, 2)
    if (meta.resized_h, meta.resized_w) != source.shape[:2]:
        source = cv2.resize(
            np.ascontiguousarray(source),
            (meta.resized_w, meta.resized_h),
            interpolation=cv2.INTER_LINEAR,
        )
    if source.ndim == 2:  # OpenCV drops the axis of a one-channel image
        source = source[:, :, None]
    if out is None:
        out = np.empty((3, meta.input_h, meta.input_w), np.float32)
    rows, cols = meta.resized_h, meta.resized_w
    pad = np.asarray(pad_value, np.float32)
    for plane, channel, value in zip(out, channels, pad, strict=True):
        plane[rows:] = value
        plane[:rows, cols:] = value
        plane[:rows, :cols] = source[:, :, channel]
    return out[None]
