"""Cut-off bags (a recorder killed mid-write, a partial copy): the frames before the break are
read and replayed, and the report says how many and where reading stopped, without a traceback.
Also: compressed frames in a bag are checked and decoded as the node does."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.cli import main
from compactinst_ros.errors import DataError, InputError
from compactinst_ros.eval.bags import (
    COMPRESSED,
    BagWriter,
    ImageBag,
    image_message,
    typestore,
    write_image_bag,
)

T0 = 1_700_000_000_000_000_000
FRAMES = 12


def noisy_frames(n: int = FRAMES, h: int = 48, w: int = 64) -> list[tuple[int, np.ndarray]]:
    """(stamp_ns, bgr8) frames of random pixels at 10 Hz: distinct and incompressible."""
    rng = np.random.default_rng(7)
    return [(T0 + i * 100_000_000, rng.integers(0, 256, (h, w, 3), np.uint8)) for i in range(n)]


def storage_file(bag: Path) -> Path:
    """The one .mcap or .db3 file of a bag folder."""
    return next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3"))


def cut(bag: Path, fraction: float) -> Path:
    """Keep the first ``fraction`` of the bag's storage file, as a killed recorder leaves it."""
    path = storage_file(bag)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_cut_off_bag_reads_the_frames_before_the_break(tmp_path, storage) -> None:
    frames = noisy_frames()
    bag = write_image_bag(tmp_path / "bag", frames, storage=storage)
    file = cut(bag, 0.6)
    with ImageBag(bag) as opened:
        assert 0 < opened.count < FRAMES
        read = list(opened.frames())
        damage = opened.damage
    assert len(read) == opened.count
    for frame, (stamp, pixels) in zip(read, frames, strict=False):
        assert frame.stamp_ns == stamp
        image, encoding = frame.decode()
        assert encoding == "bgr8"
        np.testing.assert_array_equal(image, pixels)
    assert damage is not None
    assert f"cut off ({file.name}" in damage
    assert f"{len(read)} frames of /camera/image_raw" in damage
    assert f"the last logged at {frames[len(read) - 1][0]} ns" in damage
    assert "reading stopped because" in damage and file.name in damage.split("stopped")[1]


def test_intact_bag_has_no_damage(tmp_path) -> None:
    bag = write_image_bag(tmp_path / "bag", noisy_frames(3), storage="mcap")
    with ImageBag(bag) as opened:
        assert len(list(opened.frames())) == 3
        assert opened.damage is None


