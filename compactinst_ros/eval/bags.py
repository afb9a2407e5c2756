"""ROS 2 bag I/O without a ROS install (rosbags): image frames in, node outputs out.

Reads sqlite3 and mcap rosbag2 bags through ``AnyReader`` with the kilted typestore (older bags
carry no message definitions) plus the video messages of ``..video``. Image, CompressedImage,
FFMPEGPacket and CompressedVideo topics are detected by type; a video topic's frames are decoded
in order by one ``VideoStream`` per pass over the bag.

Where a bag holds several image topics, the auto-pick reads the first message of each and
prefers one it can decode (``image_formats`` decides), and says what it chose and skipped.

A bag whose storage file was cut off (a recorder killed mid-write, a partial copy: an mcap without
its closing magic, a .db3 shorter than its header says) is read record by record from the start
instead, up to where it breaks; ``ImageBag.damage`` says how many frames could be read and where
reading stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import re
import shutil
import sqlite3
import struct
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import cv2
import numpy as np

from ..errors import DataError, InputError
from ..image_formats import decode_compressed, image_from_buffer
from ..video import (
    COMPRESSED_VIDEO,
    FFMPEG_PACKET,
    MESSAGE_DEFINITIONS,
    VIDEO_TYPES,
    Decoded,
    VideoStream,
    available_decoders,
    codec_of,
    decode_packets,
    packet_of,
    stamp_of,
)

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
IMAGE_TYPES = (IMAGE, COMPRESSED, *VIDEO_TYPES)
#: the node's ``input_transport`` that takes each image message type
TRANSPORTS = {IMAGE: "raw", COMPRESSED: "compressed", FFMPEG_PACKET: "ffmpeg"}
TRANSPORTS[COMPRESSED_VIDEO] = "foxglove"
#: topic suffixes of the transports (image_transport's layout: ``<image topic>/<transport>``)
TRANSPORT_SUFFIXES = ("/compressed", "/ffmpeg", "/foxglove")
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
JOINT_STATE = "sensor_msgs/msg/JointState"
#: output-bag topics besides the rasters, latency record and camera_info (suffix -> type): what
#: rviz and Foxglove users scrub through; both replay modes write them (colour images where
#: they exist)
BAG_OUTPUTS = {
    "overlay/compressed": COMPRESSED,
    "panoptic/color": IMAGE,
    "semantic/color": IMAGE,
    "instance_table": POINTCLOUD2,
}
#: Namespace of the node's output topics, as recorded in output bags (the node's default).
OUTPUT_NS = "/compactinst"
#: An MCAP file begins and ends with this magic; one without it at the end was cut off.
MCAP_MAGIC = b"\x89MCAP0\r\n"
SQLITE_MAGIC = b"SQLite format 3\x00"
STORAGE_SUFFIXES = (".mcap", ".db3")
_Closable = TypeVar("_Closable", bound="ClosedOnExit")


class ClosedOnExit:
    """``with`` support for a class with ``close()``: leaving the block closes it."""

    def close(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    def __enter__(self: _Closable) -> _Closable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@lru_cache(maxsize=1)
def typestore() -> Typestore:
    """The ROS 2 Kilted typestore (same CDR as Humble for the message types used here), with
    the video messages and vision_msgs (the node's 3-D detections, which an output bag
    records; their definitions ship with the interface sources)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from ..ros.interfaces import VISION_MSGS

    store = get_typestore(Stores.ROS2_KILTED)
    for name, text in MESSAGE_DEFINITIONS.items():
        store.register(get_types_from_msg(text, name))
    vision: dict = {}
    for path in sorted((VISION_MSGS.source / "msg").glob("*.msg")):
        vision.update(get_types_from_msg(path.read_text(), f"vision_msgs/msg/{path.stem}"))
    store.register(vision)
    return store


