"""H.264 / H.265 camera streams: video messages decoded to bgr8 pictures, for the node and replay.

Two message types carry one encoded picture each: ffmpeg_image_transport's
``ffmpeg_image_transport_msgs/FFMPEGPacket`` (topic ``<image_topic>/ffmpeg``) and Foxglove's
``foxglove_msgs/CompressedVideo``. Their definitions are registered here for bag reading
(``MESSAGE_DEFINITIONS``), so a bag replays without the packages installed.

A picture depends on the pictures before it, so each stream of each camera keeps its own decoder
state (``VideoStream``) and gets every packet in order. The stream waits for a keyframe at its
start, after a gap (FFMPEGPacket's ``pts`` jumped: packets were lost) and after a packet the
decoder refused; every packet that gives no picture raises ``VideoPacketError`` naming why,
which the node counts as a dropped input frame under that reason on /diagnostics.

Decoding uses PyAV (FFmpeg; the ``video`` extra). A hardware decoder is tried first where the
platform's FFmpeg has one (``HARDWARE_DECODERS``: Jetson's nvv4l2 / nvmpi, NVIDIA's cuvid); one that
does not open, or fails on its first keyframe, gives way to FFmpeg's software decoder, which
runs on one thread: frame threads would hold pictures back by one frame per thread, and one
core decodes 1080p H.264 well above camera rate (scripts/bench_decode.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .errors import InputError

FFMPEG_PACKET = "ffmpeg_image_transport_msgs/msg/FFMPEGPacket"
COMPRESSED_VIDEO = "foxglove_msgs/msg/CompressedVideo"
VIDEO_TYPES = (FFMPEG_PACKET, COMPRESSED_VIDEO)
#: message definitions (field layout as upstream) for rosbags' typestore
MESSAGE_DEFINITIONS = {
    FFMPEG_PACKET: (
        "std_msgs/Header header\nint32 width\nint32 height\nstring encoding\nuint64 pts\n"
        "uint8 flags\nbool is_bigendian\nuint8[] data\n"
    ),
    COMPRESSED_VIDEO: (
        "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n"
    ),
}
#: codecs decoded, by FFmpeg's decoder name
CODECS = ("h264", "hevc")
#: hardware decoders tried before the software one, where the platform's FFmpeg has them
HARDWARE_DECODERS = {
    "h264": ("h264_nvv4l2dec", "h264_nvmpi", "h264_cuvid"),
    "hevc": ("hevc_nvv4l2dec", "hevc_nvmpi", "hevc_cuvid"),
}
#: FFmpeg's AV_PKT_FLAG_KEY, which ffmpeg_image_transport copies into FFMPEGPacket.flags
PACKET_FLAG_KEY = 0x1
_START_CODE = re.compile(b"\x00\x00\x01")
INSTALL_HINT = "pip install 'compactinst_ros[video]' (PyAV)"


class VideoPacketError(InputError):
    """A video packet that gives no picture (lost keyframe, gap, undecodable data)."""


def codec_of(name: str) -> str:
    """FFmpeg's decoder name for a message's codec field: FFMPEGPacket's ``encoding`` (its first
    ``;`` token: ``h264``, ``hevc`` or an encoder such as ``libx264``, ``hevc_nvenc``) or
    CompressedVideo's ``format`` (``h264``, ``h265``)."""
    token = name.split(";", 1)[0].strip().lower()
    if token in ("h264", "avc") or token.startswith("h264_") or "x264" in token:
        return "h264"
    if token in ("h265", "hevc") or token.startswith("hevc_") or "x265" in token:
        return "hevc"
    raise VideoPacketError(
        f"video codec '{name}' is not supported; record h264 or h265 (hevc) "
        "(ffmpeg_image_transport encoder libx264/h264_nvenc/hevc_nvenc, Foxglove format h264/h265)"
    )


def is_keyframe(data: bytes, codec: str) -> bool:
    """Whether an Annex B access unit starts a decodable picture (H.264 IDR, H.265 IRAP).

    Scans NAL unit headers up to the first picture slice (parameter sets come before it)."""
    for match in _START_CODE.finditer(data):
        at = match.end()
        if at >= len(data):
            break
        if codec == "h264":
            kind = data[at] & 0x1F
            if 1 <= kind <= 5:  # coded slices; 5 is IDR
                return kind == 5
        else:
            kind = (data[at] >> 1) & 0x3F
            if kind < 32:  # coded slices; 16..23 are IRAP
                return 16 <= kind <= 23
    return False


