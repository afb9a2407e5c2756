"""Encodings, step padding, compressed-frame headers and the letterbox geometry shared by every
backend."""

import array

import cv2
import numpy as np
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.image_formats import (
    ENCODINGS,
    MAX_COMPRESSED_BYTES,
    array_from_buffer,
    compressed_format,
    compressed_image_size,
    decode_compressed,
    image_from_buffer,
    to_pipeline,
    to_rgb,
    validate_image,
)
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import FrameMeta

PAD = (123.675, 116.28, 103.53)


def _rgb(h: int = 6, w: int = 8) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("encoding", "convert"),
    [
        ("rgb8", lambda x: x),
        ("bgr8", lambda x: cv2.cvtColor(x, cv2.COLOR_RGB2BGR)),
        ("rgba8", lambda x: cv2.cvtColor(x, cv2.COLOR_RGB2RGBA)),
        ("bgra8", lambda x: cv2.cvtColor(x, cv2.COLOR_RGB2BGRA)),
    ],
)
def test_colour_encodings_round_trip(encoding, convert) -> None:
    rgb = _rgb()
    np.testing.assert_array_equal(to_rgb(convert(rgb), encoding), rgb)


def test_mono8_becomes_grey_rgb() -> None:
    mono = _rgb()[:, :, 0]
    out = to_rgb(mono, "mono8")
    assert out.shape == (6, 8, 3)
    np.testing.assert_array_equal(out[:, :, 1], mono)


def test_yuv422_orders_differ() -> None:
    uyvy = np.full((2, 4, 2), 128, np.uint8)
    uyvy[:, :, 1] = 200  # luma at odd bytes in UYVY
    out = to_rgb(uyvy, "yuv422")
    assert out.shape == (2, 4, 3) and int(out.mean()) > 150
    out_yuyv = to_rgb(uyvy, "yuv422_yuy2")  # same bytes read as YUYV put chroma 200 in luma's place
    assert not np.array_equal(out, out_yuyv)


def test_step_padding_is_honoured() -> None:
    rgb = _rgb(3, 5)
    step = 5 * 3 + 7
    buf = np.zeros((3, step), np.uint8)
    buf[:, : 5 * 3] = rgb.reshape(3, -1)
    view = array_from_buffer(buf.tobytes(), 3, 5, step, "rgb8")
    np.testing.assert_array_equal(view, rgb)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"\0" * 10, 3, 5, 15, "rgb8"), "truncated"),
        ((b"\0" * 100, 3, 5, 10, "rgb8"), "step"),
        ((b"", 0, 5, 15, "rgb8"), "zero size"),
        ((b"\0" * 100, 3, 5, 15, "32SC1"), "unsupported"),
        ((b"", 20000, 5, 15, "rgb8"), "side limit"),
    ],
)
def test_bad_buffers_name_the_problem(args, message) -> None:
    with pytest.raises(InputError, match=message):
        array_from_buffer(*args)


def test_validate_rejects_wrong_dtype_and_shape() -> None:
    with pytest.raises(InputError, match="dtype"):
        validate_image(np.zeros((4, 4, 3), np.float32), "rgb8")
    with pytest.raises(InputError, match="HxWx3"):
        validate_image(np.zeros((4, 4, 4), np.uint8), "bgr8")
    assert set(ENCODINGS) >= {"bgr8", "rgb8", "bgra8", "rgba8", "mono8", "yuv422", "yuv422_yuy2"}


def test_letterbox_places_image_top_left_with_mean_padding() -> None:
    meta = FrameMeta.letterbox(100, 400, 64, 128)
    assert (meta.resized_h, meta.resized_w) == (32, 128)
    tensor = letterbox(np.full((100, 400, 3), 10, np.uint8), "rgb8", meta, PAD)
    assert tensor.shape == (1, 3, 64, 128) and tensor.dtype == np.float32
    assert np.all(tensor[0, :, :32, :] == 10)
    np.testing.assert_allclose(tensor[0, :, 40, 5], PAD, rtol=1e-6)


