"""Camera image encodings: validation and conversion to RGB, shared by the node and the CLI.

Arrays are HxWxC uint8 in the encoding's own channel layout; yuv422 (UYVY) and yuv422_yuy2
(YUYV) are HxWx2. The ROS node builds these arrays from message bytes with
``array_from_buffer`` (a zero-copy view that honours ``step`` padding).

Compressed frames (sensor_msgs/CompressedImage) are decoded only in the format their ``format``
field names, and only jpeg or png: ``decode_compressed`` reads the frame size from the PNG IHDR or
JPEG SOFn header and refuses data whose magic bytes do not match, or that would decode to more than
the limits below, before OpenCV allocates anything.
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

#: CompressedImage formats the node decodes, by their ROS names (``jpg`` is read as ``jpeg``).
COMPRESSED_FORMATS = ("jpeg", "png")
#: Compressed payloads above this size are refused before decoding.
MAX_COMPRESSED_BYTES = 64 << 20
#: Pixels a compressed frame may decode to: a small payload can expand to a huge frame, so its
#: size is bounded on its own (64 Mpx, 192 MB as bgr8; 8K video is 33 Mpx).
MAX_COMPRESSED_PIXELS = 1 << 26

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
#: magic bytes -> name, to say what a mislabelled payload really is
_SNIFF = (
    (_PNG_MAGIC, "png"),
    (_JPEG_MAGIC, "jpeg"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"GIF8", "gif"),
    (b"RIFF", "webp or another RIFF container"),
)
#: JPEG markers without a length field (TEM, RSTn, SOI)
_JPEG_STANDALONE = frozenset((0x01, *range(0xD0, 0xD9)))
#: JPEG start-of-frame markers SOF0..SOF15 (C4 DHT, C8 JPG and CC DAC share the range)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: Markers and fill bytes read before giving up on finding SOFn: encoders put it within a few
#: segments, and the bound keeps hostile data from costing a Python step per byte.
_JPEG_MAX_STEPS = 1024


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
    if flat.size > height * step:  # cv_bridge refuses it too: the driver's size fields are off
        raise InputError(
            f"image data has {flat.size} bytes, more than height x step = {height * step}; "
            "fix the driver's height or step"
        )
    rows = flat.reshape(height, step)
    return rows[:, :row].reshape(height, width, channels)


def compressed_format(format_field: str) -> str:
    """``jpeg`` or ``png`` from a CompressedImage ``format`` ("jpeg", "png", or image_transport's
    "bgr8; jpeg compressed bgr8"); InputError naming the accepted formats otherwise."""
    text = format_field.strip().lower()
    if ";" in text:  # "<raw encoding>; <format> compressed <target encoding>"
        words = text.split(";", 1)[1].split()
        text = words[0] if len(words) >= 2 and words[1] == "compressed" else ""
    name = "jpeg" if text == "jpg" else text
    if name not in COMPRESSED_FORMATS:
        raise InputError(
            f"CompressedImage format '{format_field}' is not supported; publish one of "
            f"{list(COMPRESSED_FORMATS)} (or image_transport's '<encoding>; jpeg compressed bgr8' "
            "/ '<encoding>; png compressed bgr8')"
        )
    return name


def _sniffed(head: bytes) -> str:
    """What the magic bytes say the data is, for error messages."""
    kind = next((name for magic, name in _SNIFF if head.startswith(magic)), "unknown data")
    return f"{kind} (starts with {head[:8]!r})"


def _png_size(buf: bytes) -> tuple[int, int]:
    """(height, width) from the IHDR chunk that must follow the PNG signature."""
    if len(buf) < 33:
        raise InputError(f"png data of {len(buf)} bytes is cut short before the end of its header")
    if int.from_bytes(buf[8:12], "big") != 13 or buf[12:16] != b"IHDR":
        raise InputError("png data does not start with an IHDR header; the data is corrupt")
    return int.from_bytes(buf[20:24], "big"), int.from_bytes(buf[16:20], "big")


def _jpeg_size(buf: memoryview) -> tuple[int, int]:
    """(height, width) from the first SOFn segment, walking the segments that precede it."""
    n, pos = len(buf), 2
    for _ in range(_JPEG_MAX_STEPS):
        if pos + 1 >= n:
            raise InputError(f"jpeg data of {n} bytes is cut short before its frame header")
        if buf[pos] != 0xFF:
            raise InputError(f"jpeg data has no marker at byte {pos}; the header is corrupt")
        marker = buf[pos + 1]
        pos += 1
        if marker == 0xFF:  # a fill byte before the marker (one step each)
            continue
        pos += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # EOI, SOS: the frame header must come before either
            raise InputError("jpeg data has no frame (SOFn) header before its scan data")
        if pos + 7 > n:
            raise InputError(f"jpeg data of {n} bytes is cut short before its frame header")
        length = int(buf[pos]) << 8 | int(buf[pos + 1])
        if length < 2:
            raise InputError(f"jpeg segment at byte {pos - 2} has length {length}; corrupt data")
        if marker in _JPEG_SOF:
            height = int(buf[pos + 3]) << 8 | int(buf[pos + 4])
            width = int(buf[pos + 5]) << 8 | int(buf[pos + 6])
            if height == 0:
                raise InputError("jpeg with its height in a DNL marker is not supported")
            return height, width
        pos += length
    raise InputError(
        f"jpeg data has more than {_JPEG_MAX_STEPS} markers before its frame header; corrupt data"
    )


def compressed_image_size(data: bytes | memoryview | np.ndarray, fmt: str) -> tuple[int, int]:
    """(height, width) of ``fmt`` ("jpeg" or "png") data from its header, without decoding;
    InputError when the magic bytes are not ``fmt``'s or the header is corrupt or cut short."""
    buf = memoryview(np.frombuffer(data, np.uint8))
    head = bytes(buf[:33])
    magic = _PNG_MAGIC if fmt == "png" else _JPEG_MAGIC
    if not head.startswith(magic):
        raise InputError(
            f"CompressedImage format says '{fmt}' but the data is {_sniffed(head)}; publish "
            f"{fmt} data or set format to what it is (accepted: {list(COMPRESSED_FORMATS)})"
        )
    return _png_size(head) if fmt == "png" else _jpeg_size(buf)


def decode_compressed(data: bytes | memoryview | np.ndarray, format_field: str) -> np.ndarray:
    """HxWx3 bgr8 frame of a jpeg/png CompressedImage payload; format, magic bytes, size and
    pixel count are checked before decoding, and every refusal is an InputError."""
    size = np.frombuffer(data, np.uint8).size
    if size == 0:
        raise InputError("compressed image is empty; the camera sent no data")
    if size > MAX_COMPRESSED_BYTES:
        raise InputError(
            f"compressed image of {size} bytes exceeds {MAX_COMPRESSED_BYTES} bytes; "
            "lower the camera resolution or quality"
        )
    fmt = compressed_format(format_field)
    height, width = compressed_image_size(data, fmt)
    if height > MAX_SIDE or width > MAX_SIDE or height * width > MAX_COMPRESSED_PIXELS:
        raise InputError(
            f"compressed image {height}x{width} exceeds the {MAX_SIDE}-pixel side limit or the "
            f"{MAX_COMPRESSED_PIXELS}-pixel limit; downscale at the camera"
        )
    if height == 0 or width == 0:
        raise InputError(f"compressed image has zero size ({height}x{width}); check the camera")
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if decoded is None or decoded.size == 0:
        raise InputError(
            f"compressed image (format '{format_field}', {size} bytes) could not be decoded; "
            "the data is corrupt or truncated: check the camera driver"
        )
    return decoded