@dataclass(frozen=True)
class VideoPacket:
    """One encoded picture of a video message, with what the stream needs to keep order."""

    data: bytes
    codec: str
    keyframe: bool
    pts: int | None = None  # FFMPEGPacket's encoder pts: a jump means lost packets


def stamp_of(msg: Any, msgtype: str) -> tuple[int, str]:
    """(stamp ns, frame_id) of a video message (CompressedVideo has no header)."""
    if msgtype == COMPRESSED_VIDEO:
        stamp, frame_id = msg.timestamp, msg.frame_id
    else:
        stamp, frame_id = msg.header.stamp, msg.header.frame_id
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec), str(frame_id)


def packet_of(msg: Any, msgtype: str) -> VideoPacket:
    """The VideoPacket of an FFMPEGPacket or CompressedVideo message (rclpy or rosbags)."""
    data = msg.data if isinstance(msg.data, bytes) else bytes(memoryview(msg.data))
    if msgtype == COMPRESSED_VIDEO:
        codec = codec_of(str(msg.format))
        return VideoPacket(data, codec, is_keyframe(data, codec))
    codec = codec_of(str(msg.encoding))
    key = bool(int(msg.flags) & PACKET_FLAG_KEY) or is_keyframe(data, codec)
    return VideoPacket(data, codec, key, int(msg.pts))


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise InputError(
            f"H.264/H.265 input needs PyAV, which is not installed; {INSTALL_HINT}"
        ) from None
    return av


def decode_errors() -> tuple[type[Exception], ...]:
    """What FFmpeg raises for data it cannot decode (PyAV's errors; ValueError for bad input)."""
    return (_av().FFmpegError, ValueError)


def available_decoders(codec: str, hardware: bool = True) -> list[str]:
    """The decoders to try for ``codec``, in order: the platform's hardware ones, then FFmpeg's
    software decoder."""
    av = _av()
    names = [n for n in HARDWARE_DECODERS[codec] if n in av.codecs_available] if hardware else []
    return [*names, codec]


class Decoder:
    """One FFmpeg decoder context; ``name`` says which decoder runs (hardware or software)."""

    def __init__(self, codec: str, hardware: bool = True, threads: int = 1) -> None:
        self.codec = codec
        self._threads = threads
        self._candidates = available_decoders(codec, hardware)
        self.name = ""
        self._context: Any = None
        self._failed: list[str] = []
        self._confirmed = False
        self._open_next()

    def _open_next(self) -> None:
        """Open the next decoder that opens (the software one always does)."""
        av = _av()
        while self._candidates:
            name = self._candidates.pop(0)
            try:
                context = av.CodecContext.create(name, "r")
                context.thread_count = self._threads
                context.open()
            except decode_errors() as exc:
                self._failed.append(f"{name} ({exc})")
                continue
            self.name, self._context = name, context
            return
        raise VideoPacketError(f"no {self.codec} decoder opens ({'; '.join(self._failed)})")

    @property
    def skipped(self) -> list[str]:
        """Hardware decoders that were tried and gave way, each with why."""
        return list(self._failed)

    def decode(self, data: bytes, pts: int) -> list[tuple[int, np.ndarray]]:
        """The pictures (pts, HxWx3 bgr8) the decoder returns for one packet. A hardware decoder
        that fails before its first picture gives way to the next one, on the same packet."""
        av = _av()
        while True:
            packet = av.Packet(data)
            packet.pts = pts
            try:
                frames = self._context.decode(packet)
            except decode_errors() as exc:
                if self._confirmed or self.name == self.codec:
                    raise
                self._failed.append(f"{self.name} ({exc})")
                self._open_next()
                continue
            pictures = [(f.pts, f.to_ndarray(format="bgr24")) for f in frames]
            self._confirmed = self._confirmed or bool(pictures)
            return pictures


