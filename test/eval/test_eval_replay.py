"""Lockstep replay through the real ONNX Runtime pipeline on tiny sqlite3 and mcap bags."""

from __future__ import annotations

import argparse
import json

import pytest
from eval_helpers import oracle_result, scene_bag, scored_replay_argv

from compactinst_ros.cli import main
from compactinst_ros.errors import ConfigError
from compactinst_ros.eval.bags import ImageBag, typestore
from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.eval.replay import add_arguments, options_from_args, run_lockstep
from compactinst_ros.eval.report import summary_text


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_lockstep_replay_writes_report(
    scenes, gt_files, random_bundle, tmp_path, storage, capsys
) -> None:
    bag = scene_bag(scenes, tmp_path / "bag", storage)
    out = tmp_path / "out"
    args = scored_replay_argv(
        bag, random_bundle, gt_files, out, "--output-bag", "--warmup", "1", "--overlays", "2"
    )
    assert main(args) == 0
    captured = capsys.readouterr()
    printed = captured.out
    report = json.loads((out / "report.json").read_text())
    # which backend and precision run, and what runs the per-pixel loops, said as it starts
    started = f"model {report['model']['model']} [{report['model']['model_fingerprint']}] on "
    assert f"replay: {started}onnxruntime (cpu, fp32); per-pixel loops: " in captured.err
    assert report["output_bag"] == str(out / "output_bag")  # under --out, not next to the bag
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bag", "gt", "out"]
    written = [out / "report.md", out / "report.json", out / "output_bag"]
    written += [out / p for p in report["plots"]] + list((out / "overlays").glob("*.png"))
    assert all(str(path) in printed for path in written), printed
    block = report["modes"]["lockstep"]
    assert block["frames"] == {"total": 4, "processed": 4, "dropped": 0}
    assert block["accuracy"]["frames_evaluated"] == 4
    assert set(block["accuracy"]["mask_ap"]) == {"AP", "AP50", "AP75", "APs", "APm", "APl"}
    assert block["accuracy"]["panoptic"]["all"]["n"] > 0
    for stage in ("decode", "preprocess", "encoder", "decoder", "postprocess", "inference"):
        assert block["latency"][stage]["count"] == 3
        assert block["latency"][stage]["p50"] <= block["latency"][stage]["p99"]
    assert report["bag"]["hash"] and report["model"]["model_fingerprint"]
    assert report["model"]["backend"] == "onnxruntime"
    assert sorted(report["plots"]) == [
        "accuracy_by_size.png",
        "latency_breakdown.png",
        "latency_cdf.png",
    ]
    assert all((out / p).stat().st_size > 1000 for p in report["plots"])
    assert len(list((out / "overlays").glob("*.png"))) == 2
    md = (out / "report.md").read_text()
    assert "| mask AP |" in md and "| encoder |" in md
    with ImageBag(report["output_bag"], "/compactinst/instance_mask") as outputs:
        assert outputs.count == 4
        stamps = [f.stamp_ns for f in outputs.frames()]
        first = next(outputs.frames())
    msg = typestore().deserialize_cdr(first.raw, first.msgtype)
    assert stamps == [s.stamp_ns for s in scenes]
    assert msg.encoding == "mono16"
    assert (msg.height, msg.width) == scenes[0].panoptic.shape


def test_lockstep_with_a_perfect_model_scores_100(scenes, gt_files, tmp_path) -> None:
    """The replay loop itself (matching, evaluation) with predictions equal to the GT."""
    bag = scene_bag(scenes, tmp_path / "bag", "mcap", compressed="png")
    by_stamp = {s.stamp_ns: s for s in scenes}
    frames = {}

    def oracle(image, encoding, outputs):
        scene = next(s for s in by_stamp.values() if (s.image == image).all())
        frames[scene.stamp_ns] = encoding
        return oracle_result(scene)

    gt = GroundTruth(*gt_files)
    with ImageBag(bag) as b:
        block = run_lockstep(b, oracle, gt, progress=False)
    assert len(frames) == len(scenes)
    acc = block["accuracy"]
    assert acc["mask_ap"]["AP"] == pytest.approx(100.0)
    assert acc["panoptic"]["all"]["PQ"] == pytest.approx(100.0)
    assert acc["semantic"]["mIoU"] == pytest.approx(100.0)


def test_gt_that_matches_no_frame_is_a_clear_error(
    scenes, gt_files, random_bundle, tmp_path, capsys
) -> None:
    shifted = [type(s)(s.image, s.panoptic, s.segments, s.stamp_ns + 10**12) for s in scenes]
    bag = scene_bag(shifted, tmp_path / "bag", "sqlite3")
    args = [
        "replay",
        str(bag),
        "--model",
        str(random_bundle),
        "--gt-instances",
        str(gt_files[0]),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "ground truth matches no frame of the bag by header stamp" in err
    assert "--match index" in err


def test_bag_errors_through_the_cli(tmp_path, random_bundle, capsys) -> None:
    assert main(["replay", str(tmp_path / "missing"), "--model", str(random_bundle)]) == 1
    assert "does not exist" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError, match=r"--rate 0\.0 must be positive"):
        options_from_args(parser.parse_args([str(tmp_path), "--rate", "0"]))


def _options(tmp_path, *flags: str):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from_args(parser.parse_args([str(tmp_path), *flags]))


def test_options_without_effect_in_the_mode_are_warned(tmp_path) -> None:
    notes = _options(tmp_path, "--rate", "2", "--match", "index").ignored_options()
    assert notes == [
        "--rate has no effect in --mode lockstep (it paces realtime playback)",
        "--match has no effect without --gt-instances or --gt-panoptic",
    ]
    assert _options(tmp_path, "--mode", "realtime", "--overlays", "5").ignored_options() == [
        "--overlays has no effect in --mode realtime (lockstep writes them)"
    ]
    assert _options(tmp_path, "--mode", "both", "--rate", "2").ignored_options() == []
    assert _options(tmp_path, "--domain", "7").ignored_options() == [
        "--domain has no effect in --mode lockstep (no node is started)"
    ]
    assert _options(tmp_path, "--domain", "7", "--cameras", "all").ignored_options() == []


def test_report_header_carries_the_model_caveat() -> None:
    report = {
        "bag": {"path": "b", "hash": "h", "topic": "/t", "frames": 0, "msgtype": "m"},
        "model": {"model": "compactinst_demo", "caveat": "model compactinst_demo: demo model"},
        "modes": {},
    }
    assert summary_text(report).splitlines()[2] == "note: model compactinst_demo: demo model"