@dataclass
class BagFrame:
    """One recorded image message: raw CDR bytes plus the times needed to pace and match it."""

    index: int
    topic: str
    msgtype: str
    bag_time_ns: int  # recorder log time: paces realtime playback
    stamp_ns: int  # header.stamp: matches ground truth and returned outputs
    raw: bytes
    frame_id: str = ""
    #: the decoder state of a video topic's pass over the bag (None for still images)
    stream: VideoStream | None = None
    #: a video frame's outcome from ``ImageBag.decoded_frames``: its picture or why it has none
    decoded: Decoded | None = None

    def decode(self) -> tuple[np.ndarray, str]:
        """HxWxC uint8 array and its ROS encoding (CompressedImage and video decode to bgr8).
        A video frame from ``decoded_frames`` returns its picture; one from ``frames`` must be
        decoded in order within its pass (no B-frames). One that gives no picture raises
        ``VideoPacketError``."""
        if self.decoded is not None:
            if self.decoded.picture is None:
                raise self.decoded.error
            return self.decoded.picture, "bgr8"
        msg = typestore().deserialize_cdr(self.raw, self.msgtype)
        if self.stream is not None:
            return self.stream.decode(packet_of(msg, self.msgtype)), "bgr8"
        return image_from_message(msg, self.msgtype)


def image_from_message(msg: object, msgtype: str) -> tuple[np.ndarray, str]:
    """Array and encoding of a deserialised Image or CompressedImage message, as the pipeline
    takes them: raw frames read as the node reads them (``image_formats.image_from_buffer``:
    bayer, 16-bit, nv12 converted on arrival); compressed frames checked (format, magic bytes,
    header size) and decoded as the node does, to bgr8."""
    if msgtype == COMPRESSED:
        return decode_compressed(np.asarray(msg.data, np.uint8), str(msg.format)), "bgr8"
    return image_from_buffer(
        msg.data,
        int(msg.height),
        int(msg.width),
        int(msg.step),
        str(msg.encoding),
        bool(msg.is_bigendian),
    )


def readable(msg: object, msgtype: str) -> str | None:
    """Why replay cannot decode frames like ``msg``, or None when it can: a still frame is
    decoded as replay decodes it (``image_formats`` decides), a video message needs a decoder
    for its codec (its first packet need not be a keyframe)."""
    try:
        if msgtype in VIDEO_TYPES:
            field = msg.format if msgtype == COMPRESSED_VIDEO else msg.encoding
            available_decoders(codec_of(str(field)))
        else:
            image_from_message(msg, msgtype)
    except InputError as exc:
        return str(exc).split(";", 1)[0]
    return None


def stamp_to_ns(stamp: object) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _bag_root(path: Path) -> Path:
    """A rosbag2 folder for ``path`` (a storage file inside one resolves to its folder)."""
    if path.is_file() and (path.parent / "metadata.yaml").is_file():
        return path.parent
    return path


def storage_files(root: Path) -> list[Path]:
    """The .mcap / .db3 storage files of a bag folder (or the file itself), in recording order
    (split bags number their files: ``bag_0``, ``bag_1``, ..., ``bag_10``)."""
    if root.is_file():
        return [root] if root.suffix in STORAGE_SUFFIXES else []
    files = [p for p in root.iterdir() if p.suffix in STORAGE_SUFFIXES and p.is_file()]
    number = re.compile(r"(\d+)")
    return sorted(files, key=lambda p: [int(t) if t.isdigit() else t for t in number.split(p.name)])


def cut_off(path: Path) -> str | None:
    """How a storage file was cut short (a killed recorder, a partial copy), or None when it
    ends where its own header says. Files that are not mcap/sqlite at all are left to the
    regular reader, which names the problem."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(100)
        if head.startswith(MCAP_MAGIC):
            fh.seek(max(size - len(MCAP_MAGIC), len(MCAP_MAGIC)))
            if fh.read() == MCAP_MAGIC:
                return None
            return f"{path.name} ({size} bytes) has no closing MCAP magic"
    if head.startswith(SQLITE_MAGIC) and len(head) == 100:
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(head[28:32], "big")
        # The page count is only valid while the change counters at 24 and 92 agree.
        if head[24:28] == head[92:96] and pages * page_size > size:
            return f"{path.name} has {size} of the {pages * page_size} bytes its header declares"
    return None


@dataclass(frozen=True)
class StoredMessage:
    """One message read from a cut-off storage file."""

    topic: str
    msgtype: str
    t_ns: int
    raw: bytes


#: MCAP opcodes used when reading record by record
_MCAP_FOOTER, _MCAP_SCHEMA, _MCAP_CHANNEL, _MCAP_MESSAGE, _MCAP_CHUNK, _MCAP_DATA_END = (
    0x02,
    0x03,
    0x04,
    0x05,
    0x06,
    0x0F,
)
_MCAP_NAMES = {_MCAP_SCHEMA: "schema", _MCAP_CHANNEL: "channel", _MCAP_MESSAGE: "message"}


class _McapRecords:
    """Schemas and channels seen so far in an MCAP file, and its message records decoded."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.channels: dict[int, tuple[str, str]] = {}

    def message(self, op: int, body: bytes) -> StoredMessage | None:
        """The message of a record (schema and channel records are remembered instead)."""
        if op == _MCAP_SCHEMA:
            (key, length) = struct.unpack_from("<HI", body)
            self.schemas[key] = bytes(body[6 : 6 + length]).decode()
        elif op == _MCAP_CHANNEL:
            key, schema, length = struct.unpack_from("<HHI", body)
            topic = bytes(body[8 : 8 + length]).decode()
            self.channels[key] = (topic, self.schemas.get(schema, ""))
        elif op == _MCAP_MESSAGE:
            channel, _seq, log_time = struct.unpack_from("<HIQ", body)
            if channel in self.channels:
                topic, msgtype = self.channels[channel]
                return StoredMessage(topic, msgtype, log_time, bytes(body[22:]))
        return None

    def in_chunk(self, records: bytes) -> Generator[StoredMessage, None, int | None]:
        """Messages of a chunk's records; returns the offset of a record cut off by the end
        of ``records`` (None when they end on a record boundary)."""
        at, view = 0, memoryview(records)
        while at < len(view):
            if at + 9 > len(view):
                return at
            op, length = view[at], int.from_bytes(view[at + 1 : at + 9], "little")
            if at + 9 + length > len(view):
                return at
            msg = self.message(op, view[at + 9 : at + 9 + length])
            if msg is not None:
                yield msg
            at += 9 + length
        return None


