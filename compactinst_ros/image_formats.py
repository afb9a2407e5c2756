"""Camera image encodings: validation and conversion to RGB, shared by the node and the CLI.

Arrays are HxWxC uint8 in the encoding's own channel layout; yuv422 (UYVY) and yuv422_yuy2
(YUYV) are HxWx2. The ROS node builds these arrays from message bytes with
``array_from_buffer`` (a zero-copy view that honours ``step`` padding).

Every other encoding cv_bridge converts to colour (bayer 8/16 in the four patterns, 16-bit
colour and mono, the ``8UC1``/``8UC3``/``8UC4`` names) and the semi-planar YUV 4:2:0 / 4:4:4
layouts (nv12, nv21, nv24) are converted on arrival by ``image_from_buffer``: once, to rgb8 (mono8
for mono16), with cv_bridge's OpenCV codes and its 16-to-8-bit scaling, so the pipeline and the
device path see only the encodings above.

Depth images (``16UC1`` millimetres, ``32FC1`` metres, image_transport's ``compressedDepth``
PNG or RVL payloads) are read by ``depth_to_metres`` and ``decode_compressed_depth`` as float32
metres with NaN where the sensor has no return.

Compressed frames (sensor_msgs/CompressedImage) are decoded only in the format their ``format``
field names, and only jpeg or png: ``decode_compressed`` reads the frame size from the PNG IHDR or
JPEG SOFn header and refuses data whose magic bytes do not match, or that would decode to more than
the limits below, before OpenCV allocates anything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

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

#: Encodings converted on arrival as cv_bridge's ``toCvCopy(msg, "rgb8")`` converts them:
#: encoding -> (sample type, channels, OpenCV code to RGB or None). cv_bridge names the bayer
#: patterns by the first row and OpenCV by the second (bayer_rggb8 -> COLOR_BayerBG2RGB).
#: 16-bit samples are converted at 16 bits, then scaled by 255/65535 (cv_bridge's convertTo).
CONVERTED: dict[str, tuple[type, int, int | None]] = {
    **{
        f"bayer_{pattern}{bits}": (dtype, 1, code)
        for bits, dtype in ((8, np.uint8), (16, np.uint16))
        for pattern, code in (
            ("rggb", cv2.COLOR_BayerBG2RGB),
            ("bggr", cv2.COLOR_BayerRG2RGB),
            ("gbrg", cv2.COLOR_BayerGR2RGB),
            ("grbg", cv2.COLOR_BayerGB2RGB),
        )
    },
    "rgb16": (np.uint16, 3, None),
    "bgr16": (np.uint16, 3, cv2.COLOR_BGR2RGB),
    "rgba16": (np.uint16, 4, cv2.COLOR_RGBA2RGB),
    "bgra16": (np.uint16, 4, cv2.COLOR_BGRA2RGB),
    "mono16": (np.uint16, 1, None),  # to mono8: the pipeline makes it grey RGB
}

#: OpenCV element names cv_bridge hands back unconverted (``passthrough``) and display tools read
#: as the colour layout with that many channels; relabelled without a copy.
CV_TYPE_ALIASES = {"8uc1": "mono8", "8uc3": "bgr8", "8uc4": "bgra8"}

#: Semi-planar YUV (V4L2 layouts): a Y plane of ``height`` rows of ``step`` bytes, then one
#: interleaved chroma plane: nv12 (CbCr) and nv21 (CrCb) at half height with ``step`` bytes a row
#: (4:2:0), nv24 (CbCr) at full height with ``2 * step`` bytes a row (4:4:4). cv_bridge has no
#: conversion for them; OpenCV's BT.601 limited-range one is used, as for yuv422.
SEMI_PLANAR: dict[str, int | None] = {
    "nv12": cv2.COLOR_YUV2RGB_NV12,
    "nv21": cv2.COLOR_YUV2RGB_NV21,
    "nv24": None,  # 4:4:4: no OpenCV code; ``_nv24_to_rgb`` uses OpenCV's YUYV one
}

#: Depth encodings: encoding -> sample type (16UC1 in millimetres, 32FC1 in metres, REP 118).
DEPTH_ENCODINGS: dict[str, type] = {"16UC1": np.uint16, "32FC1": np.float32}


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


def _accepted() -> list[str]:
    """Every encoding the node takes from a camera topic, for error messages."""
    names = [*ENCODINGS, *CONVERTED, *SEMI_PLANAR, *(a.upper() for a in CV_TYPE_ALIASES)]
    return sorted(names)


def _refusal(encoding: str) -> InputError:
    """The InputError for an encoding the colour path does not take, saying what to do."""
    if encoding.upper() in DEPTH_ENCODINGS:
        return InputError(
            f"'{encoding}' is a depth encoding; the node segments colour images: remap its input "
            "to the camera's colour topic (depth is read for the 3-D outputs)"
        )
    return InputError(f"unsupported image encoding '{encoding}'; publish one of {_accepted()}")


def check_encoding(encoding: str) -> int:
    """Channels for ``encoding`` as the pipeline takes it (``ENCODINGS``); InputError otherwise,
    pointing a converted encoding at ``image_from_buffer``."""
    key = encoding.lower()
    if key in ENCODINGS:
        return ENCODINGS[key]
    if key in CONVERTED or key in SEMI_PLANAR or key in CV_TYPE_ALIASES:
        raise InputError(
            f"'{encoding}' is converted on arrival, not by the pipeline: read the frame with "
            "image_formats.image_from_buffer (as the node and replay do) and pass what it returns"
        )
    raise _refusal(encoding)


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


def mono_note(encoding: str) -> str | None:
    """The warning for a single-channel camera (mono8, mono16, 8UC1: a message's encoding or
    the pipeline's after conversion), None for colour. The models are trained on colour
    images; grey RGB costs them most of their accuracy, so the node and replay say so once."""
    if encoding.lower() not in ("mono8", "mono16", "8uc1"):
        return None
    return (
        "the input is single-channel (mono): the model was trained on colour images and its "
        "accuracy will be low (demo bag: mask AP 0.7 in mono8 against 67.0 in bgr8); subscribe "
        "to the camera's colour image (its debayered image_color) if it has one"
    )


def _sample_layout(encoding: str) -> tuple[np.dtype, int]:
    """(sample type, channels) of a packed encoding; InputError naming the accepted ones."""
    key = encoding.lower()
    if key in ENCODINGS:
        return np.dtype(np.uint8), ENCODINGS[key]
    if key in CV_TYPE_ALIASES:
        return np.dtype(np.uint8), ENCODINGS[CV_TYPE_ALIASES[key]]
    if key in CONVERTED:
        dtype, channels, _ = CONVERTED[key]
        return np.dtype(dtype), channels
    if encoding.upper() in DEPTH_ENCODINGS:
        return np.dtype(DEPTH_ENCODINGS[encoding.upper()]), 1
    raise _refusal(encoding)


def _check_size(height: int, width: int) -> None:
    if height <= 0 or width <= 0:
        raise InputError(f"image has zero size ({height}x{width}); the camera sent an empty frame")
    if height > MAX_SIDE or width > MAX_SIDE:
        raise InputError(
            f"image {height}x{width} exceeds the {MAX_SIDE}-pixel side limit; "
            "downscale at the camera"
        )


def _rows(flat: np.ndarray, rows: int, step: int, what: str) -> np.ndarray:
    """``flat`` as ``rows`` x ``step`` bytes; InputError unless it holds exactly that many."""
    if flat.size < rows * step:
        raise InputError(
            f"image data has {flat.size} bytes, fewer than {what} = {rows * step}; "
            "the message is truncated"
        )
    if flat.size > rows * step:  # cv_bridge refuses it too: the driver's size fields are off
        raise InputError(
            f"image data has {flat.size} bytes, more than {what} = {rows * step}; "
            "fix the driver's height or step"
        )
    return flat.reshape(rows, step)


def _semi_planar(flat: np.ndarray, height: int, width: int, step: int, encoding: str) -> np.ndarray:
    """nv12/nv21: the (height * 3 / 2) x width planes as one view (OpenCV's layout); nv24: an
    HxWx3 Y, Cb, Cr array (one copy; its chroma rows are 2 x step bytes)."""
    if step < width:
        raise InputError(f"step {step} is smaller than the width {width}; fix the driver")
    if encoding == "nv24":
        planes = _rows(flat, 3 * height, step, "3 x height x step (Y and CbCr planes)")
        chroma = planes[height:].reshape(height, 2 * step)[:, : 2 * width]
        return np.dstack((planes[:height, :width], chroma.reshape(height, width, 2)))
    if height % 2 or width % 2:
        raise InputError(f"{encoding} needs an even width and height, got {width}x{height}")
    planes = _rows(flat, height * 3 // 2, step, "3/2 x height x step (Y and CbCr planes)")
    return planes[:, :width]


def array_from_buffer(
    data: bytes | memoryview | np.ndarray,
    height: int,
    width: int,
    step: int,
    encoding: str,
    is_bigendian: bool = False,
) -> np.ndarray:
    """Zero-copy HxWxC view of a row-padded image buffer (ROS sensor_msgs/Image layout) in the
    encoding's sample type and byte order (uint16 for 16-bit encodings, float32 for 32FC1);
    nv12/nv21 give their planes as one (height * 3 / 2) x width view, nv24 an HxWx3 YCbCr copy."""
    _check_size(height, width)
    flat = np.frombuffer(data, dtype=np.uint8)
    if encoding.lower() in SEMI_PLANAR:
        return _semi_planar(flat, height, width, step, encoding.lower())
    dtype, channels = _sample_layout(encoding)
    row = width * channels * dtype.itemsize
    if step < row:
        sample = f" ({dtype.itemsize}-byte samples)" if dtype.itemsize > 1 else ""
        raise InputError(
            f"step {step} is smaller than width x channels = {row}{sample}; fix the driver"
        )
    rows = _rows(flat, height, step, "height x step")[:, :row]
    if dtype.itemsize > 1:
        rows = rows.view(dtype.newbyteorder(">" if is_bigendian else "<"))
    return rows.reshape(height, width, channels)


def to_pipeline(image: np.ndarray, encoding: str) -> tuple[np.ndarray, str]:
    """An ``array_from_buffer`` array as the pipeline takes it, and its encoding: the array
    itself for ``ENCODINGS`` and the 8UCn names, else one conversion to rgb8 (mono8 for mono16)
    with cv_bridge's OpenCV code and 16-to-8-bit scaling. Depth (16UC1, 32FC1) stays as it is,
    for ``depth_to_metres``: the pipeline refuses it, naming the fix. InputError for other
    encodings."""
    key = encoding.lower()
    if key in ENCODINGS:
        return image, key
    if encoding.upper() in DEPTH_ENCODINGS:
        return image, encoding.upper()
    if key in CV_TYPE_ALIASES:
        return image, CV_TYPE_ALIASES[key]
    if key in SEMI_PLANAR:
        code = SEMI_PLANAR[key]
        if code is None:
            return _nv24_to_rgb(image), "rgb8"
        return cv2.cvtColor(image, code), "rgb8"
    if key not in CONVERTED:
        raise _refusal(encoding)
    dtype, channels, code = CONVERTED[key]
    if image.dtype.kind != "u" or image.itemsize != np.dtype(dtype).itemsize:
        raise InputError(
            f"'{encoding}' array has dtype {image.dtype}, not {np.dtype(dtype)}; read it with "
            "array_from_buffer"
        )
    samples = image
    if not (samples.dtype.isnative and samples.flags.aligned):
        # OpenCV reads multi-byte samples in native order from aligned memory only; an odd
        # ``step`` leaves the rows of a buffer view unaligned
        samples = samples.astype(np.dtype(dtype))
    if channels == 1 and samples.ndim == 3:
        samples = samples[:, :, 0]
    out = samples if code is None else cv2.cvtColor(samples, code)
    if out.dtype == np.uint16:  # cv_bridge: convertTo(CV_8U, 255/65535) after the colour code
        out = cv2.convertScaleAbs(out, alpha=255.0 / 65535.0)
    return out, ("mono8" if channels == 1 and code is None else "rgb8")


def image_from_buffer(
    data: bytes | memoryview | np.ndarray,
    height: int,
    width: int,
    step: int,
    encoding: str,
    is_bigendian: bool = False,
) -> tuple[np.ndarray, str]:
    """A camera frame's buffer as the pipeline takes it: ``array_from_buffer`` then
    ``to_pipeline`` (zero-copy for the pipeline's own encodings, one conversion otherwise)."""
    raw = array_from_buffer(data, height, width, step, encoding, is_bigendian)
    return to_pipeline(raw, encoding)


#: colour filter letter -> bgr8 channel, for ``encode_bgr8``'s mosaics
_BGR_INDEX = {"b": 0, "g": 1, "r": 2}


def encode_bgr8(bgr: np.ndarray, encoding: str) -> tuple[bytes, int]:
    """(data, step) a camera publishing ``encoding`` sends for the HxWx3 bgr8 scene ``bgr``:
    no row padding, little-endian. Bayer is the scene sampled through the filter pattern, 16-bit
    encodings hold 257 x the 8-bit values (so cv_bridge's scaling gives them back), mono is
    OpenCV's grey, YUV is OpenCV's BT.601 limited range (nv24 keeps every pixel's chroma).
    The inverse of ``image_from_buffer`` up to what the encoding drops, for synthetic input."""
    key = encoding.lower()
    h, w = bgr.shape[:2]
    if key.startswith("bayer_"):
        pattern = key[len("bayer_") : len("bayer_") + 4]
        mosaic = np.empty((h, w), bgr.dtype)
        for site, letter in enumerate(pattern):
            dy, dx = divmod(site, 2)
            mosaic[dy::2, dx::2] = bgr[dy::2, dx::2, _BGR_INDEX[letter]]
        samples = mosaic
    elif key in ("mono8", "mono16", "8uc1"):
        samples = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    elif key in ("nv12", "nv21"):
        i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)
        luma, quarter = i420[: h * w], (h // 2) * (w // 2)
        chroma = np.stack((i420[h * w : h * w + quarter], i420[h * w + quarter :]), axis=1)
        return luma.tobytes() + (chroma if key == "nv12" else chroma[:, ::-1]).tobytes(), w
    elif key == "nv24":  # I420 of the scene at twice the size: each pixel's own chroma
        big = cv2.resize(bgr, (2 * w, 2 * h), interpolation=cv2.INTER_NEAREST)
        i420 = cv2.cvtColor(big, cv2.COLOR_BGR2YUV_I420).reshape(-1)
        luma = i420[: 4 * h * w].reshape(2 * h, 2 * w)[::2, ::2]
        chroma = np.stack((i420[4 * h * w : 5 * h * w], i420[5 * h * w :]), axis=1)
        return luma.tobytes() + chroma.tobytes(), w
    else:
        channel_order = key.removesuffix("8").removesuffix("16")
        codes = {"rgb": cv2.COLOR_BGR2RGB, "rgba": cv2.COLOR_BGR2RGBA, "bgra": cv2.COLOR_BGR2BGRA}
        if key in CV_TYPE_ALIASES:
            channel_order = CV_TYPE_ALIASES[key].removesuffix("8")
        if channel_order not in ("bgr", *codes):
            raise InputError(f"encode_bgr8 does not write '{encoding}'")
        samples = bgr if channel_order == "bgr" else cv2.cvtColor(bgr, codes[channel_order])
    if key.endswith("16"):
        samples = samples.astype("<u2") * np.uint16(257)
    samples = np.ascontiguousarray(samples)
    return samples.tobytes(), samples.nbytes // h


def _nv24_to_rgb(ycbcr: np.ndarray) -> np.ndarray:
    """HxWx3 rgb8 of an HxWx3 Y, Cb, Cr array with OpenCV's BT.601 arithmetic: laid out as YUYV
    of twice the width, each luma sample twice, so that every pixel keeps its own chroma, and
    converted by OpenCV: exactly what nv12 gives for the same samples, at OpenCV's speed."""
    h, w = ycbcr.shape[:2]
    pairs = np.empty((h, w, 4), np.uint8)
    pairs[:, :, 0] = pairs[:, :, 2] = ycbcr[:, :, 0]
    pairs[:, :, 1], pairs[:, :, 3] = ycbcr[:, :, 1], ycbcr[:, :, 2]
    doubled = cv2.cvtColor(pairs.reshape(h, 2 * w, 2), cv2.COLOR_YUV2RGB_YUYV)
    return np.ascontiguousarray(doubled[:, ::2])


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


#: compressedDepth's ConfigHeader: int32 format (0 = INV_DEPTH), float32 depthParam[2]; native
#: (little-endian) byte order, as compressed_depth_image_transport memcpy's the struct.
_DEPTH_HEADER = np.dtype([("format", "<i4"), ("quant_a", "<f4"), ("quant_b", "<f4")])
#: RVL's best ratio is 4:1 on 16-bit samples; a header claiming more pixels than 5 per payload
#: byte is corrupt (the bound compressed_depth_image_transport's decoder applies).
_RVL_MAX_PIXELS_PER_BYTE = 5


def depth_to_metres(encoding: str, array: np.ndarray) -> np.ndarray:
    """HxW float32 metres of a depth image, NaN where the sensor has no return.

    ``16UC1`` is millimetres with 0 for no return; ``32FC1`` is metres with NaN, +-Inf or 0 for
    no return (REP 118 and common drivers). ``array`` is HxW or HxWx1 in either byte order (an
    ``array_from_buffer`` view); every valid sample keeps its value (mm / 1000 rounded once).
    InputError for another encoding or an array that does not fit it."""
    key = encoding.upper()
    if key not in DEPTH_ENCODINGS:
        raise InputError(
            f"'{encoding}' is not a depth encoding; publish depth as one of "
            f"{sorted(DEPTH_ENCODINGS)} (or image_transport's compressedDepth)"
        )
    if not isinstance(array, np.ndarray):
        raise InputError(f"depth must be a numpy array, got {type(array).__name__}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    expected = np.dtype(DEPTH_ENCODINGS[key])
    if array.ndim != 2 or array.dtype.kind != expected.kind or array.itemsize != expected.itemsize:
        raise InputError(
            f"depth array {array.shape} {array.dtype} does not fit '{key}' (expected HxW "
            f"{expected}); read it with array_from_buffer"
        )
    if key == "16UC1":
        millimetres = array.astype(np.uint16, copy=False)
        metres = millimetres.astype(np.float32) / np.float32(1000.0)
        metres[millimetres == 0] = np.nan
        return metres
    metres = array.astype(np.float32)  # a copy in native order: the caller's view stays as sent
    metres[~(np.isfinite(metres) & (metres > 0))] = np.nan
    return metres


def compressed_depth_format(format_field: str) -> tuple[str, str]:
    """(raw encoding, "png" or "rvl") of a compressedDepth ``format`` field
    ("16UC1; compressedDepth png", "32FC1; compressedDepth rvl", or the older
    "16UC1; compressedDepth", which is png); InputError naming the accepted forms otherwise."""
    raw, _, rest = format_field.partition(";")
    words = rest.split()
    codec = "png" if words == ["compressedDepth"] else (words[1] if len(words) == 2 else "")
    if (
        raw.strip().upper() not in DEPTH_ENCODINGS
        or words[:1] != ["compressedDepth"]
        or (codec not in ("png", "rvl"))
    ):
        raise InputError(
            f"compressedDepth format '{format_field}' is not supported; publish depth through "
            "image_transport's compressedDepth transport ('16UC1; compressedDepth png|rvl' or "
            "'32FC1; compressedDepth png|rvl')"
        )
    return raw.strip().upper(), codec


def _rvl_values(payload: np.ndarray) -> np.ndarray:
    """The variable-length integers of an RVL stream, in order (vectorised).

    The stream is 32-bit little-endian words of eight nibbles each, most significant first; a
    value is 3 bits a nibble, least significant first, and a nibble with bit 3 clear ends it."""
    octets = payload[: payload.size - payload.size % 4].reshape(-1, 4)[:, ::-1]
    nibbles = np.empty((octets.shape[0], 8), np.uint8)
    nibbles[:, 0::2] = octets >> 4
    nibbles[:, 1::2] = octets & 0xF
    nibbles = nibbles.ravel()
    ends = np.flatnonzero(nibbles < 8)
    if ends.size == 0:
        return np.zeros(0, np.int64)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > 11:  # 11 nibbles hold 33 bits: more is corrupt data
        raise InputError("RVL depth data has a value over 32 bits; the data is corrupt")
    values = (nibbles[starts] & 7).astype(np.int64)
    for k in range(1, longest):  # most values take one or two nibbles: few, shrinking passes
        longer = np.flatnonzero(lengths > k)
        values[longer] |= (nibbles[starts[longer] + k] & 7).astype(np.int64) << (3 * k)
    return values


def _rvl_run_heads(values: np.ndarray, count: int, pixels: int) -> tuple[np.ndarray, int, int]:
    """(index in ``values`` of each run's zero count, pixels the runs cover, index after the
    last run): the one sequential step of RVL, one iteration per run, not per pixel."""
    heads = np.empty(count // 2 + 1, np.int64)
    runs, covered, at = 0, 0, 0
    while covered < pixels and at + 1 < count:
        heads[runs] = at
        runs += 1
        covered += values[at] + values[at + 1]
        at += 2 + values[at + 1]
    return heads[:runs], covered, at


@functools.cache
def _compiled_rvl_run_heads() -> Callable | None:
    """``_rvl_run_heads`` compiled by numba (the optional ``fast`` extra; imported on the first
    RVL frame, not with this module), or None without numba: the walk then runs in Python."""
    from .jit import njit_cached

    return njit_cached(_rvl_run_heads)


def decode_rvl(payload: np.ndarray, pixels: int) -> np.ndarray:
    """``pixels`` uint16 samples of an RVL stream (A. D. Wilson's "Fast Lossless Depth Image
    Compression", as compressed_depth_image_transport writes it): runs of (zeros, nonzeros,
    zig-zag deltas of each nonzero from the previous one). The integers are decoded vectorised;
    only the run headers are walked one by one (compiled where numba is installed); InputError
    for a stream that does not describe exactly ``pixels`` samples."""
    values = _rvl_values(payload)
    count = values.size
    compiled = _compiled_rvl_run_heads()
    if compiled is None:  # Python indexes a list 3x faster than an array
        heads, covered, at = _rvl_run_heads(values.tolist(), count, pixels)
    else:
        heads, covered, at = compiled(values, count, pixels)
    if covered < pixels:
        raise InputError(
            f"RVL depth data ends after {covered} of {pixels} pixels; the data is truncated"
        )
    if covered != pixels or at > count:
        raise InputError(
            f"RVL depth data describes {covered} pixels, not {pixels}; the data is corrupt"
        )
    zeros, nonzeros = values[heads], values[heads + 1]
    # the deltas are every value after a run's two counts: zig-zag decoded, summed modulo 2**16
    is_delta = np.ones(at, bool)
    is_delta[heads] = False
    is_delta[heads + 1] = False
    zigzag = values[:at][is_delta]
    samples = np.cumsum((zigzag >> 1) ^ -(zigzag & 1)).astype(np.uint16)  # wraps as uint16 does
    # pixels alternate zero runs and nonzero runs: the samples fill the nonzero ones in order
    lengths = np.empty(2 * heads.size, np.int64)
    lengths[0::2], lengths[1::2] = zeros, nonzeros
    filled = np.repeat(np.tile(np.array([False, True]), heads.size), lengths)
    out = np.zeros(pixels, np.uint16)
    out[filled] = samples
    return out


def decode_compressed_depth(format_field: str, data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """HxW float32 metres, NaN where there is no return, of an image_transport compressedDepth
    payload: a 12-byte ConfigHeader, then a 16-bit PNG or ``cols, rows`` (uint32) and an RVL
    stream. 16UC1 payloads hold millimetres; 32FC1 ones hold quantised inverse depth ``q``,
    decoded as upstream does: ``depthParam[0] / (q - depthParam[1])`` in float32, 0 = no return.
    InputError for a wrong format, a size over the limits, or corrupt data."""
    encoding, codec = compressed_depth_format(format_field)
    buf = np.frombuffer(data, np.uint8)
    if buf.size > MAX_COMPRESSED_BYTES:
        raise InputError(
            f"compressedDepth payload of {buf.size} bytes exceeds {MAX_COMPRESSED_BYTES} bytes; "
            "lower the depth resolution"
        )
    header_size = _DEPTH_HEADER.itemsize
    if buf.size <= header_size:
        raise InputError(
            f"compressedDepth payload of {buf.size} bytes has no image after its "
            f"{header_size}-byte header; the camera sent no data"
        )
    header = buf[:header_size].view(_DEPTH_HEADER)[0]
    body = buf[header_size:]
    if codec == "png":
        height, width = compressed_image_size(body, "png")
    else:
        if body.size < 8:
            raise InputError("RVL depth data is cut short before its size fields")
        width, height = (int(v) for v in body[:8].view("<u4"))
    if height == 0 or width == 0 or height > MAX_SIDE or width > MAX_SIDE:
        raise InputError(
            f"compressedDepth image {height}x{width} is empty or exceeds the {MAX_SIDE}-pixel "
            "side limit; the data is corrupt or the camera must downscale"
        )
    if codec == "png":
        samples = cv2.imdecode(body, cv2.IMREAD_UNCHANGED)
        if samples is None or samples.dtype != np.uint16 or samples.ndim != 2:
            raise InputError(
                f"compressedDepth png (format '{format_field}') is not a 16-bit grey PNG or is "
                "corrupt; publish depth through image_transport's compressedDepth transport"
            )
    else:
        if height * width > (body.size - 8) * _RVL_MAX_PIXELS_PER_BYTE:
            raise InputError(
                f"RVL depth data of {body.size - 8} bytes cannot hold {height}x{width} pixels; "
                "the data is corrupt"
            )
        samples = decode_rvl(body[8:], height * width).reshape(height, width)
    if encoding == "16UC1":
        return depth_to_metres("16UC1", samples)
    if int(header["format"]) != 0:
        raise InputError(
            f"compressedDepth header names format {int(header['format'])}, not inverse depth (0); "
            "the data is corrupt"
        )
    quant_a, quant_b = np.float32(header["quant_a"]), np.float32(header["quant_b"])
    with np.errstate(divide="ignore", invalid="ignore"):
        metres = quant_a / (samples.astype(np.float32) - quant_b)
    metres[samples == 0] = np.nan
    return metres


def read_image(path: str | Path) -> np.ndarray:
    """HxWx3 uint8 BGR image from a file; InputError when it cannot be read or decoded.

    The bytes are read here and decoded with ``cv2.imdecode``, so a missing file is our error,
    not OpenCV's ``[ WARN ]`` log line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"cannot read image {path}: no such file")
    data = path.read_bytes()
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise InputError(f"cannot read image {path}: empty, truncated or not an image format")
    return image
