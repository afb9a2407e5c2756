"""Encodings, step padding and the letterbox geometry shared by every backend."""

import cv2
import numpy as np
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.image_formats import ENCODINGS, array_from_buffer, to_rgb, validate_image
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
        ((b"\0" * 100, 3, 5, 15, "rgb16"), "unsupported"),
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