def _mcap_chunk(body: bytes, whole: bool, at: int, path: Path) -> tuple[bytes, str | None]:
    """(a chunk record's uncompressed records, why reading must stop after them or None).
    A cut-off chunk keeps its complete records only when it is uncompressed."""
    from rosbags.rosbag2.storage_mcap import decompress

    size, crc, name_length = struct.unpack_from("<QII", body, 16)
    start = 40 + name_length
    if len(body) < start:
        return b"", f"{path.name} is cut off inside the header of the chunk at byte {at}"
    compression = bytes(body[32 : 32 + name_length]).decode()
    (length,) = struct.unpack_from("<Q", body, start - 8)
    records = body[start : start + length]
    if whole:
        try:
            return decompress(records, compression, size, crc), None
        except Exception as exc:  # each codec raises its own error type (ZstdError, ...)
            return b"", f"the chunk of {path.name} at byte {at} is corrupt ({exc})"
    cut = f"{path.name} is cut off inside the {compression or 'uncompressed'} chunk at byte {at}"
    if compression:
        return b"", cut + " (a cut compressed chunk cannot be read: its messages are lost)"
    return records, cut


def mcap_messages(path: Path) -> Generator[StoredMessage, None, str | None]:
    """The messages of an MCAP file read record by record from its start, without the summary
    at its end; returns where and why reading stopped early (None: the data section ended)."""
    state = _McapRecords()
    size = path.stat().st_size
    with open(path, "rb") as fh:
        fh.seek(len(MCAP_MAGIC))
        while True:
            at = fh.tell()
            head = fh.read(9)
            if len(head) < 9:
                return f"{path.name} ends at byte {at + len(head)}, before its data-end record"
            op, length = head[0], int.from_bytes(head[1:], "little")
            whole = at + 9 + length <= size
            if op in (_MCAP_DATA_END, _MCAP_FOOTER):
                return None
            if op != _MCAP_CHUNK and not whole:
                what = _MCAP_NAMES.get(op, f"0x{op:02x}")
                return (
                    f"{path.name} is cut off at byte {size} inside the {what} record that starts "
                    f"at byte {at} ({length} bytes long)"
                )
            body = fh.read(length if whole else size - at - 9)
            if op == _MCAP_CHUNK:
                if len(body) < 40:
                    return f"{path.name} is cut off inside the header of the chunk at byte {at}"
                records, why = _mcap_chunk(body, whole, at, path)
                cut = yield from state.in_chunk(records)
                if why is not None or cut is not None:
                    return why or f"the chunk of {path.name} at byte {at} ends inside a record"
            else:
                msg = state.message(op, body)
                if msg is not None:
                    yield msg


