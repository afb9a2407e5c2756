"""ROS 2 bag I/O without a ROS install (rosbags): image frames in, node outputs out.

Reads sqlite3 and mcap rosbag2 bags through ``AnyReader`` with the kilted typestore (older bags
carry no message definitions). Image and CompressedImage topics are detected by type.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import cv2
import numpy as np

from ..errors import DataError, InputError
from ..image_formats import array_from_buffer

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
IMAGE_TYPES = (IMAGE, COMPRESSED)
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
JOINT_STATE = "sensor_msgs/msg/JointState"
#: Namespace of the node's output topics, as recorded in output bags (the node's default).
OUTPUT_NS = "/compactinst"
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
    """The ROS 2 Kilted typestore (same CDR as Humble for the message types used here)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


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

    def decode(self) -> tuple[np.ndarray, str]:
        """HxWxC uint8 array and its ROS encoding (CompressedImage decodes to bgr8 / mono8)."""
        msg = typestore().deserialize_cdr(self.raw, self.msgtype)
        return image_from_message(msg, self.msgtype)


def image_from_message(msg: object, msgtype: str) -> tuple[np.ndarray, str]:
    """Array and encoding of a deserialised Image or CompressedImage message."""
    if msgtype == COMPRESSED:
        data = np.asarray(msg.data, np.uint8)
        image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
        if image is None:
            raise InputError(
                f"CompressedImage (format '{msg.format}') could not be decoded; record jpeg or png"
            )
        if image.ndim == 2:
            return image[:, :, None], "mono8"
        return image, "bgr8" if image.shape[2] == 3 else "bgra8"
    encoding = str(msg.encoding)
    image = array_from_buffer(msg.data, int(msg.height), int(msg.width), int(msg.step), encoding)
    return image, encoding


def stamp_to_ns(stamp: object) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _bag_root(path: Path) -> Path:
    """A rosbag2 folder for ``path`` (a storage file inside one resolves to its folder)."""
    if path.is_file() and (path.parent / "metadata.yaml").is_file():
        return path.parent
    return path


class ImageBag(ClosedOnExit):
    """An opened bag with its chosen image topic; iterate ``frames()`` in recording order."""

    def __init__(self, path: str | Path, topic: str | None = None) -> None:
        from rosbags.highlevel import AnyReader, AnyReaderError

        self.path = _bag_root(Path(path))
        if not self.path.exists():
            raise DataError(f"bag '{path}' does not exist; pass a rosbag2 folder or .mcap file")
        try:
            self._reader = AnyReader([self.path], default_typestore=typestore())
            self._reader.open()
        except (AnyReaderError, OSError, ValueError, KeyError) as exc:
            raise DataError(
                f"bag '{path}' cannot be read ({exc}); pass a rosbag2 folder (metadata.yaml + "
                ".db3 or .mcap) recorded by 'ros2 bag record'"
            ) from None
        images = {c.topic: c.msgtype for c in self._reader.connections if c.msgtype in IMAGE_TYPES}
        if not images:
            found = sorted({f"{c.topic} ({c.msgtype})" for c in self._reader.connections})
            self.close()
            raise DataError(
                f"bag '{path}' has no sensor_msgs/Image or CompressedImage topic "
                f"(topics: {', '.join(found) or 'none'}); record the camera topic"
            )
        if topic is None:
            # Raw images first (no codec loss), then by name, so the choice is reproducible.
            topic = sorted(images, key=lambda t: (images[t] != IMAGE, t))[0]
        elif topic not in images:
            self.close()
            raise DataError(
                f"topic '{topic}' is not an image topic of '{path}'; choose one of {sorted(images)}"
            )
        self.topic = topic
        self.msgtype = images[topic]
        self.image_topics = sorted(images)
        self._connections = [c for c in self._reader.connections if c.topic == topic]
        self.count = sum(c.msgcount for c in self._connections)
        infos = sorted({c.topic for c in self._reader.connections if c.msgtype == CAMERA_INFO})
        self.camera_info_topic = camera_info_for(topic, infos)

    def camera_infos(self) -> list[tuple[int, bytes]]:
        """(header stamp ns, CDR bytes) of every message on ``camera_info_topic`` (none: [])."""
        if self.camera_info_topic is None:
            return []
        conns = [c for c in self._reader.connections if c.topic == self.camera_info_topic]
        return [
            (stamp_to_ns(self._reader.deserialize(raw, conn.msgtype).header.stamp), bytes(raw))
            for conn, _, raw in self._reader.messages(connections=conns)
        ]

    @property
    def duration_s(self) -> float:
        """Recorded duration of the whole bag in seconds."""
        return self._reader.duration / 1e9

    def frames(self) -> Iterator[BagFrame]:
        """The image messages of the chosen topic in log-time order."""
        from rosbags.highlevel import AnyReaderError

        try:
            for index, (conn, t_ns, raw) in enumerate(
                self._reader.messages(connections=self._connections)
            ):
                msg = self._reader.deserialize(raw, conn.msgtype)
                yield BagFrame(
                    index,
                    self.topic,
                    conn.msgtype,
                    t_ns,
                    stamp_to_ns(msg.header.stamp),
                    bytes(raw),
                    msg.header.frame_id,
                )
        except (AnyReaderError, OSError) as exc:
            raise DataError(f"bag '{self.path}' is corrupt while reading ({exc})") from None

    def close(self) -> None:
        """Close the underlying reader."""
        self._reader.close()


def camera_info_for(image_topic: str, info_topics: list[str]) -> str | None:
    """The camera_info topic of ``image_topic``: the one in the same namespace (image_transport's
    layout, ``/cam/image_raw`` -> ``/cam/camera_info``), else the only one, else None."""
    base = image_topic.removesuffix("/compressed").rsplit("/", 1)[0]
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


def default_output_bag(bag: str | Path) -> Path:
    """``<bag>_compactinst`` next to the input bag folder."""
    path = Path(bag)
    if path.is_file():
        path = path.parent if (path.parent / "metadata.yaml").is_file() else path.with_suffix("")
    return path.with_name(path.name + "_compactinst")


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
    with BagWriter(path, storage) as writer:
        for stamp_ns, bgr in frames:
            if compressed:
                msg, msgtype = compressed_message(bgr, stamp_ns, compressed), COMPRESSED
            else:
                msg, msgtype = image_message(bgr, "bgr8", stamp_ns), IMAGE
            writer.write(topic, msgtype, stamp_ns, msg)
    return Path(path)
