"""Bags recorded in every camera encoding cv_bridge converts (and nv12/nv21/nv24) replay: their
frames reach the pipeline as the node converts them, lossless encodings exactly as bgr8, and a
mono camera is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import make_scenes, scored_replay_argv
from rosbags.highlevel import AnyReader

from compactinst_ros.cli import main
from compactinst_ros.eval.bags import IMAGE, BagWriter, _header, image_from_message, typestore
from compactinst_ros.image_formats import encode_bgr8, mono_note, to_rgb

#: encoding -> largest |difference| from the bgr8 scene allowed after conversion (0: lossless)
ENCODINGS = {
    **{f"bayer_{p}{b}": 255 for p in ("rggb", "bggr", "gbrg", "grbg") for b in (8, 16)},
    **{e: 0 for e in ("rgb16", "bgr16", "rgba16", "bgra16", "8UC3", "8UC4")},
    "nv12": 255,
    "nv21": 255,
    "nv24": 4,  # BT.601 limited range rounds each way
    **{e: 255 for e in ("mono8", "mono16", "8UC1")},
}


def topic_of(encoding: str) -> str:
    return f"/{encoding.lower()}/image_raw"


@pytest.fixture(scope="module")
def encoding_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bag, one camera topic per encoding, the ``scenes`` fixture's scenes on each."""
    images = typestore().types[IMAGE]
    path = tmp_path_factory.mktemp("encodings") / "bag"
    with BagWriter(path, "mcap") as writer:
        for scene in make_scenes():
            h, w = scene.image.shape[:2]
            for encoding in ENCODINGS:
                data, step = encode_bgr8(scene.image, encoding)
                msg = images(
                    header=_header(scene.stamp_ns, "camera"),
                    height=h,
                    width=w,
                    encoding=encoding,
                    is_bigendian=0,
                    step=step,
                    data=np.frombuffer(data, np.uint8),
                )
                writer.write(topic_of(encoding), IMAGE, scene.stamp_ns, msg)
    return path


def test_every_encoding_reads_back_as_the_scene(encoding_bag: Path, scenes) -> None:
    """What replay hands the pipeline for each topic (``image_from_message``, which its frames
    decode with; read in one pass, as opening the bag per topic costs more than the frames):
    lossless encodings give the bgr8 scene, bayer and 4:2:0 chroma stay close to it on
    average, mono is its grey."""
    read: dict[str, list[np.ndarray]] = {}
    with AnyReader([encoding_bag], default_typestore=typestore()) as reader:
        for connection, _, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            image, encoding = image_from_message(msg, connection.msgtype)
            read.setdefault(connection.topic, []).append(to_rgb(image, encoding)[:, :, ::-1])
    assert sorted(read) == sorted(topic_of(e) for e in ENCODINGS)
    for encoding, worst in ENCODINGS.items():
        decoded = read[topic_of(encoding)]
        assert len(decoded) == len(scenes), encoding
        for bgr, scene in zip(decoded, scenes, strict=True):
            diff = np.abs(bgr.astype(int) - scene.image)
            assert diff.max() <= worst, (encoding, diff.max())
            if encoding.startswith(("bayer", "nv")):
                assert diff[2:-2, 2:-2].mean() < 12, (encoding, diff.mean())
            if encoding in ("mono8", "mono16", "8UC1"):
                assert (bgr == bgr[:, :, :1]).all(), encoding


def test_replay_scores_a_converted_camera_and_warns_of_mono(
    encoding_bag: Path, scenes, gt_files, random_bundle, tmp_path: Path, capsys
) -> None:
    """The whole replay on a converted topic (mono16: 16-bit samples, scaled on arrival):
    every frame processed and scored, and the low-accuracy warning on the command line and in
    the report, once."""
    encoding = "mono16"
    out = tmp_path / "out"
    argv = scored_replay_argv(
        encoding_bag, random_bundle, gt_files, out,
        "--topic", topic_of(encoding), "--overlays", "0", "--warmup", "0",
    )  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    block = report["modes"]["lockstep"]
    assert block["frames"] == {"total": len(scenes), "processed": len(scenes), "dropped": 0}
    assert block["accuracy"]["frames_evaluated"] == len(scenes)
    stderr = capsys.readouterr().err
    assert stderr.count("single-channel (mono)") == 1, stderr
    assert [w for w in report["warnings"] if "single-channel" in w] == [mono_note(encoding)]


def test_colour_encodings_are_not_warned_about() -> None:
    assert [e for e in ENCODINGS if mono_note(e)] == ["mono8", "mono16", "8UC1"]