def sqlite_messages(path: Path) -> Generator[StoredMessage, None, str | None]:
    """The messages of a rosbag2 .db3 file in recording order, as far as its pages exist;
    returns where and why reading stopped early (None: every row was read)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    last = None
    try:
        # SQLite refuses a file shorter than its header says unless writable_schema is on;
        # with it, pages that exist are read and the first missing one raises.
        conn.execute("PRAGMA writable_schema=ON")
        topics = {
            row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, name, type FROM topics")
        }
        rows = conn.execute("SELECT id, topic_id, timestamp, data FROM messages ORDER BY id")
        for row_id, topic_id, t_ns, data in rows:
            if topic_id in topics:
                topic, msgtype = topics[topic_id]
                yield StoredMessage(topic, msgtype, int(t_ns), bytes(data))
            last = row_id
    except sqlite3.DatabaseError as exc:
        where = f"after message row {last}" if last is not None else "before its first message"
        return f"{path.name} breaks {where} ({exc})"
    finally:
        conn.close()
    return None


def salvaged_messages(files: list[Path]) -> Generator[StoredMessage, None, str | None]:
    """The messages of damaged storage files in order, up to the first break; returns where
    and why reading stopped (None: everything was read)."""
    for path in files:
        read = mcap_messages if path.suffix == ".mcap" else sqlite_messages
        stop = yield from read(path)
        if stop is not None:
            return stop
    return None


class ImageBag(ClosedOnExit):
    """An opened bag with its chosen image topic; iterate ``frames()`` in recording order.

    ``damage`` is None for an intact bag. For a cut-off bag (read record by record up to the
    break) it is set at open; for one that fails while being read, when ``frames()`` stops. It
    says how many frames could be read and where reading stopped.
    """

    def __init__(self, path: str | Path, topic: str | None = None) -> None:
        self.path = _bag_root(Path(path))
        if not self.path.exists():
            raise DataError(f"bag '{path}' does not exist; pass a rosbag2 folder or .mcap file")
        self.damage: str | None = None
        self._reader: object | None = None
        self._salvage: list[Path] = []
        files = storage_files(self.path)
        cuts = [why for file in files if (why := cut_off(file))]
        if cuts:
            self._salvage = files
            scan = _SalvageScan.of(files)
            topics, counts, span = scan.topics, scan.counts, scan.span_ns
        else:
            topics, counts, span = self._open_reader(path)
        images = {t: msgtype for t, msgtype in topics.items() if msgtype in IMAGE_TYPES}
        if not images and cuts:
            self.close()
            raise DataError(
                f"bag '{path}' is cut off ({'; '.join(cuts)}) before its first image frame, so "
                f"nothing can be replayed; reading stopped because {scan.stop}"
            )
        if not images:
            found = sorted(f"{t} ({msgtype})" for t, msgtype in topics.items())
            self.close()
            raise DataError(
                f"bag '{path}' has no sensor_msgs/Image or CompressedImage topic nor a video one "
                "(FFMPEGPacket, CompressedVideo) "
                f"(topics: {', '.join(found) or 'none'}); record the camera topic"
            )
        self.pick_note: str | None = None
        if topic is None:
            topic = self._pick(path, images)
        elif topic not in images:
            self.close()
            cameras = [t for t in sorted(images) if not is_depth_topic(t)]  # depth is not segmented
            raise DataError(
                f"topic '{topic}' is not an image topic of '{path}'; choose one of "
                f"{cameras} with --topic"
            )
        elif not is_depth_topic(topic):  # depth is read as metres (depth3d.py), not as an image
            why = self._unreadable(topic, images[topic])
            if why is not None:
                self.close()
                others = [t for t in sorted(images) if t != topic and not is_depth_topic(t)]
                raise DataError(
                    f"replay cannot decode the frames of '{topic}' in '{path}' ({why}); "
                    + (
                        f"pass --topic with another of {others}"
                        if others
                        else "convert the bag to a supported encoding (bgr8, jpeg, h264)"
                    )
                )
        self.topic = topic
        self.msgtype = images[topic]
        #: the decoder state of the latest pass over a video topic (None for still images)
        self.stream: VideoStream | None = None
        self.image_topics = sorted(images)
        #: every topic of the bag and its message type
        self.topic_types = dict(topics)
        self.count = counts[topic]
        self._duration_ns = span[1] - span[0] if span else 0
        infos = sorted(t for t, msgtype in topics.items() if msgtype == CAMERA_INFO)
        self.camera_info_topic = camera_info_for(topic, infos)
        if cuts:
            self.damage = (
                f"bag '{path}' is cut off ({'; '.join(cuts)}); read record by record up to the "
                f"break: {self.count} frames of {topic}, the last logged at "
                f"{scan.last_ns[topic]} ns; reading stopped "
                + (f"because {scan.stop}" if scan.stop else "at the end of the data")
            )

    def _pick(self, path: str | Path, images: dict[str, str]) -> str:
        """The topic replayed when none is named: one whose frames replay can decode, colour
        before depth (a depth image is not segmented), raw before compressed (no codec loss),
        then by name, so the choice is reproducible; ``pick_note`` says what was skipped."""
        order = sorted(images, key=lambda t: (is_depth_topic(t), images[t] != IMAGE, t))
        if len(order) == 1:
            return order[0]
        skipped: list[str] = []
        for topic in order:
            why = self._unreadable(topic, images[topic])
            if why is None:
                if skipped:
                    self.pick_note = (
                        f"replaying {topic}; skipped {', '.join(skipped)} "
                        "(pass --topic to choose another)"
                    )
                return topic
            skipped.append(f"{topic} ({why})")
        self.close()
        raise DataError(
            f"bag '{path}' has no image topic replay can decode: {'; '.join(skipped)}; convert "
            "one camera to a supported encoding (bgr8, jpeg, h264) or record it so"
        )

    def _first_message(self, topic: str, msgtype: str) -> object | None:
        """The first message of ``topic`` (deserialised), or None when it has none."""
        if self._salvage:
            stored = salvaged_messages(self._salvage)
            raw = next((m.raw for m in stored if m.topic == topic), None)
        else:
            conns = [c for c in self._reader.connections if c.topic == topic]
            raw = next((r for _, _, r in self._reader.messages(connections=conns)), None)
        return None if raw is None else typestore().deserialize_cdr(raw, msgtype)

    def _unreadable(self, topic: str, msgtype: str) -> str | None:
        """Why replay cannot decode ``topic``'s frames (read from its first message), or None."""
        msg = self._first_message(topic, msgtype)
        return None if msg is None else readable(msg, msgtype)

    def messages_of(self, topics: Iterable[str]) -> Iterator[tuple[str, str, int, bytes]]:
        """(topic, type, log time ns, CDR bytes) of every message on ``topics``, in log-time
        order (recording order in a cut-off bag)."""
        wanted = set(topics)
        if self._salvage:
            for m in salvaged_messages(self._salvage):
                if m.topic in wanted:
                    yield m.topic, m.msgtype, m.t_ns, bytes(m.raw)
            return
        conns = [c for c in self._reader.connections if c.topic in wanted]
        for conn, t_ns, raw in self._reader.messages(connections=conns) if conns else ():
            yield conn.topic, conn.msgtype, t_ns, bytes(raw)

    def camera_infos(self) -> list[tuple[int, bytes]]:
        """(header stamp ns, CDR bytes) of every message on ``camera_info_topic`` (none: [])."""
        if self.camera_info_topic is None:
            return []
        if self._salvage:
            stored = salvaged_messages(self._salvage)
            messages = [(m.msgtype, m.raw) for m in stored if m.topic == self.camera_info_topic]
        else:
            conns = [c for c in self._reader.connections if c.topic == self.camera_info_topic]
            messages = [(c.msgtype, raw) for c, _, raw in self._reader.messages(connections=conns)]
        return [
            (stamp_to_ns(typestore().deserialize_cdr(raw, msgtype).header.stamp), bytes(raw))
            for msgtype, raw in messages
        ]

    def _open_reader(self, path: str | Path) -> tuple[dict[str, str], Counter, tuple[int, int]]:
        """Open the bag with rosbags; (topic -> type, messages per topic, (start, end) ns)."""
        from rosbags.highlevel import AnyReader, AnyReaderError

        try:
            reader = AnyReader([self.path], default_typestore=typestore())
            reader.open()
        except (AnyReaderError, OSError, ValueError, KeyError) as exc:
            raise DataError(
                f"bag '{path}' cannot be read ({exc}); pass a rosbag2 folder (metadata.yaml + "
                ".db3 or .mcap) recorded by 'ros2 bag record'"
            ) from None
        self._reader = reader
        counts: Counter = Counter()
        for conn in reader.connections:
            counts[conn.topic] += conn.msgcount
        topics = {conn.topic: conn.msgtype for conn in reader.connections}
        return topics, counts, (0, reader.duration)

    @property
    def duration_s(self) -> float:
        """Recorded duration of the whole bag (of its readable part when cut off) in seconds."""
        return self._duration_ns / 1e9

    def frames(self) -> Iterator[BagFrame]:
        """The image messages of the chosen topic in log-time order (in recording order when
        the bag is cut off). Reading ends quietly where the bag breaks; ``damage`` says where."""
        if self._salvage:
            stored = salvaged_messages(self._salvage)
            messages = ((m.msgtype, m.t_ns, m.raw) for m in stored if m.topic == self.topic)
            yield from self._frames(messages)
            return
        reader = self._reader
        connections = [c for c in reader.connections if c.topic == self.topic]
        messages = (
            (c.msgtype, t_ns, raw) for c, t_ns, raw in reader.messages(connections=connections)
        )
        read = 0
        try:
            for frame in self._frames(messages):
                yield frame
                read += 1
        except Exception as exc:  # raised by the storage and codec libraries, each its own type
            self.damage = (
                f"bag '{self.path}' broke while being read, after {read} of {self.count} frames "
                f"of {self.topic} ({type(exc).__name__}: {exc})"
            )

    def decoded_frames(self) -> Iterator[BagFrame]:
        """``frames`` for processing: a video topic's packets go to the decoder in recorded
        (decode) order and each frame comes out when its picture does, carrying it (B-frames:
        presentation order, every picture with its own message's index and stamp; the decoder
        flushed at the end, each frame without a picture carrying why). Still images as
        ``frames``."""
        frames = self.frames()
        first = next(frames, None)
        if first is None or first.stream is None:  # no frames, or still images
            yield from itertools.chain([first], frames) if first is not None else ()
            return

        def packets() -> Iterator[tuple[BagFrame, object]]:
            for frame in itertools.chain([first], frames):
                msg = typestore().deserialize_cdr(frame.raw, frame.msgtype)
                yield frame, packet_of(msg, frame.msgtype)

        for outcome in decode_packets(packets(), first.stream):
            yield dataclasses.replace(outcome.tag, decoded=outcome)

    def _frames(self, messages: Iterable[tuple[str, int, bytes]]) -> Iterator[BagFrame]:
        # One decoder state per pass: a video frame depends on the frames before it.
        stream = VideoStream() if self.msgtype in VIDEO_TYPES else None
        self.stream = stream
        for index, (msgtype, t_ns, raw) in enumerate(messages):
            msg = typestore().deserialize_cdr(raw, msgtype)
            if msgtype in VIDEO_TYPES:
                stamp_ns, frame_id = stamp_of(msg, msgtype)
            else:
                stamp_ns, frame_id = stamp_to_ns(msg.header.stamp), msg.header.frame_id
            yield BagFrame(index, self.topic, msgtype, t_ns, stamp_ns, bytes(raw), frame_id, stream)

    def close(self) -> None:
        """Close the underlying reader."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None


@dataclass
class _SalvageScan:
    """What one pass over cut-off storage files found."""

    topics: dict[str, str] = field(default_factory=dict)  # topic -> message type
    counts: Counter = field(default_factory=Counter)  # messages per topic
    last_ns: dict[str, int] = field(default_factory=dict)  # last log time per topic
    span_ns: tuple[int, int] | None = None  # (first, last) log time of any message
    stop: str | None = None  # where and why reading stopped; None: the data ended

    @classmethod
    def of(cls, files: list[Path]) -> _SalvageScan:
        """Scan ``files`` to their first break."""
        scan = cls()
        messages = salvaged_messages(files)
        while True:
            try:
                msg = next(messages)
            except StopIteration as end:
                scan.stop = end.value
                return scan
            scan.topics.setdefault(msg.topic, msg.msgtype)
            scan.counts[msg.topic] += 1
            scan.last_ns[msg.topic] = msg.t_ns
            first, last = scan.span_ns or (msg.t_ns, msg.t_ns)
            scan.span_ns = (min(first, msg.t_ns), max(last, msg.t_ns))


def camera_name(image_topic: str) -> str:
    """A camera's name from its image topic: the last namespace element (``/cam_left/image_raw``
    -> ``cam_left``; a one-element topic is its own name), made a valid ROS name token."""
    parts = base_topic(image_topic).strip("/").split("/")
    name = re.sub(r"[^A-Za-z0-9_]", "_", parts[-2] if len(parts) > 1 else parts[-1])
    return name if name[:1].isalpha() else f"cam_{name}"


def base_topic(image_topic: str) -> str:
    """The image topic a transport topic belongs to (``/cam/image_raw/ffmpeg`` ->
    ``/cam/image_raw``): image_transport publishes ``<image topic>/<transport>``."""
    for suffix in TRANSPORT_SUFFIXES:
        if image_topic.endswith(suffix):
            return image_topic[: -len(suffix)]
    return image_topic


def is_depth_topic(topic: str) -> bool:
    """Whether an image topic carries depth, by its name: an element holding ``depth``
    (``/cam/depth/image_raw``, ``/cam/aligned_depth_to_color/image_raw``)."""
    return any("depth" in part for part in topic.lower().strip("/").split("/"))


def camera_info_for(image_topic: str, info_topics: list[str]) -> str | None:
    """The camera_info topic of ``image_topic``: the one in the same namespace (image_transport's
    layout, ``/cam/image_raw`` -> ``/cam/camera_info``), else the only one, else None."""
    base = base_topic(image_topic).rsplit("/", 1)[0]
    same = [t for t in info_topics if t.rsplit("/", 1)[0] == base]
    if same:
        return same[0]
    return info_topics[0] if len(info_topics) == 1 else None


def bag_hash(path: str | Path) -> str:
    """Short sha256 over the bag's files (names and bytes): identifies the input in reports."""
    root = _bag_root(Path(path))
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def image_message(
    image: np.ndarray, encoding: str, stamp_ns: int, frame_id: str = "camera"
) -> object:
    """sensor_msgs/Image (rosbags dataclass) for an HxWxC uint8 / uint16 / int32 array."""
    ts = typestore()
    image = np.ascontiguousarray(image)
    h, w = image.shape[:2]
    return ts.types[IMAGE](
        header=_header(stamp_ns, frame_id),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=image.nbytes // h,
        data=image.reshape(-1).view(np.uint8),
    )