@pytest.mark.parametrize("encoding", ["bgr8", "rgba8", "bgra8", "mono8"])
@pytest.mark.parametrize("size", [(1080, 1920), (257, 388), (37, 42), (64, 128)])
def test_letterbox_picks_channels_after_resizing_with_the_same_bytes(encoding, size) -> None:
    """Resizing first and picking the RGB channels while writing (no full-size conversion)
    gives exactly the tensor of converting to rgb8 first, at every scale (up, down, none)."""
    channels = {"bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}[encoding]
    image = np.random.default_rng(7).integers(0, 256, (*size, channels), dtype=np.uint8)
    meta = FrameMeta.letterbox(*size, 64, 128)
    expected = letterbox(to_rgb(image, encoding), "rgb8", meta, PAD)
    np.testing.assert_array_equal(letterbox(image, encoding, meta, PAD), expected)
    into = np.full((3, 64, 128), np.nan, np.float32)  # a batch slot: every value is written
    assert letterbox(image, encoding, meta, PAD, out=into).base is into
    np.testing.assert_array_equal(into, expected[0])


def _encoded(ext: str, image: np.ndarray, *params: int) -> bytes:
    ok, data = cv2.imencode(ext, image, list(params))
    assert ok, ext
    return data.tobytes()


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("jpeg", "jpeg"),
        ("JPEG", "jpeg"),
        ("jpg", "jpeg"),
        ("png", "png"),
        ("bgr8; jpeg compressed bgr8", "jpeg"),
        ("rgb8; jpeg compressed bgr8", "jpeg"),
        ("mono8; png compressed mono8", "png"),
    ],
)
def test_compressed_format_names(field: str, name: str) -> None:
    assert compressed_format(field) == name


@pytest.mark.parametrize(
    "field", ["", "bmp", "tiff", "webp", "16UC1; compressedDepth png", "bgr8; bmp compressed bgr8"]
)
def test_other_compressed_formats_are_refused_naming_the_accepted(field: str) -> None:
    with pytest.raises(InputError, match=r"not supported; publish one of \['jpeg', 'png'\]"):
        compressed_format(field)
    with pytest.raises(InputError, match="not supported"):
        decode_compressed(_encoded(".png", _rgb()), field)


@pytest.mark.parametrize(
    ("ext", "fmt", "params", "channels"),
    [
        (".jpg", "jpeg", (), 3),
        (".jpg", "jpeg", (cv2.IMWRITE_JPEG_PROGRESSIVE, 1), 3),  # SOF2, after more segments
        (".jpg", "jpeg", (), 1),
        (".png", "png", (), 3),
        (".png", "png", (), 1),
    ],
)
def test_size_comes_from_the_header_and_matches_the_decode(ext, fmt, params, channels) -> None:
    image = _rgb(37, 53) if channels == 3 else _rgb(37, 53)[:, :, 0]
    data = _encoded(ext, image, *params)
    for payload in (data, array.array("B", data), np.frombuffer(data, np.uint8)):
        assert compressed_image_size(payload, fmt) == (37, 53)
    decoded = decode_compressed(array.array("B", data), f"bgr8; {fmt} compressed bgr8")
    assert decoded.shape == (37, 53, 3) and decoded.dtype == np.uint8
    if ext == ".png" and channels == 3:
        np.testing.assert_array_equal(decoded, image)  # lossless: the pixels themselves


@pytest.mark.parametrize(
    ("ext", "fmt", "actual"),
    [
        (".bmp", "jpeg", "bmp"),
        (".tiff", "png", "tiff"),
        (".webp", "jpeg", "webp"),
        (".png", "jpeg", "png"),
        (".jpg", "png", "jpeg"),
    ],
)
def test_data_that_is_not_the_named_format_is_refused(ext: str, fmt: str, actual: str) -> None:
    data = _encoded(ext, _rgb(16, 16))
    with pytest.raises(InputError, match=rf"says '{fmt}' but the data is {actual}"):
        decode_compressed(data, fmt)


@pytest.mark.parametrize(
    ("ext", "fmt", "keep", "message"),
    [
        (".jpg", "jpeg", 12, "cut short before its frame header"),
        (".png", "png", 20, "cut short before the end of its header"),
        (".jpg", "jpeg", 0.5, "could not be decoded"),  # header intact, scan data cut
        (".png", "png", 0.5, "could not be decoded"),
    ],
)
def test_truncated_data_is_an_input_error(ext: str, fmt: str, keep: float, message: str) -> None:
    data = _encoded(ext, _rgb(64, 64))
    cut = data[: int(len(data) * keep) if keep < 1 else keep]
    with pytest.raises(InputError, match=message):
        decode_compressed(cut, fmt)


