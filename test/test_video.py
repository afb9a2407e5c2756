"""The video decoding shared by the node and replay (``compactinst_ros/video.py``): codec names,
keyframe detection, and every way a packet can give no picture, each saying why and what to do."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.video import (
    HARDWARE_DECODERS,
    Decoder,
    VideoPacket,
    VideoPacketError,
    VideoStream,
    available_decoders,
    codec_of,
    encode,
    is_keyframe,
)

pytest.importorskip("av", reason="the video extra (PyAV) is not installed")


def frames(count: int, h: int = 64, w: int = 96) -> list[np.ndarray]:
    """A square moving over a gradient: every frame differs from the last."""
    base = np.tile(np.linspace(0, 200, w, dtype=np.uint8), (h, 1))
    out = []
    for i in range(count):
        bgr = np.repeat(base[:, :, None], 3, axis=2).copy()
        bgr[10:30, 4 * i : 4 * i + 20] = (30, 200, 90)
        out.append(bgr)
    return out


def packets(stream_frames: list[np.ndarray], encoder: str = "libx264", gop: int = 4):
    codec = codec_of(encoder)
    return [
        VideoPacket(data, codec, key, pts)
        for pts, (data, key) in enumerate(encode(stream_frames, encoder, gop))
    ]


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("h264", "h264"),
        ("h264;yuv420p;bgr8;bgr8", "h264"),
        ("libx264", "h264"),
        ("h264_nvenc", "h264"),
        ("h265", "hevc"),
        ("hevc_nvenc;nv12;bgr8;bgr8", "hevc"),
        ("libx265", "hevc"),
    ],
)
def test_codec_names_of_both_message_types(name, codec) -> None:
    assert codec_of(name) == codec


def test_an_unsupported_codec_names_what_to_record() -> None:
    with pytest.raises(
        InputError, match=r"video codec 'vp9' is not supported; record h264 or h265"
    ):
        codec_of("vp9")


@pytest.mark.parametrize("encoder", ["libx264", "libx265"])
def test_keyframes_are_found_in_the_bitstream(encoder) -> None:
    """The NAL scan agrees with the encoder's own key flag (CompressedVideo has no flag)."""
    codec = codec_of(encoder)
    units = list(encode(frames(9), encoder, gop=4))
    assert [is_keyframe(data, codec) for data, _ in units] == [key for _, key in units]
    assert [key for _, key in units] == [i % 4 == 0 for i in range(9)]


def test_a_stream_decodes_every_packet_in_order() -> None:
    source = frames(8)
    stream = VideoStream()
    for packet, bgr in zip(packets(source), source, strict=True):
        picture = stream.decode(packet)
        assert picture.shape == bgr.shape and picture.dtype == np.uint8
        assert np.abs(picture.astype(np.int16) - bgr).mean() < 6
    assert stream.describe().startswith("h264")


def test_an_undecodable_packet_waits_for_the_next_keyframe() -> None:
    stream_packets = packets(frames(9))
    stream = VideoStream()
    stream.decode(stream_packets[0])
    garbage = VideoPacket(b"\x00\x00\x01\x65" + bytes(range(256)) * 4, "h264", True, 1)
    with pytest.raises(VideoPacketError, match=r"undecodable h264 packet .*next keyframe"):
        stream.decode(garbage)
    for packet in stream_packets[2:4]:  # P-frames: they would decode against the garbage
        with pytest.raises(VideoPacketError, match="after an undecodable packet"):
            stream.decode(packet)
    assert stream.decode(stream_packets[4]).shape == (64, 96, 3)  # the next keyframe


def test_a_stream_with_b_frames_names_the_encoder_setting() -> None:
    """A reordered picture does not belong to the packet that returned it: dropped, named."""
    import av

    context = av.CodecContext.create("libx264", "w")
    context.height, context.width, context.pix_fmt = 64, 96, "yuv420p"
    context.time_base = Fraction(1, 30)
    context.options = {"preset": "ultrafast", "x264-params": "bframes=2:b-adapt=0"}
    units = []
    for pts, bgr in enumerate(frames(8)):
        picture = av.VideoFrame.from_ndarray(bgr, format="bgr24")
        picture.pts = pts
        units += [(bytes(p), p.is_keyframe) for p in context.encode(picture)]
    units += [(bytes(p), p.is_keyframe) for p in context.encode(None)]
    stream = VideoStream()
    reasons = []
    for pts, (data, key) in enumerate(units):
        try:
            stream.decode(VideoPacket(data, "h264", key, pts))
        except VideoPacketError as exc:
            reasons.append(str(exc))
    assert any("B-frames" in r and "bframes=0" in r for r in reasons), reasons


def test_hardware_decoders_are_tried_first_and_give_way_with_their_reason() -> None:
    """Every decoder before the one in use is a hardware decoder of this FFmpeg that failed,
    listed with why; without an NVIDIA driver (a CPU host) cuvid, which PyAV's own FFmpeg
    carries, fails to open or to decode and the software decoder takes the same packets."""
    import os

    candidates = available_decoders("h264")
    assert candidates[-1] == "h264"
    assert set(candidates[:-1]) <= set(HARDWARE_DECODERS["h264"])
    assert available_decoders("h264", hardware=False) == ["h264"]
    source = frames(6)
    decoder = Decoder("h264")
    pictures = [decoder.decode(data, pts) for pts, (data, _) in enumerate(encode(source))]
    assert sum(len(p) for p in pictures) == len(source)
    tried = [line.split(" ", 1)[0] for line in decoder.skipped]
    assert tried == candidates[: candidates.index(decoder.name)]
    assert all("(" in line for line in decoder.skipped)  # each with its reason
    if "h264_cuvid" in candidates and not os.path.exists("/dev/nvidia0"):
        assert decoder.name == "h264" and "h264_cuvid" in tried