def compressed_message(
    bgr: np.ndarray, stamp_ns: int, fmt: str = "png", frame_id: str = "camera"
) -> object:
    """sensor_msgs/CompressedImage (png or jpeg) of a bgr8 array."""
    ok, data = cv2.imencode(f".{fmt}", bgr)
    if not ok:
        raise InputError(f"cv2 could not encode the image as {fmt}")
    return typestore().types[COMPRESSED](
        header=_header(stamp_ns, frame_id), format=fmt, data=data.reshape(-1)
    )


def _header(stamp_ns: int, frame_id: str) -> object:
    ts = typestore()
    time = ts.types["builtin_interfaces/msg/Time"](
        sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000
    )
    return ts.types["std_msgs/msg/Header"](stamp=time, frame_id=frame_id)


class BagWriter(ClosedOnExit):
    """A rosbag2 writer that adds a connection per topic on first use (sqlite3 or mcap)."""

    def __init__(self, path: str | Path, storage: str = "mcap") -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
        if storage not in plugins:
            raise DataError(f"bag storage '{storage}' is unknown; choose mcap or sqlite3")
        self.path = Path(path)
        if self.path.exists():
            raise DataError(f"output bag '{self.path}' already exists; remove it or pick another")
        self._writer = Writer(self.path, version=8, storage_plugin=plugins[storage])
        self._writer.open()
        self._connections: dict[str, object] = {}

    def write(self, topic: str, msgtype: str, t_ns: int, message: object | bytes) -> None:
        """Append one message (a rosbags dataclass or raw CDR bytes) at log time ``t_ns``."""
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._writer.add_connection(topic, msgtype, typestore=typestore())
            self._connections[topic] = conn
        raw = message if isinstance(message, bytes) else typestore().serialize_cdr(message, msgtype)
        self._writer.write(conn, t_ns, raw)

    def close(self) -> None:
        """Finish the bag (writes metadata.yaml)."""
        self._writer.close()


