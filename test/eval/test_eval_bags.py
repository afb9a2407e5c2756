"""Bag I/O: sqlite3 and mcap round trips, topic detection and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from eval_helpers import scene_bag

from compactinst_ros.errors import DataError
from compactinst_ros.eval.bags import (
    COMPRESSED,
    IMAGE,
    BagWriter,
    ImageBag,
    bag_hash,
    compressed_message,
    image_message,
    typestore,
)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
@pytest.mark.parametrize("compressed", [None, "png"])
def test_round_trip(scenes, tmp_path, storage, compressed) -> None:
    path = scene_bag(scenes, tmp_path / "bag", storage, compressed)
    with ImageBag(path) as bag:
        assert bag.msgtype == (COMPRESSED if compressed else IMAGE)
        assert bag.count == len(scenes)
        frames = list(bag.frames())
    assert [f.stamp_ns for f in frames] == [s.stamp_ns for s in scenes]
    for frame, scene in zip(frames, scenes, strict=True):
        image, encoding = frame.decode()
        assert encoding == "bgr8"
        np.testing.assert_array_equal(image, scene.image)
    assert bag_hash(path) == bag_hash(path)


def test_raw_topic_preferred_and_explicit_choice(scenes, tmp_path) -> None:
    ts = typestore()
    path = tmp_path / "two"
    with BagWriter(path, "mcap") as w:
        for s in scenes:
            w.write(
                "/a/compressed", COMPRESSED, s.stamp_ns, compressed_message(s.image, s.stamp_ns)
            )
            w.write("/b/image_raw", IMAGE, s.stamp_ns, image_message(s.image, "bgr8", s.stamp_ns))
            w.write(
                "/chatter",
                "std_msgs/msg/String",
                s.stamp_ns,
                ts.types["std_msgs/msg/String"](data="hi"),
            )
    with ImageBag(path) as bag:
        assert bag.topic == "/b/image_raw"
        assert bag.image_topics == ["/a/compressed", "/b/image_raw"]
    with ImageBag(path, "/a/compressed") as bag:
        assert bag.msgtype == COMPRESSED
    with pytest.raises(DataError, match=r"not an image topic.*choose one of"):
        ImageBag(path, "/chatter")


def test_bag_without_image_topic_is_a_clear_error(tmp_path) -> None:
    ts = typestore()
    with BagWriter(tmp_path / "noimg", "sqlite3") as w:
        w.write("/chatter", "std_msgs/msg/String", 1, ts.types["std_msgs/msg/String"](data="x"))
    with pytest.raises(DataError, match=r"no sensor_msgs/Image or CompressedImage topic.*/chatter"):
        ImageBag(tmp_path / "noimg")


@pytest.mark.parametrize("kind", ["missing", "garbage_dir", "garbage_file"])
def test_unreadable_bag_is_a_clear_error(tmp_path, kind) -> None:
    path = tmp_path / "bad"
    if kind == "garbage_dir":
        path.mkdir()
        (path / "metadata.yaml").write_text("rosbag2_bagfile_information: [not, a, bag")
    elif kind == "garbage_file":
        path = tmp_path / "bad.mcap"
        path.write_bytes(b"\x00not an mcap file at all" * 10)
    with pytest.raises(DataError, match=r"bag .*(does not exist|cannot be read)"):
        ImageBag(path)
