"""Synthetic videos: objects move, enter, leave and cross, each with one track id throughout."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from compactinst_ros.cli import main
from compactinst_ros.coco import rgb_to_id
from compactinst_ros.errors import ConfigError
from compactinst_ros.train.synthetic import (
    TRACKS_PER_VIDEO,
    generate,
    render_sequence,
)


def _centres(frames) -> dict[int, dict[int, float]]:
    """track id -> {frame: mask centre x} over a rendered sequence."""
    tracks: dict[int, dict[int, float]] = {}
    for f, scene in enumerate(frames):
        for seg in scene.segments:
            if seg["isthing"]:
                xs = np.nonzero(scene.panoptic == seg["id"])[1]
                tracks.setdefault(seg["track_id"], {})[f] = float(xs.mean())
    return tracks


def test_sequences_move_enter_leave_and_cross():
    moved = entered = left = crossed = 0
    for index in range(4):
        frames = render_sequence(0, index, 20, 128, 192)
        assert all(s["isthing"] == ("track_id" in s) for sc in frames for s in sc.segments)
        tracks = _centres(frames)
        moved += sum(max(c.values()) - min(c.values()) > 5 for c in tracks.values())
        entered += sum(min(c) > 0 for c in tracks.values())
        left += sum(max(c) < len(frames) - 1 for c in tracks.values())
        for a, ca in tracks.items():
            for b, cb in tracks.items():
                both = sorted(set(ca) & set(cb))
                if a < b and both and ca[both[0]] < cb[both[0]] and ca[both[-1]] > cb[both[-1]]:
                    crossed += 1
    assert moved >= 8 and entered >= 2 and left >= 2 and crossed >= 2


def test_sequence_is_deterministic_and_checked():
    a, b = render_sequence(4, 1, 3, 64, 96), render_sequence(4, 1, 3, 64, 96)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.image, y.image)
        np.testing.assert_array_equal(x.panoptic, y.panoptic)
        assert x.segments == y.segments
    with pytest.raises(ConfigError, match="at least one frame"):
        render_sequence(0, 0, 0, 64, 96)


def test_generate_writes_videos_with_track_ids(tmp_path):
    assert (
        main(
            [
                "synth",
                "--out",
                str(tmp_path),
                "--num",
                "7",
                "--seed",
                "2",
                "--size",
                "96x128",
                "--sequence",
                "4",
            ]
        )
        == 0
    )
    inst = json.loads((tmp_path / "instances.json").read_text())
    pan = json.loads((tmp_path / "panoptic.json").read_text())
    assert (
        inst["videos"]
        == pan["videos"]
        == [{"id": 1, "name": "000001"}, {"id": 2, "name": "000002"}]
    )
    assert [(i["video_id"], i["frame_index"]) for i in inst["images"]] == [
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 0),
        (2, 1),
        (2, 2),
    ]  # the last video is shorter
    rendered = render_sequence(2, 0, 4, 96, 128) + render_sequence(2, 1, 3, 96, 128)
    by_image: dict[int, list[dict]] = {}
    for ann in inst["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    for img, pan_ann, scene in zip(inst["images"], pan["annotations"], rendered, strict=True):
        ids = rgb_to_id(cv2.imread(str(tmp_path / "panoptic" / pan_ann["file_name"]))[..., ::-1])
        np.testing.assert_array_equal(ids, scene.panoptic)
        things = [s for s in pan_ann["segments_info"] if "track_id" in s]
        anns = by_image.get(img["id"], [])
        assert [a["track_id"] for a in anns] == [s["track_id"] for s in things]
        assert len({a["track_id"] for a in anns}) == len(anns)
        for ann, seg, local in zip(
            anns, things, [s for s in scene.segments if s["isthing"]], strict=True
        ):
            assert ann["track_id"] == img["video_id"] * TRACKS_PER_VIDEO + local["track_id"]
            decoded = mask_utils.decode(ann["segmentation"]).astype(bool)
            np.testing.assert_array_equal(decoded, ids == seg["id"])


def test_single_scenes_have_no_video_fields(tmp_path):
    generate(tmp_path, 2, 0, 64, 96, progress=False)
    inst = json.loads((tmp_path / "instances.json").read_text())
    assert "videos" not in inst and all("video_id" not in i for i in inst["images"])
    assert all("track_id" not in a for a in inst["annotations"])
    with pytest.raises(ConfigError, match="sequence"):
        generate(tmp_path, 2, 0, 64, 96, progress=False, sequence=-1)


def test_synth_does_not_overwrite_a_data_set(tmp_path, capsys):
    (tmp_path / "panoptic.json").write_text("{}")
    assert main(["synth", "--out", str(tmp_path), "--num", "1", "--size", "64x64"]) == 2
    assert "panoptic.json exists" in capsys.readouterr().err
    assert (tmp_path / "panoptic.json").read_text() == "{}"