def open_output_bag(path: Path) -> BagWriter:
    """A fresh output bag at ``path``; an earlier replay's output bag there is replaced."""
    if path.exists():
        if not (path / "metadata.yaml").is_file():
            raise DataError(f"'{path}' exists and is not a bag; pick another output bag path")
        shutil.rmtree(path)
    return BagWriter(path, storage="mcap")


def write_image_bag(
    path: str | Path,
    frames: Iterable[tuple[int, np.ndarray]],
    topic: str = "/camera/image_raw",
    storage: str = "mcap",
    compressed: str | None = None,
) -> Path:
    """Write (stamp_ns, bgr8 image) frames as Image (or CompressedImage in ``compressed`` format).

    The log time equals the header stamp, as when recording a camera on the same host.
    """
    return write_camera_bag(path, {topic: ("camera", frames)}, storage, compressed)


def write_camera_bag(
    path: str | Path,
    cameras: Mapping[str, tuple[str, Iterable[tuple[int, np.ndarray]]]],
    storage: str = "mcap",
    compressed: str | None = None,
) -> Path:
    """Write several cameras, ``{topic: (frame_id, (stamp_ns, bgr8 image) frames)}``, in one
    bag, interleaved by stamp (log time = header stamp, as ``write_image_bag``)."""

    def stream(order: int, topic: str, frame_id: str, frames: Iterable) -> Iterator[tuple]:
        for stamp, bgr in frames:
            yield stamp, order, topic, frame_id, bgr

    streams = [stream(k, topic, *camera) for k, (topic, camera) in enumerate(cameras.items())]
    with BagWriter(path, storage) as writer:
        for stamp_ns, _, topic, frame_id, bgr in heapq.merge(*streams, key=lambda f: f[:2]):
            if compressed:
                msg = compressed_message(bgr, stamp_ns, compressed, frame_id)
                msgtype = COMPRESSED
            else:
                msg, msgtype = image_message(bgr, "bgr8", stamp_ns, frame_id), IMAGE
            writer.write(topic, msgtype, stamp_ns, msg)
    return Path(path)