class VideoStream:
    """The decoder state of one stream of one camera: packets in order, pictures out.

    ``decode`` returns the packet's bgr8 picture or raises VideoPacketError saying why it gave none;
    ``lost`` counts the packets a pts jump showed missing (never received)."""

    def __init__(self, hardware: bool = True, threads: int = 1) -> None:
        self.hardware = hardware
        self.threads = threads
        self.decoder: Decoder | None = None
        self.waiting: str | None = "the start of the stream"  # why a keyframe is needed
        self.lost = 0
        self._last_pts: int | None = None
        self._pts_step: int | None = None
        self._count = 0

    def _gap(self, pts: int | None) -> str | None:
        """Why ``pts`` breaks the sequence (lost packets, an encoder restart), else None."""
        last, self._last_pts = self._last_pts, pts
        if pts is None or last is None:
            return None
        step = pts - last
        if step <= 0:
            return f"the pts went back from {last} to {pts} (the encoder restarted)"
        if self._pts_step is None or step < self._pts_step:
            self._pts_step = step
            return None
        missing = step // self._pts_step - 1
        if missing <= 0:
            return None
        self.lost += missing
        return f"{missing} lost packets (pts {last} -> {pts})"

    def decode(self, packet: VideoPacket) -> np.ndarray:
        """The packet's picture as HxWx3 bgr8; VideoPacketError when the packet gives none."""
        gap = self._gap(packet.pts)
        if gap is not None:
            self.waiting = gap
        if self.decoder is None or self.decoder.codec != packet.codec:
            if self.decoder is not None:
                self.waiting = f"a codec change to {packet.codec}"
            self.decoder = Decoder(packet.codec, self.hardware, self.threads)
        if self.waiting is not None:
            if not packet.keyframe:
                raise VideoPacketError(
                    f"{packet.codec} packet dropped while waiting for a keyframe after "
                    f"{self.waiting}; the picture returns with the next keyframe (a shorter "
                    "encoder GOP shortens the wait)"
                )
            self.waiting = None
        self._count += 1
        try:
            pictures = self.decoder.decode(packet.data, self._count)
        except decode_errors() as exc:
            self.waiting = "an undecodable packet"
            raise VideoPacketError(
                f"undecodable {packet.codec} packet ({exc}); waiting for the next keyframe"
            ) from None
        for pts, picture in pictures:
            if pts == self._count:
                return picture
        raise VideoPacketError(
            f"the {packet.codec} decoder returned no picture for this packet (a stream with "
            "B-frames reorders pictures); record without B-frames (x264 bframes=0, nvenc "
            "bf=0), as ffmpeg_image_transport and Foxglove expect"
        )

    def describe(self) -> str:
        """Which decoder runs and which hardware decoders gave way, for logs and reports."""
        if self.decoder is None:
            return "no packet decoded yet"
        skipped = self.decoder.skipped
        return self.decoder.name + (f" (not used: {'; '.join(skipped)})" if skipped else "")


#: encoder settings for recorded streams: no B-frames (Foxglove refuses them, ffmpeg_image_transport
#: decodes packet by packet) and no lookahead, as a live camera encoder runs
LIVE_OPTIONS = {
    "libx264": {"preset": "ultrafast", "tune": "zerolatency", "x264-params": "bframes=0"},
    "libx265": {"preset": "ultrafast", "x265-params": "bframes=0:log-level=error"},
}


def encode(
    frames: Iterable[np.ndarray], encoder: str = "libx264", gop: int = 10, crf: int = 23
) -> Iterator[tuple[bytes, bool]]:
    """Annex B access units (data, keyframe) of HxWx3 bgr8 frames of one size, one per frame
    and in order, a keyframe every ``gop`` frames: what a camera's live encoder records."""
    av = _av()
    context: Any = None
    for index, bgr in enumerate(frames):
        if context is None:
            context = av.CodecContext.create(encoder, "w")
            context.height, context.width = bgr.shape[:2]
            context.pix_fmt = "yuv420p"
            context.time_base = Fraction(1, 30)
            context.gop_size = gop
            context.options = {**LIVE_OPTIONS.get(encoder, {}), "crf": str(crf)}
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr), format="bgr24")
        picture.pts = index
        for packet in context.encode(picture):
            yield bytes(packet), bool(packet.is_keyframe)
    for packet in context.encode(None) if context is not None else ():
        yield bytes(packet), bool(packet.is_keyframe)
