"""H.264 / H.265 camera streams: video messages decoded to bgr8 pictures, for the node and replay.

Two message types carry one encoded picture each: ffmpeg_image_transport's
``ffmpeg_image_transport_msgs/FFMPEGPacket`` (topic ``<image_topic>/ffmpeg``) and Foxglove's
``foxglove_msgs/CompressedVideo``. Their definitions are registered here for bag reading
(``MESSAGE_DEFINITIONS``), so a bag replays without the packages installed.

A picture depends on the pictures before it, so each stream of each camera keeps its own decoder
state (``VideoStream``) and gets every packet in order. The stream waits for a keyframe at its
start, after a gap (FFMPEGPacket's ``pts`` jumped: packets were lost) and after a packet the
decoder refused; every packet that gives no picture is named with why (``VideoPacketError``),
which the node counts as a dropped input frame under that reason on /diagnostics.

Packets arrive in decode order. A stream with B-frames has its pictures in another order
(presentation order), so the decoder holds pictures back and returns them with later packets.
``VideoStream.push`` therefore gives each packet the message's number as its pts and matches
every picture the decoder returns back to its message by ``frame.pts``, never by count;
``VideoStream.flush`` drains the pictures still held at the end of a stream, and a message whose
picture never comes is reported with the reason. ``decode_packets`` runs a whole stream that way.
``VideoStream.decode`` (one packet in, its own picture out) serves callers that take one picture
per packet; it names B-frames as the cause when a picture is held back.

Decoding uses PyAV (FFmpeg; the ``video`` extra). A hardware decoder is tried first where the
platform's FFmpeg has one (``HARDWARE_DECODERS``: Jetson's nvv4l2 / nvmpi, NVIDIA's cuvid); one that
does not open, or fails before its first picture, gives way to FFmpeg's software decoder, which
runs on one thread: frame threads would hold pictures back by one frame per thread, and one
core decodes 1080p H.264 well above camera rate (scripts/bench_decode.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Generic, TypeVar

import numpy as np

from .errors import InputError

T = TypeVar("T")

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
#: the most pictures an H.264 / H.265 decoder holds back for reordering (its picture buffer):
#: a message whose picture has not come out this many packets later gives none
MAX_REORDER = 16


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
        #: packets sent before the first picture: a hardware decoder that fails later in its
        #: first GOP hands them to the next decoder, which needs them as references
        self._unconfirmed: list[tuple[bytes, int]] = []
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

    @property
    def reorders(self) -> bool:
        """Whether the stream's parameter sets announce reordered pictures (B-frames); known
        once the decoder has read a keyframe."""
        return bool(getattr(self._context, "has_b_frames", False))

    def _send(self, data: bytes | None, pts: int) -> list[Any]:
        if data is None:
            return list(self._context.decode(None))
        packet = _av().Packet(data)
        packet.pts = pts
        return list(self._context.decode(packet))

    def frames(self, data: bytes | None, pts: int) -> list[Any]:
        """The PyAV frames the decoder returns for one packet (``data`` None drains it). A
        frame's ``pts`` is that of the packet it was decoded from, which with B-frames is an
        earlier packet. A hardware decoder that fails before its first picture gives way to the
        next one, which gets this packet and those sent since the stream's start again."""
        sent = [(data, pts)]
        while True:
            try:
                frames = [frame for d, p in sent for frame in self._send(d, p)]
            except decode_errors() as exc:
                if self._confirmed or self.name == self.codec:
                    raise
                self._failed.append(f"{self.name} ({exc})")
                self._open_next()
                sent = [*self._unconfirmed, (data, pts)]
                continue
            if self._confirmed or self.name == self.codec:  # the software decoder: no fallback
                return frames
            if frames or len(self._unconfirmed) > MAX_REORDER:
                self._confirmed, self._unconfirmed = True, []
            elif data is not None:
                self._unconfirmed.append((data, pts))
            return frames

    def decode(self, data: bytes, pts: int) -> list[tuple[int, np.ndarray]]:
        """The pictures (pts, HxWx3 bgr8) the decoder returns for one packet: each tagged with
        the pts of the packet it came from (an earlier one when the stream has B-frames)."""
        return [(f.pts, f.to_ndarray(format="bgr24")) for f in self.frames(data, pts)]

    def flush(self) -> list[Any]:
        """The frames still held back, at the end of a stream; the decoder is then reset and
        takes a new stream, from a keyframe."""
        try:
            return self.frames(None, 0)
        finally:
            self._context.flush_buffers()