def video_message(
    data: bytes,
    keyframe: bool,
    pts: int,
    size: tuple[int, int],
    stamp_ns: int,
    msgtype: str = FFMPEG_PACKET,
    codec: str = "h264",
    frame_id: str = "camera",
) -> object:
    """An FFMPEGPacket or CompressedVideo (rosbags dataclass) holding one access unit of an
    (h, w) ``size`` stream, as ffmpeg_image_transport and Foxglove's bridge write them."""
    ts = typestore()
    payload = np.frombuffer(data, np.uint8)
    if msgtype == COMPRESSED_VIDEO:
        header = _header(stamp_ns, frame_id)
        return ts.types[COMPRESSED_VIDEO](
            timestamp=header.stamp,
            frame_id=frame_id,
            data=payload,
            format="h265" if codec == "hevc" else codec,
        )
    return ts.types[FFMPEG_PACKET](
        header=_header(stamp_ns, frame_id),
        width=size[1],
        height=size[0],
        encoding=f"{codec};yuv420p;bgr8;bgr8",
        pts=pts,
        flags=int(keyframe),
        is_bigendian=False,
        data=payload,
    )


def write_video_bag(
    path: str | Path,
    frames: Iterable[tuple[int, np.ndarray]],
    topic: str = "/camera/image_raw/ffmpeg",
    msgtype: str = FFMPEG_PACKET,
    encoder: str = "libx264",
    gop: int = 10,
    storage: str = "mcap",
    bframes: int = 0,
) -> Path:
    """Write (stamp_ns, bgr8 image) frames as an H.264 (libx264) or H.265 (libx265) stream of
    ``msgtype`` messages, one per frame (log time = header stamp, as ``write_image_bag``);
    ``bframes``: B-frames on, messages in decode order, each stamped with its frame's stamp
    and logged at the stamps in order (as a recorder receives them)."""
    return write_video_streams(path, {topic: frames}, msgtype, encoder, gop, storage, bframes)


def write_video_streams(
    path: str | Path,
    streams: dict[str, Iterable[tuple[int, np.ndarray]]],
    msgtype: str = FFMPEG_PACKET,
    encoder: str = "libx264",
    gop: int = 10,
    storage: str = "mcap",
    bframes: int = 0,
) -> Path:
    """One bag of several cameras' video: each topic of ``streams`` its own encoder's stream
    of its (stamp_ns, bgr8 image) frames, as ``write_video_bag`` writes one."""
    from ..video import encode

    codec = codec_of(encoder)
    with BagWriter(path, storage) as writer:
        for topic, frames in streams.items():
            stamped = list(frames)
            size = stamped[0][1].shape[:2] if stamped else (0, 0)
            units = encode((bgr for _, bgr in stamped), encoder, gop, bframes=bframes)
            # decode order: each message stamped as the frame it carries, logged as received
            # (in sending order, so a reader keeps the decode order)
            for sent, (data, key, pts) in enumerate(units):
                msg = video_message(data, key, pts, size, stamped[pts][0], msgtype, codec)
                writer.write(topic, msgtype, stamped[sent][0], msg)
    return Path(path)
