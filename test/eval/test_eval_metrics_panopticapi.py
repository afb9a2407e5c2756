"""Our PQ (eval/metrics.py) against panopticapi's reference algorithm (panopticapi_reference.py).

On the demo's own predictions (the demo bag through the Pipeline and the replay's Evaluator) and
on constructed cases the two agree; where panopticapi refuses an input or keeps only one crowd
region per category, the test pins down what ours does instead (documented in eval/metrics.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from panopticapi_reference import ids_to_rgb, pq_compute, reference
from PIL import Image

from compactinst_ros import demo
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.eval.bags import ImageBag
from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.eval.metrics import PanopticQuality
from compactinst_ros.eval.replay import run_lockstep
from compactinst_ros.pipeline import Pipeline

THING, OTHER_THING, STUFF = 1, 2, 5
CATEGORIES = {THING: True, OTHER_THING: True, STUFF: False}


def ours(frames: list, categories: dict[int, bool]) -> dict:
    pq = PanopticQuality(categories)
    for frame in frames:
        pq.add(*frame)
    return pq.result()


def assert_same(a: dict, b: dict) -> None:
    for name in ("all", "things", "stuff"):
        assert a[name]["n"] == b[name]["n"], name
        for key in ("PQ", "SQ", "RQ"):
            assert a[name][key] == pytest.approx(b[name][key], abs=1e-3), (name, key)


# ~12 s of replay; make test keeps the constructed cases below, make test-full adds this one
@pytest.mark.full
def test_demo_predictions_agree(tmp_path: Path) -> None:
    """The 40-frame demo bag through the embedded model: ours, as the replay runs it, equals
    panopticapi on the same predictions and the demo's own GT files."""
    bundle = default_bundle_path()
    assert bundle is not None, "models/default is part of the repository"
    paths = demo.build_demo_data(tmp_path / "data", 40, 1000, (256, 384), 10.0)
    gt = GroundTruth(paths["gt_instances"], paths["gt_panoptic"], paths["gt_panoptic_dir"])
    results = {}
    with Pipeline(bundle, "onnxruntime") as pipeline, ImageBag(paths["bag"]) as bag:

        def recording(image, encoding, outputs):
            result = pipeline(image, encoding, outputs)
            results[len(results)] = result
            return result

        replayed = run_lockstep(bag, recording, gt, progress=False)
    mine = replayed["accuracy"]["panoptic"]
    assert replayed["accuracy"]["frames_evaluated"] == 40

    gt_json = json.loads(paths["gt_panoptic"].read_text())
    annotations = []
    pred_dir = tmp_path / "pred"
    pred_dir.mkdir()
    for index, image_id in gt.frame_to_image.items():
        result = results[index]
        Image.fromarray(ids_to_rgb(result.panoptic_raster)).save(pred_dir / f"{image_id}.png")
        segments = [
            {"id": int(i), "category_id": int(c)}
            for i, c in zip(result.segments.ids, result.segments.label_id, strict=True)
        ]
        annotations.append(
            {"image_id": image_id, "file_name": f"{image_id}.png", "segments_info": segments}
        )
    pred_json = tmp_path / "pred.json"
    pred_json.write_text(
        json.dumps({"annotations": annotations, "categories": gt_json["categories"]})
    )
    theirs = pq_compute(paths["gt_panoptic"], pred_json, paths["gt_panoptic_dir"], pred_dir)

    for name, key in (("all", "All"), ("things", "Things"), ("stuff", "Stuff")):
        assert mine[name]["n"] == theirs[key]["n"]
        for metric in ("PQ", "SQ", "RQ"):
            assert mine[name][metric] == pytest.approx(
                100 * theirs[key][metric.lower()], abs=1e-3
            ), (name, metric)
    assert 50 < mine["all"]["PQ"] < 100  # a trained model: real matches and real misses


def _scene() -> tuple[np.ndarray, dict, np.ndarray, dict]:
    """20x20: stuff on the top half, a thing matched with IoU 0.75, some GT void."""
    gt = np.zeros((20, 20), np.int64)
    gt[:10] = STUFF
    gt[12:16, 2:10] = 1001
    pred = np.zeros_like(gt)
    pred[:10] = STUFF
    pred[12:16, 2:8] = 1001
    return gt, {STUFF: (STUFF, False), 1001: (THING, False)}, pred, {STUFF: STUFF, 1001: THING}


