"""A recorded drive with bad frames: a lockstep replay skips each frame it cannot decode, names
it by index and stamp on stderr and in the report, scores every good frame, and exits 1 at the
end; a realtime replay whose node refuses more than --max-refused-pct of the frames exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import Scene, scored_replay_argv

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.cli import main
from compactinst_ros.errors import ConfigError
from compactinst_ros.eval.bags import COMPRESSED, BagWriter, compressed_message, typestore
from compactinst_ros.eval.replay import ReplayOptions, replay_status

BAD = 2  # the index of the corrupt frame


def corrupt_bag(scenes: list[Scene], path: Path) -> Path:
    """The scenes as JPEG CompressedImages, frame ``BAD``'s data replaced by garbage bytes."""
    with BagWriter(path, "mcap") as writer:
        for index, scene in enumerate(scenes):
            msg = compressed_message(scene.image, scene.stamp_ns, "jpeg", "camera")
            if index == BAD:
                msg = typestore().types[COMPRESSED](
                    header=msg.header, format="jpeg",
                    data=np.frombuffer(b"\x00garbage, not a JPEG" * 8, np.uint8),
                )  # fmt: skip
            writer.write("/camera/image_raw/compressed", COMPRESSED, scene.stamp_ns, msg)
    return path


def test_lockstep_skips_names_and_scores_the_rest_then_exits_1(
    scenes, gt_files, tmp_path, capsys
) -> None:
    bag = corrupt_bag(scenes, tmp_path / "bag")
    out = tmp_path / "out"
    argv = scored_replay_argv(bag, default_bundle_path(), gt_files, out)
    assert main(argv) == 1
    err = capsys.readouterr().err
    stamp = scenes[BAD].stamp_ns
    assert f"skipped frame {BAD} (stamp {stamp // 10**9}.{stamp % 10**9:09d})" in err
    assert "format says 'jpeg' but the data is" in err and "Traceback" not in err
    assert f"skipped frames {BAD}" in err  # the closing warning
    report = json.loads((out / "report.json").read_text())
    block = report["modes"]["lockstep"]
    assert block["frames"] == {"total": len(scenes), "processed": len(scenes) - 1,
                               "dropped": 0, "skipped": 1}  # fmt: skip
    (skipped,) = block["skipped_frames"]
    assert skipped["index"] == BAD and skipped["stamp_ns"] == stamp
    assert "jpeg" in skipped["reason"]
    assert block["accuracy"]["frames_evaluated"] == len(scenes) - 1


def test_realtime_fails_when_the_node_refused_more_than_the_share() -> None:
    """The exit rule on the report a realtime replay writes (the node's refusals come back
    as ``node_refused`` from its diagnostics, test_eval_realtime.py)."""

    def report(refused: int, sent: int = 12) -> dict:
        frames = {"sent": sent, "processed": sent - refused, "dropped": refused,
                  "node_refused": refused}  # fmt: skip
        return {"modes": {"realtime": {"frames": frames, "notes": ["the node refused ..."]}}}

    assert replay_status(report(1)) == 0  # 8 %: within the default 10 %
    assert replay_status(report(11)) == 1  # 11 of 12: the headline measures one frame
    assert replay_status(report(1), max_refused_pct=5) == 1
    assert replay_status(report(0), max_refused_pct=0) == 0
    with pytest.raises(ConfigError, match=r"--max-refused-pct 120 must be 0\.\.100"):
        ReplayOptions(model=default_bundle_path(), bag=Path("x"), max_refused_pct=120)


def test_a_warmup_longer_than_the_bag_says_how_few_frames_the_latency_rests_on(
    scenes, gt_files, tmp_path
) -> None:
    bag = corrupt_bag(scenes, tmp_path / "bag")
    out = tmp_path / "out"
    main(scored_replay_argv(bag, default_bundle_path(), gt_files, out, "--warmup", "100"))
    block = json.loads((out / "report.json").read_text())["modes"]["lockstep"]
    processed = len(scenes) - 1
    assert block["warmup_frames"] == processed - 1
    said = f"--warmup 100 is not below the {processed} frames processed"
    notes = [note for note in block["notes"] if said in note]
    assert notes and "rest on 1 frame(s)" in notes[0], block["notes"]


def test_an_unknown_topic_suggests_camera_topics_not_depth(tmp_path) -> None:
    from compactinst_ros.errors import DataError
    from compactinst_ros.eval.bags import ImageBag
    from compactinst_ros.spatial import Intrinsics
    from compactinst_ros.train.synthetic_depth import write_depth_bag

    bgr = np.zeros((8, 8, 3), np.uint8)
    depth = np.full((8, 8), 1000, np.uint16)
    k = Intrinsics(fx=8.0, fy=8.0, cx=4.0, cy=4.0, width=8, height=8)
    write_depth_bag(tmp_path / "bag", {"cam": [(10**9, bgr, depth)]}, k, "16UC1")
    with pytest.raises(DataError, match=r"choose one of \['/cam/image_raw'\] with --topic"):
        ImageBag(tmp_path / "bag", topic="/nope")
