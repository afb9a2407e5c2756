"""Our image conversion gives what cv_bridge gives, for every encoding both accept.

cv_bridge does not install from PyPI, so the comparison runs against its tables as recorded from
vision_opencv's sources for humble and for jazzy (Jazzy's cv_bridge is released from rolling;
test/fixtures/cv_bridge/*.json, scripts/cv_bridge_fixture.py): bit depth and channels
(getCvType), the steps ``toCvCopy(msg, "rgb8")`` and ``(msg, "bgr8")`` take (getConversionCode:
the cv::COLOR_* code, then the depth change scaled by the recorded 255/65535), row padding and data
size (matFromImage's checks), endianness (a byte swap only for multi-byte depths). Where
cv_bridge imports, as on a ROS vehicle, the last tests compare against it directly.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from compactinst_ros.errors import InputError
from compactinst_ros.image_formats import (
    CONVERTED,
    CV_TYPE_ALIASES,
    ENCODINGS,
    SEMI_PLANAR,
    to_rgb,
    validate_image,
)
from compactinst_ros.ros.convert import depth_from_msg, image_from_msg, image_msg
from compactinst_ros.structures import RASTER_ENCODINGS

FIXTURES = {
    distro: json.loads(
        (Path(__file__).parents[1] / "fixtures" / "cv_bridge" / f"{distro}.json").read_text()
    )
    for distro in ("humble", "jazzy")
}
FIXTURE = FIXTURES["humble"]
#: encodings cv_bridge converts to rgb8 and our node accepts (every one cv_bridge converts)
BOTH = sorted(set(FIXTURE["to_rgb8"]) & (set(ENCODINGS) | set(CONVERTED)))
PADDINGS = (0, 1, 3, 8)


def bridge_convert(
    data: bytes,
    height: int,
    width: int,
    step: int,
    encoding: str,
    is_bigendian: int,
    target: str = "rgb8",
    distro: str = "humble",
) -> np.ndarray:
    """cv_bridge's toCvCopy(msg, target) as its recorded tables, steps and checks describe it."""
    fixture = FIXTURES[distro]
    cv_type = fixture["cv_types"][encoding]
    channels, byte_depth = cv_type["channels"], cv_type["byte_depth"]
    if step < width * byte_depth * channels or height * step != len(data):
        raise ValueError("Image is wrongly formed")
    dtype = np.dtype(cv_type["dtype"]).newbyteorder(">" if is_bigendian else "<")
    rows = np.frombuffer(data, np.uint8).reshape(height, step)[:, : width * byte_depth * channels]
    mat = np.ascontiguousarray(rows).view(dtype).reshape(height, width, channels)
    mat = mat.astype(mat.dtype.newbyteorder("="))
    mat = mat[:, :, 0] if channels == 1 else mat
    scale = float(Fraction(fixture["scale_16_to_8"].replace(" ", "").replace(".", "")))
    for code in fixture["steps"][target][encoding]:
        if code != "SAME_FORMAT":
            mat = cv2.cvtColor(mat, getattr(cv2, code))
        elif mat.dtype == np.uint16:  # convertTo(CV_8U, 255. / 65535.): round to nearest
            mat = np.round(mat * scale).astype(np.uint8)
    return mat


def message(
    data: bytes, height: int, width: int, step: int, encoding: str, is_bigendian: int = 0
) -> Image:
    msg = Image(height=height, width=width, step=step, encoding=encoding, is_bigendian=is_bigendian)
    msg.data = data
    return msg


def as_rgb(msg: Image) -> np.ndarray:
    """What the pipeline feeds the model for ``msg``: our conversion on arrival, then to_rgb."""
    return to_rgb(*image_from_msg(msg))


