"""Our image conversion gives what cv_bridge gives, for every encoding both accept.

cv_bridge does not install from PyPI, so the comparison runs against its tables as recorded from
vision_opencv's humble sources (test/fixtures/cv_bridge/humble.json, scripts/cv_bridge_fixture.py):
channel order (the cv::COLOR_* code to rgb8), bit depth and channels (getCvType), row padding and
data size (matFromImage's checks), endianness (a byte swap only for multi-byte depths). Where
cv_bridge imports, as on a ROS vehicle, the last tests compare against it directly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from compactinst_ros.errors import InputError
from compactinst_ros.image_formats import ENCODINGS, to_rgb
from compactinst_ros.ros.convert import image_from_msg, image_msg
from compactinst_ros.structures import RASTER_ENCODINGS

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "cv_bridge" / "humble.json").read_text()
)
#: encodings cv_bridge converts to rgb8 and our node accepts
BOTH = sorted(set(FIXTURE["to_rgb8"]) & set(ENCODINGS))
PADDINGS = (0, 1, 3, 8)


def bridge_to_rgb8(data: bytes, height: int, width: int, step: int, encoding: str,
                   is_bigendian: int) -> np.ndarray:
    """cv_bridge's toCvCopy(msg, "rgb8") as its recorded tables and checks describe it."""
    cv_type = FIXTURE["cv_types"][encoding]
    channels, byte_depth = cv_type["channels"], cv_type["byte_depth"]
    if step < width * byte_depth * channels or height * step != len(data):
        raise ValueError("Image is wrongly formed")
    dtype = np.dtype(cv_type["dtype"]).newbyteorder(">" if is_bigendian else "<")
    rows = np.frombuffer(data, np.uint8).reshape(height, step)[:, : width * byte_depth * channels]
    mat = np.ascontiguousarray(rows).view(dtype).reshape(height, width, channels)
    mat = mat.astype(mat.dtype.newbyteorder("="))
    code = FIXTURE["to_rgb8"][encoding]
    return mat if code is None else cv2.cvtColor(mat, getattr(cv2, code))


def message(data: bytes, height: int, width: int, step: int, encoding: str,
            is_bigendian: int = 0) -> Image:
    msg = Image(height=height, width=width, step=step, encoding=encoding,
                is_bigendian=is_bigendian)
    msg.data = data
    return msg


def test_fixture_covers_what_both_accept() -> None:
    """The encodings compared below: every 8-bit colour/mono/YUV name cv_bridge and we share."""
    assert BOTH == ["bgr8", "bgra8", "mono8", "rgb8", "rgba8", "yuv422", "yuv422_yuy2"]
    for encoding in BOTH:
        assert FIXTURE["cv_types"][encoding]["channels"] == ENCODINGS[encoding]
        assert FIXTURE["cv_types"][encoding]["byte_depth"] == 1


@pytest.mark.parametrize("encoding", BOTH)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("is_bigendian", (0, 1))
def test_image_to_rgb_is_cv_bridges(encoding: str, padding: int, is_bigendian: int) -> None:
    """Same RGB pixels for row-padded frames of either byte order."""
    height, width = 5, 6
    step = width * ENCODINGS[encoding] + padding
    data = np.random.default_rng(padding).integers(0, 256, height * step, np.uint8).tobytes()
    ours = to_rgb(*image_from_msg(message(data, height, width, step, encoding, is_bigendian)))
    expected = bridge_to_rgb8(data, height, width, step, encoding, is_bigendian)
    assert ours.dtype == expected.dtype == np.uint8
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("extra", (-1, 1))
def test_wrong_data_size_is_refused_as_by_cv_bridge(extra: int) -> None:
    """cv_bridge's matFromImage refuses height x step != data size; so do we, naming it."""
    height, width, step = 4, 4, 12
    data = bytes(height * step + extra)
    with pytest.raises(ValueError):
        bridge_to_rgb8(data, height, width, step, "rgb8", 0)
    with pytest.raises(InputError, match="height x step"):
        image_from_msg(message(data, height, width, step, "rgb8"))


def test_short_step_is_refused_as_by_cv_bridge() -> None:
    height, width, step = 4, 4, 11
    data = bytes(height * step)
    with pytest.raises(ValueError):
        bridge_to_rgb8(data, height, width, step, "rgb8", 0)
    with pytest.raises(InputError, match="smaller than width x channels"):
        image_from_msg(message(data, height, width, step, "rgb8"))


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
    assert np.dtype(raster.dtype).name == {
        "8U": "uint8", "16U": "uint16", "32S": "int32"}[cv_type["depth"]]
    assert cv_type["channels"] == channels
    assert msg.encoding == encoding
    assert msg.step == len(msg.data) // msg.height == raster.nbytes // raster.shape[0]
    assert bool(msg.is_bigendian) == (raster.dtype.itemsize > 1 and sys.byteorder == "big")
    assert bytes(msg.data) == raster.tobytes()


def test_against_cv_bridge_itself() -> None:
    """On a ROS install: cv_bridge's own imgmsg_to_cv2 and cv2_to_imgmsg against ours."""
    cv_bridge = pytest.importorskip(
        "cv_bridge", reason="cv_bridge does not import here (it has no PyPI wheel); the "
        "fixture tests above stand in for it, and a ROS install runs this one")
    bridge = cv_bridge.CvBridge()
    for encoding in BOTH:
        height, width = 5, 6
        step = width * ENCODINGS[encoding] * 2  # a padding cv_bridge's Python reshape can read
        data = np.random.default_rng(1).integers(0, 256, height * step, np.uint8).tobytes()
        msg = message(data, height, width, step, encoding)
        np.testing.assert_array_equal(to_rgb(*image_from_msg(msg)),
                                      bridge.imgmsg_to_cv2(msg, "rgb8"))
    for encoding, raster in RASTERS.items():
        ours = image_msg(raster, Header(), encoding if raster.ndim == 2 else None)
        theirs = bridge.cv2_to_imgmsg(raster, encoding)
        assert (ours.encoding, ours.step, bool(ours.is_bigendian), bytes(ours.data)) == (
            theirs.encoding, theirs.step, bool(theirs.is_bigendian), bytes(theirs.data))
