"""Camera image encodings: validation and conversion to RGB, shared by the node and the CLI.

Arrays are HxWxC uint8 in the encoding's own channel layout; yuv422 (UYVY) and yuv422_yuy2
(YUYV) are HxWx2. The ROS node builds these arrays from message bytes with
``array_from_buffer`` (a zero-copy view that honours ``step`` padding).
"""

from __future__ import annotations

import cv2
import numpy as np

from .errors import InputError

#: encoding -> channels per pixel in the array handed to the pipeline
ENCODINGS: dict[str, int] = {
    "rgb8": 3,
    "bgr8": 3,
    "rgba8": 4,
    "bgra8": 4,
    "mono8": 1,
    "yuv422": 2,
    "uyvy": 2,
    "yuv422_yuy2": 2,
    "yuyv": 2,
}

_TO_RGB = {
    "rgb8": None,
    "bgr8": cv2.COLOR_BGR2RGB,
    "rgba8": cv2.COLOR_RGBA2RGB,
    "bgra8": cv2.COLOR_BGRA2RGB,
    "mono8": cv2.COLOR_GRAY2RGB,
    "yuv422": cv2.COLOR_YUV2RGB_UYVY,
    "uyvy": cv2.COLOR_YUV2RGB_UYVY,
    "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUYV,
    "yuyv": cv2.COLOR_YUV2RGB_YUYV,
}

#: Largest accepted frame side; larger frames are refused before any allocation.
MAX_SIDE = 16384


def check_encoding(encoding: str) -> int:
    """Channels for ``encoding``; InputError listing the supported ones otherwise."""
    try:
        return ENCODINGS[encoding.lower()]
    except KeyError:
        raise InputError(
            f"unsupported image encoding '{encoding}'; publish one of {sorted(ENCODINGS)}"
        ) from None


def validate_image(image: np.ndarray, encoding: str) -> np.ndarray:
    """Check dtype, rank, size and channel count; returns an HxWxC view."""
    channels = check_encoding(encoding)
    if not isinstance(image, np.ndarray):
        raise InputError(f"image must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise InputError(f"image dtype {image.dtype} is not supported; convert to uint8")
    if image.ndim == 2 and channels == 1:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] != channels:
        raise InputError(
            f"image shape {image.shape} does not fit encoding '{encoding}' "
            f"(expected HxWx{channels})"
        )
    h, w = image.shape[:2]
    if h == 0 or w == 0:
        raise InputError(f"image has zero size ({h}x{w}); the camera sent an empty frame")
    if h > MAX_SIDE or w > MAX_SIDE:
        raise InputError(
            f"image {h}x{w} exceeds the {MAX_SIDE}-pixel side limit; downscale at the camera"
        )
    if channels == 2 and w % 2:
        raise InputError(f"{encoding} needs an even width, got {w}")
    return image


def to_rgb(image: np.ndarray, encoding: str) -> np.ndarray:
    """Validated HxWx3 RGB uint8 (a view for rgb8, one conversion otherwise)."""
    image = validate_image(image, encoding)
    code = _TO_RGB[encoding.lower()]
    if code is None:
        return image
    return cv2.cvtColor(np.ascontiguousarray(image), code)


def array_from_buffer(
    data: bytes | memoryview | np.ndarray, height: int, width: int, step: int, encoding: str
) -> np.ndarray:
    """Zero-copy HxWxC view of a row-padded image buffer (ROS sensor_msgs/Image layout)."""
    channels = check_encoding(encoding)
    if height <= 0 or width <= 0:
        raise InputError(f"image has zero size ({height}x{width}); the camera sent an empty frame")
    if height > MAX_SIDE or width > MAX_SIDE:
        raise InputError(
            f"image {height}x{width} exceeds the {MAX_SIDE}-pixel side limit; "
            "downscale at the camera"
        )
    row = width * channels
    if step < row:
        raise InputError(f"step {step} is smaller than width x channels = {row}; fix the driver")
    flat = np.frombuffer(data, dtype=np.uint8)
    if flat.size < height * step:
        raise InputError(
            f"image data has {flat.size} bytes, fewer than height x step = {height * step}; "
            "the message is truncated"
        )
    rows = flat[: height * step].reshape(height, step)
    return rows[:, :row].reshape(height, width, channels)