@dataclass(frozen=True, eq=False)
class Decoded(Generic[T]):
    """What one message of a stream gave: its picture (HxWx3 bgr8), or the reason it gave none.

    ``tag`` is what the caller handed in with the message (its stamp, bag index, the message);
    ``index`` is the message's number in the stream (0 = the first packet pushed)."""

    tag: T
    index: int
    picture: np.ndarray | None = None
    error: VideoPacketError | None = None


class VideoStream(Generic[T]):
    """The decoder state of one stream of one camera: packets in decode order, pictures out.

    ``push`` takes each packet with a tag and returns every outcome that became known: the
    pictures the decoder gave (in presentation order, each matched to its message by pts) and the
    messages that give none, each with why; ``flush`` ends the stream. ``decode`` is the one
    packet in, its own picture out form. ``lost`` counts the packets FFMPEGPacket's pts showed
    missing (never received); ``messages``, ``pictures`` and ``failures`` count outcomes."""

    def __init__(self, hardware: bool = True, threads: int = 1) -> None:
        self.hardware = hardware
        self.threads = threads
        self.decoder: Decoder | None = None
        self.waiting: str | None = "the start of the stream"  # why a keyframe is needed
        self.lost = 0
        self.messages = 0  # messages pushed
        self.pictures = 0  # messages whose picture came out
        self.failures = 0  # messages that gave no picture
        self.first_failure: str | None = None
        #: messages sent to the decoder whose picture has not come out: number -> (tag, sent)
        self._pending: dict[int, tuple[T, int]] = {}
        self._sent = 0  # packets sent to the decoder
        # FFMPEGPacket pts bookkeeping (``_gap``)
        self._last_pts: int | None = None
        self._top_pts: int | None = None  # the newest anchor: the highest pts since a restart
        self._prev_pts: int | None = None  # the anchor before it
        self._anchor = 0  # the message that brought the newest anchor
        self._between = 0  # reordered pts seen between the two anchors
        self._pts_step: int | None = None
        self._reorders = False  # pts seen going back within a GOP: B-frames
        self._keys: list[int] = []  # the latest keyframes sent to the decoder (message numbers)
        #: messages sent to the decoder whose picture will be wrong -> why (damage, loss)
        self._damaged: dict[int, str] = {}
        #: decoded pictures waiting for the messages sent before them: (number, tag, frame)
        self._held: list[tuple[int, T, Any]] = []

    def _gap(self, pts: int | None, keyframe: bool, index: int) -> str | None:
        """Why ``pts`` breaks the sequence (lost packets, an encoder restart), else None.

        Without reordering a jump ahead of the usual step means lost packets. With B-frames the
        pts of packets in decode order go back: an anchor (a pts ahead of all before, an I- or
        P-frame) comes before the B-frames shown ahead of it, which lie between it and the
        anchor before (H.265's leading pictures too); anything else going back is a restart.
        Those B-frames all come before the next anchor, so the pts missing between the two
        newest anchors are counted as lost when it arrives."""
        if pts is None:
            return None
        last, top, self._last_pts = self._last_pts, self._top_pts, pts
        if last is None or top is None:
            self._restart(pts, index)
            return None
        if pts != last and (self._pts_step is None or abs(pts - last) < self._pts_step):
            self._pts_step = abs(pts - last)
        if pts <= top:
            prev = self._prev_pts
            if keyframe or pts == last or prev is None or not prev < pts < top:
                self._restart(pts, index)
                return f"the pts went back from {top} to {pts} (the encoder restarted)"
            self._reorders = True
            self._between += 1
            return None
        gap = None
        if self._reorders or (self.decoder is not None and self.decoder.reorders):
            gap = self._missing_between()
        elif (missing := (pts - top) // (self._pts_step or 1) - 1) > 0:
            self.lost += missing
            gap = f"{missing} lost packets (pts {top} -> {pts})"
        self._prev_pts, self._top_pts, self._anchor, self._between = top, pts, index, 0
        return gap

    def _restart(self, pts: int, index: int) -> None:
        """Start the pts bookkeeping over at ``pts`` (the first packet, an encoder restart)."""
        self._top_pts, self._prev_pts, self._anchor, self._between = pts, None, index, 0

    def _missing_between(self) -> str | None:
        """Packets lost between the two newest anchors of a reordering stream; the pictures
        decoded since (which may predict from them) are marked, the reason returned."""
        prev, top, step = self._prev_pts, self._top_pts, self._pts_step
        if prev is None or top is None or not step:
            return None
        missing = (top - prev) // step - 1 - self._between
        if missing <= 0:
            return None
        self.lost += missing
        why = f"{missing} lost packets (between pts {prev} and {top})"
        self._mark(self._anchor + 1, f"may be predicted from the {why}")
        return why

    def _skip(self, index: int, tag: T, reason: str) -> Decoded[T]:
        """The outcome of a message that gives no picture, counted."""
        self._damaged.pop(index, None)
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = reason
        return Decoded(tag, index, error=VideoPacketError(reason))

    def _collect(self, frames: list[Any], codec: str) -> list[Decoded[T]]:
        """Match the decoder's frames back to their messages by pts. A picture is handed out
        once every message sent before it has its outcome: a B-frame's picture comes out before
        that of the P-frame it predicts from, and is dropped if that one shows damage."""
        out: list[Decoded[T]] = []
        for frame in frames:
            entry = self._pending.pop(frame.pts, None) if frame.pts is not None else None
            if entry is None:
                continue  # a message already given up on (or no message of ours): nobody waits
            if getattr(frame, "is_corrupt", False):
                out.append(self._skip(frame.pts, entry[0], self._damage(frame.pts, codec)))
            else:
                self._held.append((frame.pts, entry[0], frame))
        return out + self._release()

    def _release(self) -> list[Decoded[T]]:
        """The held pictures whose earlier messages all have their outcome, in the decoder's
        (presentation) order, less those predicted from a damaged picture."""
        first = min(self._pending, default=None)
        out: list[Decoded[T]] = []
        while self._held and (first is None or self._held[0][0] < first):
            index, tag, frame = self._held.pop(0)
            if index in self._damaged:
                out.append(
                    self._skip(index, tag, f"the picture of message {index} {self._damaged[index]}")
                )
                continue
            self.pictures += 1
            out.append(Decoded(tag, index, frame.to_ndarray(format="bgr24")))
        return out

    def _mark(self, since: int, why: str) -> bool:
        """Mark the pictures of the messages from ``since`` up to the next keyframe (sent, not
        handed out yet) as wrong for ``why``: they are dropped as they come out. Whether no
        keyframe was sent since, so that packets must wait for one."""
        end = next((k for k in self._keys if k > since), None)
        for n in [*self._pending, *(held[0] for held in self._held)]:
            if n >= since and (end is None or n < end):
                self._damaged[n] = why
        return end is None

    def _damage(self, index: int, codec: str) -> str:
        """Message ``index`` gave a picture FFmpeg flagged as damaged (errors concealed): the
        messages sent after it up to the next keyframe predict from it, and packets wait for a
        keyframe unless one was sent since. The reason."""
        self._damaged.pop(index, None)
        if self._mark(index + 1, f"is predicted from the damaged picture of message {index}"):
            self.waiting = f"a damaged picture (message {index})"
            return (
                f"the {codec} decoder flagged the picture of message {index} as damaged "
                "(truncated or corrupt data, or a missing reference); waiting for the next keyframe"
            )
        return (
            f"the {codec} decoder flagged the picture of message {index} as damaged (truncated "
            "or corrupt data, or a missing reference)"
        )

    def _expire(self, codec: str) -> list[Decoded[T]]:
        """Messages whose picture did not come out within the decoder's longest reorder delay."""
        limit = MAX_REORDER + self.threads
        late = sorted(n for n, (_, sent) in self._pending.items() if self._sent - sent > limit)
        why = "the {} decoder gave no picture for message {} within {} later packets (longer than "
        why += "any reordering holds one back)"
        out = [self._skip(n, self._pending.pop(n)[0], why.format(codec, n, limit)) for n in late]
        return out + self._release()

    def _drain(self, when: str) -> list[Decoded[T]]:
        """Flush the decoder: the pictures it still holds, then every message still waiting."""
        if self.decoder is None:
            return []
        codec, out = self.decoder.codec, []
        try:
            out = self._collect(self.decoder.flush(), codec)
        except decode_errors() as exc:
            when = f"{when} (draining the decoder failed: {exc})"
        why = f"the {codec} decoder gave no picture for message {{}} {when}"
        left = sorted(self._pending)
        out += [self._skip(n, self._pending.pop(n)[0], why.format(n)) for n in left]
        return out + self._release()

    def push(self, packet: VideoPacket, tag: T) -> list[Decoded[T]]:
        """Send the next packet (decode order) with ``tag``; return every outcome now known: the
        pictures the decoder returned, each with its own message's tag and number (an earlier
        message's when the stream has B-frames), and each message that gives no picture, with
        why (this one, or one whose picture stayed away longer than any reordering)."""
        index = self.messages
        self.messages += 1
        codec = packet.codec
        gap = self._gap(packet.pts, packet.keyframe, index)
        if gap is not None:
            self.waiting = gap
        out: list[Decoded[T]] = []
        if self.decoder is None or self.decoder.codec != codec:
            if self.decoder is not None:
                out += self._drain(f"before the codec changed to {codec}")
                self.waiting = f"a codec change to {codec}"
            self.decoder = None
            try:
                self.decoder = Decoder(codec, self.hardware, self.threads)
            except VideoPacketError as exc:
                return [*out, self._skip(index, tag, f"message {index}: {exc}")]
        if self.waiting is not None:
            if not packet.keyframe:
                why = (
                    f"{codec} packet (message {index}) dropped while waiting for a keyframe "
                    f"after {self.waiting}; the picture returns with the next keyframe (a "
                    "shorter encoder GOP shortens the wait)"
                )
                return [*out, self._skip(index, tag, why)]
            self.waiting = None
        if packet.keyframe:  # the messages before it that a damaged picture can reach
            window = MAX_REORDER + self.threads + 1
            self._keys = [k for k in self._keys if index - k <= window] + [index]
        self._sent += 1
        self._pending[index] = (tag, self._sent)
        try:
            frames = self.decoder.frames(packet.data, index)
        except decode_errors() as exc:
            del self._pending[index]
            self.waiting = f"an undecodable packet (message {index})"
            why = f"undecodable {codec} packet (message {index}: {exc}); waiting for the next "
            why += "keyframe"
            return [*out, self._skip(index, tag, why), *self._release()]
        return out + self._collect(frames, codec) + self._expire(codec)

    def flush(self) -> list[Decoded[T]]:
        """End of the stream: the pictures the decoder still holds back (B-frames), each matched
        to its message, and a reason for every message whose picture never came. Packets pushed
        afterwards start a new stream, from a keyframe."""
        out = self._drain("by the end of the stream")
        if self.decoder is not None:
            self.waiting = "the end of the previous stream (flush)"
        if self._reorders:
            self._missing_between()  # FFMPEGPacket pts skipped at the end: counted as lost
        self._keys, self._reorders = [], False
        self._last_pts = self._top_pts = self._prev_pts = None
        return out

    def decode(self, packet: VideoPacket) -> np.ndarray:
        """The packet's own picture as HxWx3 bgr8, for callers that take one picture per packet;
        VideoPacketError when it gives none now. A stream with B-frames returns pictures with
        later packets, which this form cannot hand back: use ``push``/``flush`` for it."""
        index = self.messages
        outcomes = self.push(packet, None)
        # pictures of earlier messages come too late for this form: not counted as given
        self.pictures -= sum(o.picture is not None and o.index != index for o in outcomes)
        outcome = next((o for o in outcomes if o.index == index), None)
        if outcome is not None:
            if outcome.picture is None:
                raise outcome.error or VideoPacketError(f"no picture for message {index}")
            return outcome.picture
        self._pending.pop(index, None)  # comes out later, when nobody takes it any more
        why = (
            f"the {packet.codec} decoder gave no picture for message {index} yet: the stream "
            "has B-frames (pictures reordered), so it comes out with a later packet, which a "
            "caller taking one picture per packet cannot use; decode with VideoStream.push / "
            "decode_packets, or record without B-frames (x264 bframes=0, nvenc bf=0)"
        )
        self._skip(index, None, why)  # counted: this caller never gets the picture
        raise VideoPacketError(why)

    def describe(self) -> str:
        """Which decoder runs, why messages gave no picture (the first reason, which names the
        cause), and which hardware decoders gave way, for logs and reports."""
        if self.decoder is None and not self.failures:
            return "no packet decoded yet"
        text = self.decoder.name if self.decoder is not None else "no decoder"
        if self.failures:
            text += (
                f"; {self.failures} of {self.messages} messages gave no picture, the first "
                f"because {self.first_failure}"
            )
        skipped = self.decoder.skipped if self.decoder is not None else []
        return text + (f" (not used: {'; '.join(skipped)})" if skipped else "")


def decode_packets(
    packets: Iterable[tuple[T, VideoPacket]], stream: VideoStream[T] | None = None
) -> Iterator[Decoded[T]]:
    """Decode one stream's packets, given in decode order with a tag each (the message's stamp,
    index or the message): every message's outcome, pictures in the order the decoder returns
    them (presentation order) and the stream flushed at the end, so that no held-back picture
    is lost and every message without one is named."""
    stream = stream if stream is not None else VideoStream()
    for tag, packet in packets:
        yield from stream.push(packet, tag)
    yield from stream.flush()


#: encoder settings for recorded streams: no B-frames (Foxglove refuses them, ffmpeg_image_transport
#: decodes packet by packet) and no lookahead, as a live camera encoder runs
LIVE_OPTIONS = {
    "libx264": {"preset": "ultrafast", "tune": "zerolatency", "x264-params": "bframes=0"},
    "libx265": {"preset": "ultrafast", "x265-params": "bframes=0:log-level=error"},
}


#: encoder settings with B-frames: ``bframes`` of them between references, even where the
#: encoder would pick P (b-adapt=0), keyframes only every ``gop`` frames (scenecut=0)
B_FRAME_OPTIONS = {
    "libx264": {"preset": "veryfast", "x264-params": "bframes={n}:b-adapt=0:scenecut=0"},
    "libx265": {
        "preset": "ultrafast", "x265-params": "bframes={n}:b-adapt=0:scenecut=0:log-level=error"
    },
}  # fmt: skip


def encode(
    frames: Iterable[np.ndarray],
    encoder: str = "libx264",
    gop: int = 10,
    crf: int = 23,
    bframes: int = 0,
) -> Iterator[tuple[bytes, bool, int]]:
    """Annex B access units (data, keyframe, index of the frame it carries) of HxWx3 bgr8
    frames of one size, a keyframe every ``gop`` frames: what a camera's live encoder records.
    Without B-frames one unit per frame, in order; with ``bframes`` (recorded drives from
    encoders tuned for size) in decode order, the frames out of order."""
    av = _av()
    context: Any = None
    for index, bgr in enumerate(frames):
        if context is None:
            context = av.CodecContext.create(encoder, "w")
            context.height, context.width = bgr.shape[:2]
            context.pix_fmt = "yuv420p"
            context.time_base = Fraction(1, 30)
            context.gop_size = gop
            options = LIVE_OPTIONS.get(encoder, {})
            if bframes:
                options = {k: v.format(n=bframes) for k, v in B_FRAME_OPTIONS[encoder].items()}
            context.options = {**options, "crf": str(crf)}
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr), format="bgr24")
        picture.pts = index
        for packet in context.encode(picture):
            yield bytes(packet), bool(packet.is_keyframe), int(packet.pts)
    for packet in context.encode(None) if context is not None else ():
        yield bytes(packet), bool(packet.is_keyframe), int(packet.pts)