def test_fixture_covers_what_both_accept() -> None:
    """Every colour, mono, bayer and YUV name cv_bridge converts, of either distribution, is
    taken by the node: 8-bit ones as they are, the others converted on arrival."""
    for fixture in FIXTURES.values():
        assert set(fixture["to_rgb8"]) == set(BOTH)
        assert set(fixture["steps"]["bgr8"]) == set(BOTH)
    assert len(BOTH) == 20
    for encoding in BOTH:
        cv_type = FIXTURE["cv_types"][encoding]
        if encoding in ENCODINGS:
            assert (cv_type["channels"], cv_type["byte_depth"]) == (ENCODINGS[encoding], 1)
        else:
            dtype, channels, _ = CONVERTED[encoding]
            assert (cv_type["dtype"], cv_type["channels"]) == (np.dtype(dtype).name, channels)


def test_the_two_distributions_convert_alike() -> None:
    """Jazzy's image_encodings calls the YUV names colour and adds uyvy/yuyv; cv_bridge's
    conversion tables and scale are the same on both, so one conversion serves both."""
    humble, jazzy = FIXTURES["humble"], FIXTURES["jazzy"]
    for key in ("cv_types", "families", "to_rgb8", "steps", "scale_16_to_8", "display_guesses"):
        assert humble[key] == jazzy[key], key
    assert set(jazzy["encodings"]) - set(humble["encodings"]) == {"uyvy", "yuyv"}
    assert {"nv21", "nv24"} <= set(humble["encodings"]) and "nv12" not in jazzy["encodings"]


@pytest.mark.parametrize("encoding", BOTH)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("is_bigendian", (0, 1))
def test_image_to_rgb_is_cv_bridges(encoding: str, padding: int, is_bigendian: int) -> None:
    """Same RGB pixels, and the same bgr8 ones channel-swapped, for row-padded frames of either
    byte order (16-bit frames span the full range, so the scaling's rounding is exercised)."""
    height, width = 6, 8
    cv_type = FIXTURE["cv_types"][encoding]
    step = width * cv_type["channels"] * cv_type["byte_depth"] + padding
    data = np.random.default_rng(padding).integers(0, 256, height * step, np.uint8).tobytes()
    ours = as_rgb(message(data, height, width, step, encoding, is_bigendian))
    expected = bridge_convert(data, height, width, step, encoding, is_bigendian)
    assert ours.dtype == expected.dtype == np.uint8
    np.testing.assert_array_equal(ours, expected)
    bgr8 = bridge_convert(data, height, width, step, encoding, is_bigendian, "bgr8", "jazzy")
    np.testing.assert_array_equal(ours[:, :, ::-1], bgr8)


def test_16_bit_scaling_rounds_as_cv_bridge() -> None:
    """255/65535 = 1/257: 128 -> 0, 129 -> 1 (0.502), 65535 -> 255, 32896 -> 128 (127.996)."""
    values = np.array([[0, 128, 129, 385, 32896, 65407, 65535]], np.uint16)
    msg = message(values.tobytes(), 1, values.shape[1], values.nbytes, "mono16")
    image, encoding = image_from_msg(msg)
    assert encoding == "mono8"
    np.testing.assert_array_equal(image, [[0, 0, 1, 1, 128, 255, 255]])


def test_opencv_type_names_read_as_cv_bridge_guesses_them() -> None:
    """8UC1/8UC3/8UC4: cv_bridge hands them back as they are (toCvCopy to a colour encoding
    refuses them: no colour family); its display conversion guesses mono8/bgr8/bgra8 by the
    channel count, and so do we, without a copy."""
    guesses = {
        name.removeprefix("CV_").lower(): enc
        for name, enc in FIXTURE["display_guesses"].items()
        if name.startswith("CV_8U")
    }
    assert guesses == CV_TYPE_ALIASES
    for name, alias in CV_TYPE_ALIASES.items():
        channels = ENCODINGS[alias]
        data = np.random.default_rng(1).integers(0, 256, 4 * 5 * channels, np.uint8).tobytes()
        image, encoding = image_from_msg(message(data, 4, 5, 5 * channels, name.upper()))
        assert encoding == alias
        np.testing.assert_array_equal(image.reshape(-1), np.frombuffer(data, np.uint8))