def zstd_bag(path: Path, frames: list[tuple[int, np.ndarray]]) -> Path:
    """An mcap bag with zstd-compressed chunks (rosbags closes a chunk after 1 MiB, so 256x384
    frames make several chunks)."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

    writer = Writer(path, version=8, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    writer.open()
    conn = writer.add_connection("/cam", "sensor_msgs/msg/Image", typestore=typestore())
    for stamp, pixels in frames:
        raw = typestore().serialize_cdr(image_message(pixels, "bgr8", stamp), conn.msgtype)
        writer.write(conn, stamp, raw)
    writer.close()
    return path


def test_cut_compressed_mcap_keeps_its_complete_chunks(tmp_path) -> None:
    """A zstd chunk cut in two cannot be read; the chunks before it are."""
    frames = noisy_frames(10, 256, 384)
    path = zstd_bag(tmp_path / "zstd", frames)
    cut(path, 0.7)
    with ImageBag(path) as opened:
        read = list(opened.frames())
        assert 0 < len(read) < 10 and len(read) == opened.count
        assert "zstd chunk" in opened.damage and "messages are lost" in opened.damage
    image, _ = read[-1].decode()
    np.testing.assert_array_equal(image, frames[len(read) - 1][1])


def test_bag_that_breaks_while_being_read_stops_at_the_break(tmp_path, capsys) -> None:
    """An intact file whose second chunk is garbage: the index opens, reading stops at the
    chunk, and the replay counts the frames after it as unread."""
    frames = noisy_frames(10, 256, 384)
    path = zstd_bag(tmp_path / "zstd", frames)
    file = storage_file(path)
    data = bytearray(file.read_bytes())
    second = data.index(b"\x28\xb5\x2f\xfd", data.index(b"\x28\xb5\x2f\xfd") + 1)
    data[second : second + 4] = b"XXXX"  # the zstd frame magic of the second chunk
    file.write_bytes(bytes(data))
    with ImageBag(path) as opened:
        assert opened.damage is None and opened.count == 10
        read = list(opened.frames())
        assert 0 < len(read) < 10
        assert f"broke while being read, after {len(read)} of 10 frames" in opened.damage
    out = tmp_path / "out"
    assert main(replay_args(path, out)) == 0
    assert "Traceback" not in capsys.readouterr().err
    lockstep = json.loads((out / "report.json").read_text())["modes"]["lockstep"]
    assert lockstep["frames"] == {
        "total": 10,
        "processed": len(read),
        "dropped": 0,
        "unread": 10 - len(read),
    }
    assert "broke while being read" in lockstep["notes"][0]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_cut_before_its_first_frame_is_a_clear_error(tmp_path, storage) -> None:
    bag = write_image_bag(tmp_path / "bag", noisy_frames(), storage=storage)
    cut(bag, 0.02)
    with pytest.raises(DataError, match=r"cut off .* before its first image frame"):
        ImageBag(bag)


def replay_args(bag: Path, out: Path, mode: str = "lockstep") -> list[str]:
    """``compactinst replay`` of ``bag`` with the shipped default model on ONNX Runtime."""
    return [
        "replay",
        str(bag),
        "--model",
        str(default_bundle_path()),
        "--backend",
        "onnxruntime",
        "--mode",
        mode,
        "--out",
        str(out),
        "--warmup",
        "0",
        "--rate",
        "5",
        "--no-plots",
        "--quiet",
        "--overlays",
        "0",
    ]


@pytest.mark.parametrize(("storage", "mode"), [("sqlite3", "lockstep"), ("mcap", "both")])
def test_replay_of_a_cut_off_bag_reports_what_it_read(tmp_path, capsys, storage, mode) -> None:
    bag = write_image_bag(tmp_path / "bag", noisy_frames(), storage=storage)
    cut(bag, 0.6)
    out = tmp_path / "out"
    assert main(replay_args(bag, out, mode)) == 0
    printed = capsys.readouterr()
    assert "Traceback" not in printed.out + printed.err
    report = json.loads((out / "report.json").read_text())
    readable = report["bag"]["frames"]
    assert 0 < readable < FRAMES
    damage = report["bag"]["damage"]
    assert f"{readable} frames of /camera/image_raw" in damage and "stopped because" in damage
    assert f"warning: {damage}" in printed.out
    lockstep = report["modes"]["lockstep"]
    assert lockstep["frames"] == {"total": readable, "processed": readable, "dropped": 0}
    assert lockstep["notes"][0] == damage
    assert f"cut off ({storage_file(bag).name}" in (out / "report.md").read_text()
    if mode == "both":
        realtime = report["modes"]["realtime"]
        assert realtime["frames"]["sent"] == readable
        assert realtime["notes"][0] == damage


def test_replay_of_a_bag_cut_before_any_frame_exits_1_without_traceback(tmp_path, capsys) -> None:
    bag = write_image_bag(tmp_path / "bag", noisy_frames(), storage="mcap")
    cut(bag, 0.02)
    assert main(replay_args(bag, tmp_path / "out")) == 1
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    assert "error: bag" in printed.err and "before its first image frame" in printed.err


def compressed_bag(path: Path, fmt: str, data: bytes) -> Path:
    """A one-frame CompressedImage bag whose ``format`` field says ``fmt``."""
    msg = typestore().types[COMPRESSED](
        header=typestore().types["std_msgs/msg/Header"](
            stamp=typestore().types["builtin_interfaces/msg/Time"](sec=1, nanosec=0),
            frame_id="camera",
        ),
        format=fmt,
        data=np.frombuffer(data, np.uint8),
    )
    with BagWriter(path, "mcap") as writer:
        writer.write("/cam/compressed", COMPRESSED, T0, msg)
    return path


def test_compressed_frames_are_checked_before_decoding_as_in_the_node(tmp_path) -> None:
    pixels = noisy_frames(1)[0][1]
    jpeg = cv2.imencode(".jpg", pixels)[1].tobytes()
    mislabelled = compressed_bag(tmp_path / "mislabelled", "png", jpeg)
    with ImageBag(mislabelled) as bag:
        frame = next(bag.frames())
        with pytest.raises(InputError, match=r"format says 'png' but the data is jpeg"):
            frame.decode()
    grey = cv2.imencode(".png", pixels[:, :, 0])[1].tobytes()
    with ImageBag(compressed_bag(tmp_path / "grey", "png", grey)) as bag:
        image, encoding = next(bag.frames()).decode()
    assert encoding == "bgr8" and image.shape == (*pixels.shape[:2], 3)
    np.testing.assert_array_equal(image[:, :, 1], pixels[:, :, 0])
