"""Replay of a ``synth --sequence`` video bag: lockstep runs with track ids and the report counts
their id switches against the ground truth's ``track_id``s; ground truth without them adds none."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.eval.bags import write_image_bag
from compactinst_ros.eval.replay import ReplayOptions, replay
from compactinst_ros.eval.report import summary_text
from compactinst_ros.train.synthetic import generate

pytest.importorskip("pycocotools")
pytest.importorskip("rosbags")
FRAMES = 8
T0, PERIOD_NS = 1_700_000_000_000_000_000, 100_000_000


@pytest.fixture(scope="module")
def video_bag(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(bag of one synthetic video, its synth output folder with track ids)."""
    root = tmp_path_factory.mktemp("video")
    data = root / "data"
    generate(data, FRAMES, 1, 256, 384, progress=False, sequence=FRAMES)
    images = json.loads((data / "panoptic.json").read_text())["images"]
    frames = [
        (T0 + i * PERIOD_NS, cv2.imread(str(data / "images" / img["file_name"])))
        for i, img in enumerate(images)
    ]
    return write_image_bag(root / "bag", frames), data


def _replay(bag: Path, data: Path, panoptic: Path, out: Path) -> dict:
    options = ReplayOptions(
        bag=bag,
        model=default_bundle_path(),
        backend="onnxruntime",
        gt_instances=data / "instances.json",
        gt_panoptic=panoptic,
        gt_panoptic_dir=data / "panoptic",
        match="index",
        out=out,
        overlays=0,
        plots=False,
        progress=False,
    )
    return replay(options)["modes"]["lockstep"]


def test_replay_reports_id_switches_of_a_video(video_bag, tmp_path) -> None:
    bag, data = video_bag
    block = _replay(bag, data, data / "panoptic.json", tmp_path / "tracked")
    counts = block["accuracy"]["tracking"]
    print(counts)
    assert counts["gt_objects"] > 2 * FRAMES and counts["matches"] > 0.8 * counts["gt_objects"]
    assert counts["id_switches"] == 0  # the lockstep pipeline tracks: ids persist
    report = json.loads((tmp_path / "tracked" / "report.json").read_text())
    assert "id switches 0" in summary_text(report)
    assert "| id switches | 0 |" in (tmp_path / "tracked" / "report.md").read_text()


def test_ground_truth_without_track_ids_reports_no_tracking(video_bag, tmp_path) -> None:
    bag, data = video_bag
    panoptic = json.loads((data / "panoptic.json").read_text())
    for ann in panoptic["annotations"]:
        for segment in ann["segments_info"]:
            segment.pop("track_id", None)
    plain = tmp_path / "panoptic.json"
    plain.write_text(json.dumps(panoptic))
    block = _replay(bag, data, plain, tmp_path / "plain")
    assert "tracking" not in block["accuracy"] and block["accuracy"]["panoptic"] is not None
