"""The video decoding shared by the node and replay (``compactinst_ros/video.py``): codec names,
keyframe detection, streams with B-frames (pictures matched back to their messages by pts, the
decoder flushed at the end), and every way a packet can give no picture, each saying why and
what to do."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.video import (
    B_FRAME_OPTIONS,
    COMPRESSED_VIDEO,
    FFMPEG_PACKET,
    HARDWARE_DECODERS,
    Decoder,
    VideoPacket,
    VideoPacketError,
    VideoStream,
    available_decoders,
    codec_of,
    decode_packets,
    encode,
    is_keyframe,
    packet_of,
    stamp_of,
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
        for data, key, pts in encode(stream_frames, encoder, gop)
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
    assert [is_keyframe(data, codec) for data, _, _ in units] == [key for _, key, _ in units]
    assert [key for _, key, _ in units] == [i % 4 == 0 for i in range(9)]
    assert [pts for _, _, pts in units] == list(range(9))  # no B-frames: in order


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


#: measured on this clip: decoded pictures are 1.4-3.6 grey levels off their frame (mean
#: absolute error), and each mean 1.6-3.1 levels off; the frames' means are 12 levels apart
CLIP_ERROR = 6


def gradient_clip(count: int = 12, h: int = 48, w: int = 64) -> list[np.ndarray]:
    """A grey ramp moving right, 12 grey levels brighter every frame: each frame's mean is its
    own (75.5 + 12 i), so a decoded picture tells which frame it is."""
    ramp = np.linspace(0, 48, w)[None, :] + np.linspace(0, 24, h)[:, None]
    out = []
    for i in range(count):
        grey = np.roll(np.clip(ramp + 40 + 12 * i, 0, 255), 3 * i, axis=1).astype(np.uint8)
        out.append(np.repeat(grey[:, :, None], 3, axis=2))
    return out


def b_frame_units(
    source: list[np.ndarray], encoder: str = "libx264", gop: int = 12
) -> list[tuple[bytes, int, bool]]:
    """(Annex B data, presentation index, keyframe) per packet, in decode order, from an
    encoder with two B-frames between references: the order a camera's encoder sends and a bag
    records them."""
    units = [(data, pts, key) for data, key, pts in encode(source, encoder, gop, bframes=2)]
    assert [pts for _, pts, _ in units] != sorted(pts for _, pts, _ in units)  # reordered
    return units


def video_message(msgtype: str, data: bytes, pts: int, key: bool, codec: str) -> SimpleNamespace:
    """A recorded message as rosbags deserialises it, stamped with its picture's capture time
    (frame ``pts`` at 30 fps); FFMPEGPacket carries the encoder's pts and key flag."""
    stamp = SimpleNamespace(sec=1_700_000_000 + pts // 30, nanosec=(pts % 30) * 33_333_333)
    if msgtype == COMPRESSED_VIDEO:
        return SimpleNamespace(timestamp=stamp, frame_id="cam", data=data, format=codec)
    header = SimpleNamespace(stamp=stamp, frame_id="cam")
    return SimpleNamespace(header=header, data=data, encoding=codec, pts=pts, flags=int(key))


def replay_packets(msgtype: str, units: list[tuple[bytes, int, bool]], codec: str) -> list:
    """(stamp ns, VideoPacket) per message in recorded (decode) order, read as replay reads
    them (``stamp_of``, ``packet_of``)."""
    messages = [video_message(msgtype, data, pts, key, codec) for data, pts, key in units]
    return [(stamp_of(msg, msgtype)[0], packet_of(msg, msgtype)) for msg in messages]


def frame_of(picture: np.ndarray, source: list[np.ndarray]) -> int:
    """Which source frame a decoded picture shows: the one with the nearest mean grey level."""
    return int(np.argmin([abs(float(picture.mean()) - float(bgr.mean())) for bgr in source]))


def assert_shows(picture: np.ndarray, source: list[np.ndarray], frame: int) -> None:
    assert frame_of(picture, source) == frame
    assert np.abs(picture.astype(np.int16) - source[frame]).mean() < CLIP_ERROR


@pytest.mark.parametrize("msgtype", [COMPRESSED_VIDEO, FFMPEG_PACKET])
@pytest.mark.parametrize("encoder", list(B_FRAME_OPTIONS))
def test_b_frames_give_every_picture_to_its_own_message(encoder, msgtype) -> None:
    """Packets in decode order, pictures matched back by pts: all 12 pictures come out (the
    last ones when the stream is flushed), each with its own message's stamp and content, in
    presentation order; FFMPEGPacket's reordered pts are neither a restart nor lost packets."""
    source = gradient_clip()
    codec = codec_of(encoder)
    packets = replay_packets(msgtype, b_frame_units(source, encoder), codec)
    stamps = [stamp for stamp, _ in packets]
    stream = VideoStream()
    outcomes = list(decode_packets(packets, stream))
    assert [o.error for o in outcomes] == [None] * len(source)
    assert [o.tag for o in outcomes] == sorted(stamps)  # every message once, shown in order
    for frame, outcome in enumerate(outcomes):
        assert stamps[outcome.index] == outcome.tag  # index: the message it was decoded from
        assert_shows(outcome.picture, source, frame)
    assert (stream.pictures, stream.failures, stream.lost) == (len(source), 0, 0)
    assert "gave no picture" not in stream.describe()


def test_a_flushed_stream_decodes_the_next_stream_from_its_keyframe() -> None:
    source = gradient_clip()
    packets = replay_packets(COMPRESSED_VIDEO, b_frame_units(source), "h264")
    stream = VideoStream()
    for _ in range(2):  # flush drains and resets the decoder: the second pass decodes too
        outcomes = [o for tag, packet in packets for o in stream.push(packet, tag)]
        outcomes += stream.flush()
        assert [o.picture is not None for o in outcomes] == [True] * len(source)
        assert [o.tag for o in outcomes] == sorted(tag for tag, _ in packets)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_bad_packet_among_b_frames_is_named_and_the_rest_decode(damage) -> None:
    """A P-frame in the middle of the first GOP is replaced: garbage the decoder refuses, or
    half its bytes, which FFmpeg conceals and flags. That message is named; the B-frame decoded
    after it (predicted from it) is dropped naming it; every message before it, held back or
    not, and every message from the next keyframe on gives its own picture."""
    source = gradient_clip()
    units = b_frame_units(source, gop=6)
    assert [key for _, _, key in units].index(True, 1) == 6  # the second GOP starts at 6
    bad = 4  # decode order I0 P3 B1 B2 P5 B4 | I6 ...: message 4 is P5
    data, pts, key = units[bad]
    assert (pts, key) == (5, False)
    broken = (
        b"\x00\x00\x01\x41" + bytes(range(256)) * 2
        if damage == "garbage"
        else data[: len(data) // 2]
    )
    units[bad] = (broken, pts, key)
    packets = replay_packets(COMPRESSED_VIDEO, units, "h264")
    outcomes = list(decode_packets(packets))
    assert sorted(o.index for o in outcomes) == list(range(len(units)))  # none silently lost
    by_index = {o.index: o for o in outcomes}
    cause = "undecodable h264 packet" if damage == "garbage" else "flagged the picture"
    assert cause in str(by_index[bad].error) and f"message {bad}" in str(by_index[bad].error)
    assert f"message {bad}" in str(by_index[5].error)  # B4: waits for a keyframe, or dropped
    for index in [0, 1, 2, 3, *range(6, len(units))]:
        assert_shows(by_index[index].picture, source, units[index][1])
    shown = [units[o.index][1] for o in outcomes if o.picture is not None]
    assert shown == sorted(shown) == [0, 1, 2, 3, *range(6, len(units))]


def test_per_packet_decode_names_b_frames_as_the_cause() -> None:
    """``decode`` (one packet in, its own picture out) cannot hand back a reordered picture:
    each packet's error and the stream's description name B-frames and both fixes, before the
    hardware decoders that were not used."""
    units = b_frame_units(gradient_clip())
    stream = VideoStream()
    reasons = []
    for pts, (data, key) in enumerate((d, k) for d, _, k in units):
        try:
            stream.decode(VideoPacket(data, "h264", key, pts))
        except VideoPacketError as exc:
            reasons.append(str(exc))
    assert any("B-frames" in r and "bframes=0" in r and "push" in r for r in reasons), reasons
    described = stream.describe()
    assert described.startswith("h264; ") and "messages gave no picture" in described
    assert "B-frames" in described.split(" (not used: ")[0]


def test_a_lost_ffmpeg_packet_among_b_frames_is_counted_not_a_restart() -> None:
    """FFMPEGPacket's pts go back and forth with B-frames; a packet that never came (B1) is
    found by the pts missing between two anchors, counted in ``lost`` and named, and the
    stream waits for the next keyframe as after any loss."""
    units = b_frame_units(gradient_clip(), gop=6)  # I0 P3 B1 B2 P5 B4 | I6 ...
    assert units[2][1] == 1
    kept = units[:2] + units[3:]
    stream = VideoStream()
    outcomes = list(decode_packets(replay_packets(FFMPEG_PACKET, kept, "h264"), stream))
    assert sorted(o.index for o in outcomes) == list(range(len(kept)))
    reasons = " ".join(str(o.error) for o in outcomes if o.error is not None)
    assert stream.lost == 1 and "1 lost packets (between pts 0 and 3)" in reasons
    assert "restarted" not in reasons
    shown = {kept[o.index][1] for o in outcomes if o.picture is not None}
    assert {0, 3} <= shown and shown >= set(range(6, 12))  # before the loss, and the next GOP


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
    pictures = [decoder.decode(data, pts) for data, _, pts in encode(source)]
    assert sum(len(p) for p in pictures) == len(source)
    tried = [line.split(" ", 1)[0] for line in decoder.skipped]
    assert tried == candidates[: candidates.index(decoder.name)]
    assert all("(" in line for line in decoder.skipped)  # each with its reason
    if "h264_cuvid" in candidates and not os.path.exists("/dev/nvidia0"):
        assert decoder.name == "h264" and "h264_cuvid" in tried
