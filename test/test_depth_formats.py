"""Depth images as the 3-D work reads them: 16UC1 millimetres, 32FC1 metres and
image_transport's compressedDepth (PNG and RVL), all to float32 metres with NaN where there is no
return.

The compressedDepth payloads are built here by encoders that follow
compressed_depth_image_transport's ``encodeCompressedDepthImage`` and ``RvlCodec::CompressRVL``
step by step (a 12-byte ConfigHeader, inverse-depth quantisation for 32FC1, RVL's nibble words),
so a decoder that reads them differently fails against them and against the hand-checked vectors.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from compactinst_ros import image_formats
from compactinst_ros.errors import InputError
from compactinst_ros.image_formats import (
    array_from_buffer,
    compressed_depth_format,
    decode_compressed_depth,
    decode_rvl,
    depth_to_metres,
)


def rvl_encode(samples: np.ndarray) -> bytes:
    """RvlCodec::CompressRVL: runs of (zero count, nonzero count, zig-zag deltas), each integer
    in 3-bit groups (low first, bit 3 = more follows), eight nibbles to a 32-bit word, high
    nibble first, the last word's unused nibbles zero."""
    nibbles: list[int] = []

    def vle(value: int) -> None:
        while True:
            nibble = value & 7
            value >>= 3
            nibbles.append(nibble | (8 if value else 0))
            if not value:
                return

    flat = [int(v) for v in samples.ravel()]
    i, previous = 0, 0
    while i < len(flat):
        zeros = 0
        while i < len(flat) and flat[i] == 0:
            zeros, i = zeros + 1, i + 1
        vle(zeros)
        nonzeros = 0
        while i + nonzeros < len(flat) and flat[i + nonzeros]:
            nonzeros += 1
        vle(nonzeros)
        for current in flat[i : i + nonzeros]:
            delta = current - previous
            vle((delta << 1) ^ (delta >> 31))  # zig-zag of a 32-bit int, as upstream
            previous = current
        i += nonzeros
    nibbles += [0] * (-len(nibbles) % 8)
    words = [
        sum(n << (28 - 4 * k) for k, n in enumerate(nibbles[j : j + 8]))
        for j in range(0, len(nibbles), 8)
    ]
    return np.asarray(words, "<u4").tobytes()


def header(quant_a: float = 0.0, quant_b: float = 0.0) -> bytes:
    """ConfigHeader {INV_DEPTH = 0, depthParam[2]} in the sender's (little-endian) layout."""
    return np.array([0], "<i4").tobytes() + np.array([quant_a, quant_b], "<f4").tobytes()