def test_one_crowd_region_per_category_agrees(tmp_path: Path) -> None:
    gt, gt_segs, pred, pred_segs = _scene()
    gt[16:, :10] = 1999  # a crowd of things
    gt_segs[1999] = (THING, True)
    pred[17:, :6] = 1002  # an unmatched thing mostly on the crowd: not a false positive
    pred[16:, 14:] = 1003  # an unmatched thing on GT void: not a false positive either
    pred[:2, 12:18] = 2001  # an unmatched thing on GT stuff: a false positive
    pred_segs.update({1002: THING, 1003: THING, 2001: OTHER_THING})
    frames = [(gt, gt_segs, pred, pred_segs)]
    result = ours(frames, CATEGORIES)
    assert_same(result, reference(tmp_path, frames, CATEGORIES))
    assert result["per_class"][str(THING)]["fp"] == 0 and result["things"]["n"] == 2
    assert result["per_class"][str(OTHER_THING)]["fp"] == 1


def test_unlisted_gt_ids_are_void(tmp_path: Path) -> None:
    """By design: GT pixels whose id the annotation does not list are void, like id 0.
    panopticapi counts them neither as void nor as a segment (consistent GT has none), so ours
    equals it on the GT with those pixels set to 0."""
    gt, gt_segs, pred, pred_segs = _scene()
    gt[12:16, 8:12] = 3  # unlisted, under the predicted thing's right edge
    pred[12:16, 2:12] = 1001
    result = ours([(gt, gt_segs, pred, pred_segs)], CATEGORIES)
    voided = np.where(gt == 3, 0, gt)
    assert_same(result, reference(tmp_path, [(voided, gt_segs, pred, pred_segs)], CATEGORIES))


def test_several_crowd_regions_of_a_category_all_count(tmp_path: Path) -> None:
    """By design: a prediction on any crowd region of its category is ignored. panopticapi keeps
    only the last listed region per category, so ours equals it on the GT with the category's
    crowd regions merged into one (the layout of Cityscapes' converted GT)."""
    gt, gt_segs, pred, pred_segs = _scene()
    gt[16:, :10] = 1998
    gt[16:, 10:] = 1999
    gt_segs.update({1998: (THING, True), 1999: (THING, True)})
    pred[16:, :8] = 1002  # on the first crowd region only
    pred_segs[1002] = THING
    frames = [(gt, gt_segs, pred, pred_segs)]
    merged = gt.copy()
    merged[merged == 1999] = 1998
    merged_segs = {k: v for k, v in gt_segs.items() if k != 1999}

    result = ours(frames, CATEGORIES)
    assert result["per_class"][str(THING)]["fp"] == 0
    assert_same(
        result, reference(tmp_path / "merged", [(merged, merged_segs, pred, pred_segs)], CATEGORIES)
    )
    as_listed = reference(tmp_path / "listed", frames, CATEGORIES)
    assert as_listed["things"]["RQ"] < result["things"]["RQ"]  # there 1002 is a false positive


def test_gt_segment_listed_but_absent_is_a_false_negative(tmp_path: Path) -> None:
    gt, gt_segs, pred, pred_segs = _scene()
    gt_segs[1002] = (THING, False)  # in the annotation, no pixel in the raster
    frames = [(gt, gt_segs, pred, pred_segs)]
    result = ours(frames, CATEGORIES)
    assert result["per_class"][str(THING)]["fn"] == 1
    assert_same(result, reference(tmp_path, frames, CATEGORIES))


def test_what_panopticapi_refuses_is_scored_as_void(tmp_path: Path) -> None:
    """By design: a predicted segment listed but absent is dropped; a predicted id that is not
    listed, or whose category the GT does not know, is void. panopticapi raises on all three;
    ours equals it on the prediction cleaned that way."""
    gt, gt_segs, pred, pred_segs = _scene()
    clean = (gt, gt_segs, pred.copy(), dict(pred_segs))
    pred[16:, 12:] = 7777  # not listed
    pred[:2, :2] = 4001  # listed with a category the GT does not have
    pred_segs.update({4001: 4, 1005: THING})  # 1005: listed, no pixel
    result = ours([(gt, gt_segs, pred, pred_segs)], CATEGORIES)
    clean[2][(pred == 7777) | (pred == 4001)] = 0
    assert_same(result, reference(tmp_path / "clean", [clean], CATEGORIES))

    cases = {
        "not the PNG": {**clean[3], 1005: THING},
        "not the JSON": clean[3],
        "unknown category": {**clean[3], 4001: 4},
    }
    rasters = {
        "not the PNG": clean[2],
        "not the JSON": pred,
        "unknown category": np.where(pred == 4001, 4001, clean[2]),
    }
    for message, segs in cases.items():
        with pytest.raises(KeyError, match=message):
            reference(
                tmp_path / message.replace(" ", "_"),
                [(gt, gt_segs, rasters[message], segs)],
                CATEGORIES,
            )
