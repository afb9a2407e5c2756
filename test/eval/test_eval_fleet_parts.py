"""The parts of replay-fleet that need no Ray: exact merging of replays' sufficient statistics
(against one evaluator over all frames), the manifest and the drive cache key."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import Scene, make_scenes, oracle_result, write_gt

from compactinst_ros.errors import DataError
from compactinst_ros.eval.fleet import cache_key, drive_options, load_manifest
from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.eval.metrics import Evaluator, SemanticIoU, merge_statistics
from compactinst_ros.eval.replay import ReplayOptions
from compactinst_ros.eval.tracking_metrics import TrackingAccumulator

pytest.importorskip("pycocotools")


def imperfect(scene: Scene, k: int):
    """The scene's GT as a prediction, shifted by a frame-dependent offset, scores spread: AP,
    PQ and mIoU well below 100 and different per frame."""
    result = oracle_result(scene)
    result.instance_raster = np.roll(result.instance_raster, 2 + 3 * (k % 3), axis=1)
    result.panoptic_raster = np.roll(result.panoptic_raster, 1 + 2 * (k % 2), axis=0)
    result.semantic_raster = np.roll(result.semantic_raster, k % 4, axis=1)
    n = len(result.instances)
    scores = np.linspace(0.9, 0.3, n).astype(np.float32) - 0.01 * k
    result.instances = replace(result.instances, score=scores)
    return result


def evaluate(scenes: list[Scene], first: int, folder: Path) -> Evaluator:
    """An Evaluator over ``scenes`` with their own GT files (image ids 1..n)."""
    gt = GroundTruth(*write_gt(scenes, folder))
    gt.match([s.stamp_ns for s in scenes])
    evaluator = Evaluator(gt)
    for i, scene in enumerate(scenes):
        assert evaluator.add(i, imperfect(scene, first + i))
    return evaluator


def test_merged_parts_equal_one_evaluator_over_all_frames(tmp_path) -> None:
    scenes = make_scenes(n=7, seed=3)
    evaluator = evaluate(scenes, 0, tmp_path / "all")
    whole = evaluator.result()
    assert evaluator.result() == whole  # scoring leaves the GT and predictions as they were
    parts = [(0, 3), (3, 4), (4, 7)]  # each part's GT numbers its images from 1 again
    stats = [evaluate(scenes[a:b], a, tmp_path / f"p{a}").statistics() for a, b in parts]
    merged = merge_statistics(stats)
    assert 5 < merged["mask_ap"]["AP"] < 95 and 5 < merged["panoptic"]["all"]["PQ"] < 95
    assert merged == whole  # AP, PQ per class, mIoU: exactly
    assert merge_statistics(stats[:1]) != whole  # a part alone is not the fleet


def test_semantic_confusions_over_different_label_sets_merge() -> None:
    rng = np.random.default_rng(0)
    frames = [(rng.choice([0, 1, 5, 7], (6, 8)), rng.choice([0, 1, 5, 7, 9], (6, 8)))]
    frames.append((rng.choice([0, 5, 7], (6, 8)), rng.choice([0, 5, 7], (6, 8))))
    whole = SemanticIoU((1, 5, 7))
    for gt, pred in frames:
        whole.add(gt, pred)
    parts = [SemanticIoU((1, 5, 7)), SemanticIoU((5, 7))]
    for part, (gt, pred) in zip(parts, frames, strict=True):
        part.add(gt, pred)
    merged = SemanticIoU((1, 5, 7))
    for part in parts:
        merged.absorb(part.class_ids, part.confusion.tolist())
    np.testing.assert_array_equal(merged.confusion, whole.confusion)
    assert merged.result() == whole.result()


def test_id_switches_of_drives_add_up() -> None:
    """Two drives with their own tracks: the sum equals one accumulator over both in a row."""
    gt = np.zeros((4, 4), np.int64)
    gt[:2, :2] = 1
    pred = [np.where(gt == 1, i, 0) for i in (3, 4, 4, 5)]  # each drive's track changes id
    drives = [[(gt, {1: 10}, p) for p in pred[:2]], [(gt, {1: 20}, p) for p in pred[2:]]]
    whole, parts = TrackingAccumulator(), []
    for frames in drives:
        part = TrackingAccumulator()
        for frame in frames:
            part.add(*frame)
            whole.add(*frame)
        parts.append({"image_ids": [], "categories": {}, "tracking": asdict(part.counts())})
    assert merge_statistics(parts)["tracking"] == asdict(whole.counts())
    assert whole.counts().id_switches == 2


def test_drives_with_other_category_lists_are_refused(tmp_path) -> None:
    scenes = make_scenes(n=1)
    inst, pan, pan_dir = write_gt(scenes, tmp_path / "b")
    data = json.loads(inst.read_text())
    data["categories"].append({"id": 3, "name": "tractor", "isthing": 1})
    inst.write_text(json.dumps(data))
    gt = GroundTruth(inst, pan, pan_dir)
    gt.match([s.stamp_ns for s in scenes])
    other = Evaluator(gt)
    other.add(0, imperfect(scenes[0], 0))
    stats = [evaluate(scenes, 0, tmp_path / "a").statistics(), other.statistics()]
    with pytest.raises(DataError, match="give every drive the same category list"):
        merge_statistics(stats)


def test_manifest_paths_names_and_errors(tmp_path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("- {bag: bags/a, tags: {site: farm}}\n- {bag: b.mcap, name: x}\n")
    a, b = load_manifest(manifest)
    assert (a.name, a.bag, a.tags) == ("a", tmp_path / "bags" / "a", {"site": "farm"})
    assert (b.name, b.bag, b.tags) == ("x", tmp_path / "b.mcap", {})
    cases = {
        "[]": "lists no drives",
        "- {bag: a, weather: sun}": r"unknown keys \['weather'\]",
        "- {bag: a}\n- {bag: c/a}": r"drive names \['a'\] repeat",
        "drives: [{topic: /x}]": "needs at least 'bag: PATH'",
        "- [": "not valid YAML or JSON",
    }
    for text, message in cases.items():
        manifest.write_text(text)
        with pytest.raises(DataError, match=message):
            load_manifest(manifest)
    with pytest.raises(DataError, match="does not exist"):
        load_manifest(tmp_path / "missing.yaml")


def test_cache_key_follows_files_model_and_options(tmp_path) -> None:
    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "bag_0.mcap").write_bytes(b"x" * 10)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"bag": "bag"}]))
    (drive,) = load_manifest(manifest)
    template = ReplayOptions(bag=Path("."), model=tmp_path, out=tmp_path / "o1")
    key = cache_key(drive_options(template, drive), "model-a")
    moved = replace(template, out=tmp_path / "o2", progress=False, overlays=0)
    assert cache_key(drive_options(moved, drive), "model-a") == key  # outputs do not count
    assert cache_key(drive_options(template, drive), "model-b") != key
    stricter = replace(template, score_threshold=0.5)
    assert cache_key(drive_options(stricter, drive), "model-a") != key
    os.utime(bag / "bag_0.mcap", ns=(1, 1))  # the bag was rewritten
    assert cache_key(drive_options(template, drive), "model-a") != key


def test_quiet_holds_back_what_native_code_prints_unless_the_block_fails(capfd) -> None:
    """Ray's start prints its token-authentication line from C++ on descriptor 2: --quiet
    keeps it out, but a failing start still shows what it printed."""
    from compactinst_ros.eval.fleet import held_stderr

    with held_stderr(True):
        os.write(2, b"Token authentication is enabled\n")
    assert capfd.readouterr().err == ""
    with pytest.raises(RuntimeError), held_stderr(True):
        os.write(2, b"why the start failed\n")
        raise RuntimeError("start failed")
    assert capfd.readouterr().err == "why the start failed\n"
    with held_stderr(False):
        os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"