def _with_jpeg_size(data: bytes, height: int, width: int) -> bytes:
    sof = data.index(b"\xff\xc0")
    return data[: sof + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[sof + 9 :]


def _with_png_size(data: bytes, height: int, width: int) -> bytes:
    return data[:16] + width.to_bytes(4, "big") + height.to_bytes(4, "big") + data[24:]


@pytest.mark.parametrize(
    ("payload", "fmt", "message"),
    [
        (lambda: _with_png_size(_encoded(".png", _rgb()), 8, 50000), "png", "side limit"),
        (lambda: _with_jpeg_size(_encoded(".jpg", _rgb()), 9000, 9000), "jpeg", "pixel limit"),
        (lambda: _with_png_size(_encoded(".png", _rgb()), 0, 8), "png", "zero size"),
        (lambda: _with_jpeg_size(_encoded(".jpg", _rgb()), 0, 8), "jpeg", "DNL"),
        (lambda: b"", "jpeg", "empty"),
        (lambda: bytes(MAX_COMPRESSED_BYTES + 1), "jpeg", f"exceeds {MAX_COMPRESSED_BYTES} bytes"),
    ],
    ids=["png-side", "jpeg-pixels", "png-zero", "jpeg-dnl", "empty", "bytes"],
)
def test_over_limit_data_is_refused_before_decoding(payload, fmt: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        decode_compressed(payload(), fmt)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xfe\x00\x02" * 5000, "more than 1024 markers"),  # empty comments, no frame
        (b"\xff" * 100_000, "more than 1024 markers"),  # fill bytes only
        (b"\xff\xda\x00\x08" + bytes(64), r"no frame \(SOFn\) header before its scan data"),
        (b"\xff\xe0\x00\x04ab\x00\x10" + bytes(64), "no marker at byte 8"),
        (b"\xff\xfe\x00\x00" + bytes(64), "has length 0"),
    ],
    ids=["comments", "fill", "scan-first", "no-marker", "zero-length"],
)
def test_hostile_jpeg_headers_are_refused_in_bounded_time(body: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        decode_compressed(b"\xff\xd8" + body, "jpeg")


@pytest.mark.parametrize(
    ("encoding", "red_at"),
    [
        ("bayer_rggb8", (0, 0)),
        ("bayer_bggr8", (1, 1)),
        ("bayer_gbrg8", (1, 0)),
        ("bayer_grbg8", (0, 1)),
    ],
)
def test_bayer_patterns_are_named_by_their_first_row(encoding: str, red_at: tuple) -> None:
    """A red scene through each colour filter array: only the red sites see light, and every
    pattern must demosaic to red (a wrong OpenCV code turns it blue or green)."""
    mosaic = np.zeros((8, 8), np.uint8)
    mosaic[red_at[0] :: 2, red_at[1] :: 2] = 200
    image, out = image_from_buffer(mosaic.tobytes(), 8, 8, 8, encoding)
    assert out == "rgb8"
    np.testing.assert_array_equal(image[2:-2, 2:-2], np.broadcast_to([200, 0, 0], (4, 4, 3)))


def test_16_bit_colour_is_converted_once_to_rgb8() -> None:
    bgr16 = np.zeros((2, 3, 3), np.uint16)
    bgr16[..., 0] = 65535  # blue
    bgr16[..., 2] = 257 * 7  # red
    image, encoding = image_from_buffer(bgr16.tobytes(), 2, 3, 18, "bgr16")
    assert encoding == "rgb8"
    np.testing.assert_array_equal(image, np.broadcast_to([7, 0, 255], (2, 3, 3)))
    with pytest.raises(InputError, match="not uint16"):
        to_pipeline(np.zeros((2, 3, 3), np.uint8), "bgr16")


def test_converted_encodings_are_pointed_at_image_from_buffer() -> None:
    """The pipeline takes its own encodings; the others are converted on arrival."""
    for encoding in ("bayer_rggb8", "mono16", "nv12", "8UC3"):
        with pytest.raises(InputError, match="image_from_buffer"):
            validate_image(np.zeros((4, 4, 3), np.uint8), encoding)
    with pytest.raises(InputError, match="depth encoding"):
        validate_image(np.zeros((4, 4, 1), np.uint8), "16UC1")


def test_nv12_planes_are_one_view_of_the_buffer() -> None:
    """No copy for nv12's 1.5 rows per image row, padded or not."""
    buf = np.arange(6 * 10, dtype=np.uint8).tobytes()  # 4x8 image, step 10, 6 plane rows
    view = array_from_buffer(buf, 4, 8, 10, "nv12")
    assert view.shape == (6, 8) and np.shares_memory(view, np.frombuffer(buf, np.uint8))
    np.testing.assert_array_equal(view[5], np.arange(50, 58))