@pytest.mark.parametrize("encoding", sorted(SEMI_PLANAR))
@pytest.mark.parametrize("padding", (0, 6))
def test_semi_planar_yuv_matches_opencv(encoding: str, padding: int) -> None:
    """nv12/nv21 (4:2:0) and nv24 (4:4:4) in their V4L2 layouts (Y plane, then the interleaved
    chroma plane, each row ``step`` bytes, nv24's chroma rows 2 x step) with row padding, against
    OpenCV's own conversion of the unpadded planes (cv_bridge has none: nv24 is checked against
    nv12 with each chroma sample repeated over its 2x2 block)."""
    height, width = 6, 8
    rng = np.random.default_rng(3)
    luma = rng.integers(0, 256, (height, width), np.uint8)
    chroma = rng.integers(0, 256, (height // 2, width // 2, 2), np.uint8)
    step = width + padding
    if encoding == "nv24":
        full = chroma.repeat(2, 0).repeat(2, 1).reshape(height, 2 * width)
        planes = [(luma, step), (full, 2 * step)]
        expected = cv2.cvtColor(
            np.concatenate([luma, chroma.reshape(height // 2, width)]), cv2.COLOR_YUV2RGB_NV12
        )
    else:
        flat = chroma.reshape(height // 2, width)
        planes = [(luma, step), (flat, step)]
        expected = cv2.cvtColor(np.concatenate([luma, flat]), SEMI_PLANAR[encoding])
    data = b"".join(
        np.pad(plane, ((0, 0), (0, stride - plane.shape[1]))).tobytes() for plane, stride in planes
    )
    np.testing.assert_array_equal(as_rgb(message(data, height, width, step, encoding)), expected)


@pytest.mark.parametrize(
    ("encoding", "height", "width", "size", "message_part"),
    [
        ("nv12", 5, 8, 60, "even width and height"),
        ("nv12", 4, 8, 40, "fewer than 3/2 x height x step"),
        ("nv24", 4, 8, 100, "more than 3 x height x step"),
        ("32SC1", 4, 8, 128, "publish one of"),
    ],
)
def test_unusable_frames_name_the_problem(
    encoding: str, height: int, width: int, size: int, message_part: str
) -> None:
    step = width * 4 if encoding == "32SC1" else width
    with pytest.raises(InputError, match=message_part):
        image_from_msg(message(bytes(size), height, width, step, encoding))


@pytest.mark.parametrize("extra", (-1, 1))
def test_wrong_data_size_is_refused_as_by_cv_bridge(extra: int) -> None:
    """cv_bridge's matFromImage refuses height x step != data size; so do we, naming it."""
    height, width, step = 4, 4, 12
    data = bytes(height * step + extra)
    with pytest.raises(ValueError):
        bridge_convert(data, height, width, step, "rgb8", 0)
    with pytest.raises(InputError, match="height x step"):
        image_from_msg(message(data, height, width, step, "rgb8"))


def test_short_step_is_refused_as_by_cv_bridge() -> None:
    height, width, step = 4, 4, 11
    data = bytes(height * step)
    with pytest.raises(ValueError):
        bridge_convert(data, height, width, step, "rgb8", 0)
    with pytest.raises(InputError, match="smaller than width x channels"):
        image_from_msg(message(data, height, width, step, "rgb8"))


def test_depth_on_the_colour_input_is_refused_naming_the_fix() -> None:
    """A depth topic remapped onto the colour input reads as its samples (the 3-D lifting reads
    them so), and the pipeline refuses them, saying where depth belongs."""
    depth = np.arange(32, dtype=np.uint16).reshape(4, 8)
    image, encoding = image_from_msg(message(depth.tobytes(), 4, 8, 16, "16UC1"))
    assert encoding == "16UC1"
    np.testing.assert_array_equal(image[:, :, 0], depth)
    with pytest.raises(InputError, match="depth encoding; the node segments colour images"):
        validate_image(image, encoding)


def test_depth_messages_read_as_metres() -> None:
    """depth_from_msg: a padded big-endian 16UC1 Image and a compressedDepth png
    CompressedImage of the same millimetres give the same metres, NaN where 0."""
    mm = np.array([[0, 1500, 65535], [250, 0, 4000]], np.uint16)
    rows = np.zeros((2, 8), np.uint8)
    rows[:, :6] = mm.astype(">u2").view(np.uint8).reshape(2, 6)
    image = message(rows.tobytes(), 2, 3, 8, "16UC1", is_bigendian=1)
    _, png = cv2.imencode(".png", mm)
    compressed = CompressedImage(format="16UC1; compressedDepth png")
    compressed.data = bytes(12) + png.tobytes()  # ConfigHeader, unused for 16UC1
    expected = np.where(mm > 0, mm / np.float32(1000), np.nan).astype(np.float32)
    for msg in (image, compressed):
        np.testing.assert_array_equal(depth_from_msg(msg), expected)
    with pytest.raises(InputError, match="not a depth encoding"):
        depth_from_msg(message(bytes(6), 2, 3, 3, "mono8"))


RASTERS = {
    "bgr8": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
    **{enc: np.arange(6, dtype=dtype).reshape(2, 3) * 7 for dtype, enc in RASTER_ENCODINGS.items()},
}


@pytest.mark.parametrize("encoding", sorted(RASTERS))
def test_published_images_are_cv_bridges(encoding: str) -> None:
    """Our outgoing Image fields are what cv2_to_imgmsg(raster, encoding) writes: a matching
    OpenCV type, step = row bytes without padding, little-endian flag from the data."""
    raster = RASTERS[encoding]
    msg = image_msg(raster, Header(), encoding if raster.ndim == 2 else None)
    channels = raster.shape[2] if raster.ndim == 3 else 1
    cv_type = FIXTURE["cv_types"].get(encoding)
    if cv_type is None:  # 32SC1: cv_bridge's generic "(8U|...|64F)C<n>" names
        depth, _, count = encoding.partition("C")
        cv_type = {"depth": depth, "channels": int(count)}
    assert (
        np.dtype(raster.dtype).name
        == {"8U": "uint8", "16U": "uint16", "32S": "int32"}[cv_type["depth"]]
    )
    assert cv_type["channels"] == channels
    assert msg.encoding == encoding
    assert msg.step == len(msg.data) // msg.height == raster.nbytes // raster.shape[0]
    assert bool(msg.is_bigendian) == (raster.dtype.itemsize > 1 and sys.byteorder == "big")
    assert bytes(msg.data) == raster.tobytes()


def test_against_cv_bridge_itself() -> None:
    """On a ROS install: cv_bridge's own imgmsg_to_cv2 and cv2_to_imgmsg against ours."""
    cv_bridge = pytest.importorskip(
        "cv_bridge",
        reason="cv_bridge does not import here (it has no PyPI wheel); the "
        "fixture tests above stand in for it, and a ROS install runs this one",
    )
    bridge = cv_bridge.CvBridge()
    for encoding in BOTH:
        height, width = 6, 8
        cv_type = FIXTURE["cv_types"][encoding]
        # a padding cv_bridge's Python reshape can read: a whole number of pixels
        step = width * cv_type["channels"] * cv_type["byte_depth"] * 2
        data = np.random.default_rng(1).integers(0, 256, height * step, np.uint8).tobytes()
        msg = message(data, height, width, step, encoding)
        ours = as_rgb(msg)
        np.testing.assert_array_equal(ours, bridge.imgmsg_to_cv2(msg, "rgb8"))
        np.testing.assert_array_equal(ours[:, :, ::-1], bridge.imgmsg_to_cv2(msg, "bgr8"))
    for encoding, raster in RASTERS.items():
        ours = image_msg(raster, Header(), encoding if raster.ndim == 2 else None)
        theirs = bridge.cv2_to_imgmsg(raster, encoding)
        assert (ours.encoding, ours.step, bool(ours.is_bigendian), bytes(ours.data)) == (
            theirs.encoding,
            theirs.step,
            bool(theirs.is_bigendian),
            bytes(theirs.data),
        )