def compressed_depth(
    depth: np.ndarray, codec: str, depth_max: float = 10.0, quantization: float = 100.0
) -> tuple[str, bytes]:
    """(format, data) as encodeCompressedDepthImage writes them for a 16UC1 (mm) or 32FC1 (m)
    image; 32FC1 is quantised to inverse depth first, with its float32 arithmetic."""
    if depth.dtype == np.uint16:
        encoding = "16UC1"
        samples = np.where(depth > np.uint16(depth_max * 1000.0), 0, depth).astype(np.uint16)
        head = header(1.5, 2.5)  # upstream leaves depthParam unset for 16UC1: never read
    else:
        encoding = "32FC1"
        z0, dmax = np.float32(quantization), np.float32(depth_max)
        quant_a = np.float32(z0 * (z0 + np.float32(1.0)))
        quant_b = np.float32(np.float32(1.0) - quant_a / dmax)
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = quant_a / depth + quant_b
        # upstream: depth < depthMax -> unsigned short of the float (truncation), else 0 (NaN too)
        samples = np.where(depth < dmax, inverse, 0).astype(np.uint16)
        head = header(float(quant_a), float(quant_b))
    if codec == "png":
        ok, png = cv2.imencode(".png", samples, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        assert ok
        body = png.tobytes()
    else:
        size = np.array([samples.shape[1], samples.shape[0]], "<u4").tobytes()
        body = size + rvl_encode(samples)
    return f"{encoding}; compressedDepth {codec}", head + body


def depth_mm(h: int = 12, w: int = 17, seed: int = 0) -> np.ndarray:
    """Millimetres with holes (0), runs, a jump both ways and the 16-bit extremes."""
    rng = np.random.default_rng(seed)
    mm = rng.integers(300, 9000, (h, w)).astype(np.uint16)
    mm[rng.random((h, w)) < 0.25] = 0
    mm[2, :] = 0
    mm[3, :5] = [1, 65535, 1, 0, 65535]
    return mm


def test_rvl_hand_checked_vector() -> None:
    """[0, 0, 5, 7, 0] is runs (2 zeros, 2 nonzeros: deltas +5 and +2, zig-zag 10 and 4) and
    (1 zero, 0 nonzeros). 10 is two groups, low first: 2 with the more-bit (A), then 1. Nibbles
    2 2 A 1 4 1 0 and one nibble of padding: the word 0x22A14100."""
    samples = np.array([0, 0, 5, 7, 0], np.uint16)
    stream = rvl_encode(samples)
    assert stream == np.array([0x22A14100], "<u4").tobytes()
    np.testing.assert_array_equal(decode_rvl(np.frombuffer(stream, np.uint8), 5), samples)


@pytest.mark.parametrize("seed", range(3))
def test_rvl_round_trips(seed: int) -> None:
    mm = depth_mm(seed=seed)
    stream = np.frombuffer(rvl_encode(mm), np.uint8)
    np.testing.assert_array_equal(decode_rvl(stream, mm.size), mm.ravel())


def test_rvl_without_numba_walks_the_runs_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vehicle install has no numba: the same decode with the run walk in Python."""
    mm = depth_mm(seed=5)
    stream = np.frombuffer(rvl_encode(mm), np.uint8)
    monkeypatch.setattr(image_formats, "_compiled_rvl_run_heads", lambda: None)
    np.testing.assert_array_equal(decode_rvl(stream, mm.size), mm.ravel())


def test_rvl_of_all_zeros_and_all_nonzero() -> None:
    for samples in (np.zeros(40, np.uint16), np.arange(1, 41, dtype=np.uint16) * 1601):
        stream = np.frombuffer(rvl_encode(samples), np.uint8)
        np.testing.assert_array_equal(decode_rvl(stream, samples.size), samples)


def test_corrupt_rvl_is_an_input_error() -> None:
    stream = np.frombuffer(rvl_encode(depth_mm()), np.uint8)
    with pytest.raises(InputError, match="truncated"):
        decode_rvl(stream[: stream.size // 2], depth_mm().size)
    with pytest.raises(InputError, match="corrupt"):
        decode_rvl(stream, depth_mm().size - 3)


@pytest.mark.parametrize("codec", ["png", "rvl"])
def test_16uc1_compressed_depth_is_lossless_millimetres(codec: str) -> None:
    mm = depth_mm()
    mm[mm > 10000] = 0  # beyond the encoder's depth_max: sent as no return
    metres = decode_compressed_depth(*compressed_depth(mm, codec))
    assert metres.dtype == np.float32 and metres.shape == mm.shape
    np.testing.assert_array_equal(np.isnan(metres), mm == 0)
    np.testing.assert_array_equal(metres[mm > 0], mm[mm > 0].astype(np.float32) / np.float32(1000))


@pytest.mark.parametrize("codec", ["png", "rvl"])
def test_32fc1_compressed_depth_decodes_upstreams_inverse_depth(codec: str) -> None:
    """q = trunc(A / z + B) on the way in, z = A / (q - B) on the way out, both in float32:
    within one quantisation step of the sent depth; NaN and beyond-max are no return."""
    z = depth_mm().astype(np.float32) / np.float32(1000.0)
    z[z < 0.3] = np.nan  # holes, and depths too near for 16-bit inverse depth at z0 = 100
    z[0, 0] = 12.0  # beyond depth_max 10 m
    fmt, data = compressed_depth(z, codec)
    metres = decode_compressed_depth(fmt, data)
    valid = np.isfinite(z) & (z < 10.0)
    np.testing.assert_array_equal(np.isfinite(metres), valid)
    # one step of q is z**2 / A metres: A = 100 * 101
    np.testing.assert_array_less(np.abs(metres - z)[valid], (z**2 / 10100.0)[valid] * 1.01)
    quant_a, quant_b = np.frombuffer(data[4:12], "<f4")
    q = np.where(valid, (quant_a / z + quant_b), 0).astype(np.uint16)
    np.testing.assert_array_equal(
        metres[valid], (quant_a / (q.astype(np.float32) - quant_b))[valid]
    )


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("16UC1; compressedDepth png", ("16UC1", "png")),
        ("32FC1; compressedDepth rvl", ("32FC1", "rvl")),
        ("16UC1; compressedDepth", ("16UC1", "png")),  # before the rvl variant existed
    ],
)
def test_compressed_depth_format_names(field: str, expected: tuple[str, str]) -> None:
    assert compressed_depth_format(field) == expected


@pytest.mark.parametrize(
    "field",
    [
        "16UC1; compressedDepth zstd",
        "bgr8; compressedDepth png",
        "16UC1; jpeg compressed bgr8",
        "png",
        "",
    ],
)
def test_other_depth_formats_are_refused_naming_the_transport(field: str) -> None:
    with pytest.raises(InputError, match="compressedDepth png\\|rvl"):
        decode_compressed_depth(field, header() + b"\x89PNG\r\n\x1a\n")


def test_compressed_depth_payload_errors_name_the_problem() -> None:
    fmt, data = compressed_depth(depth_mm(), "rvl")
    with pytest.raises(InputError, match="no image after its 12-byte header"):
        decode_compressed_depth(fmt, data[:12])
    huge = data[:12] + np.array([16000, 16000], "<u4").tobytes() + data[20:]
    with pytest.raises(InputError, match="cannot hold 16000x16000"):
        decode_compressed_depth(fmt, huge)
    fmt, data = compressed_depth(depth_mm(), "png")
    _, jpeg = cv2.imencode(".jpg", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(InputError, match="jpeg"):
        decode_compressed_depth(fmt, data[:12] + jpeg.tobytes())
    _, png8 = cv2.imencode(".png", np.zeros((4, 4), np.uint8))
    with pytest.raises(InputError, match="not a 16-bit grey PNG"):
        decode_compressed_depth(fmt, data[:12] + png8.tobytes())


@pytest.mark.parametrize("is_bigendian", [False, True])
@pytest.mark.parametrize("padding", [0, 3])
def test_raw_depth_from_padded_buffers_of_either_byte_order(
    is_bigendian: bool, padding: int
) -> None:
    mm = depth_mm()
    h, w = mm.shape
    order = ">" if is_bigendian else "<"
    for encoding, values, expected in (
        ("16UC1", mm.astype(order + "u2"), np.where(mm > 0, mm / np.float32(1000), np.nan)),
        (
            "32FC1",
            (mm / np.float32(1000)).astype(order + "f4"),
            np.where(mm > 0, mm / np.float32(1000), np.nan),
        ),
    ):
        rows = np.zeros((h, values.itemsize * w + padding), np.uint8)
        rows[:, : values.itemsize * w] = values.view(np.uint8).reshape(h, -1)
        image = array_from_buffer(rows.tobytes(), h, w, rows.shape[1], encoding, is_bigendian)
        metres = depth_to_metres(encoding, image)
        assert metres.dtype == np.float32 and metres.shape == (h, w)
        np.testing.assert_array_equal(metres, expected.astype(np.float32))


def test_32fc1_non_returns_become_nan() -> None:
    depth = np.array([[1.5, 0.0, np.inf], [-np.inf, np.nan, -2.0]], np.float32)
    expected = np.array([[1.5, np.nan, np.nan], [np.nan, np.nan, np.nan]], np.float32)
    np.testing.assert_array_equal(depth_to_metres("32FC1", depth), expected)
    assert depth[0, 1] == 0.0  # the caller's array is untouched


@pytest.mark.parametrize(
    ("encoding", "array", "message"),
    [
        ("mono16", np.zeros((2, 2), np.uint16), "not a depth encoding"),
        ("16UC1", np.zeros((2, 2), np.float32), "does not fit '16UC1'"),
        ("32FC1", np.zeros((2, 2, 3), np.float32), "does not fit '32FC1'"),
    ],
)
def test_wrong_depth_input_is_refused_naming_the_fix(
    encoding: str, array: np.ndarray, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        depth_to_metres(encoding, array)
