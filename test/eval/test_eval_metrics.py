"""Metrics: GT fed back scores 100; our PQ equals panopticapi's reference algorithm."""

from __future__ import annotations

import numpy as np
import pytest
from eval_helpers import THINGS, make_scenes, oracle_result
from panopticapi_reference import reference

from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.eval.metrics import Evaluator, PanopticQuality, SemanticIoU


def test_ground_truth_as_predictions_scores_100(scenes, gt_files) -> None:
    gt = GroundTruth(*gt_files)
    gt.match([s.stamp_ns for s in scenes])
    ev = Evaluator(gt)
    for i, s in enumerate(scenes):
        assert ev.add(i, oracle_result(s))
    res = ev.result()
    assert res["frames_evaluated"] == len(scenes)
    assert res["mask_ap"]["AP"] == pytest.approx(100.0)
    assert res["mask_ap"]["AP50"] == pytest.approx(100.0)
    assert res["panoptic"]["all"]["PQ"] == pytest.approx(100.0)
    assert res["panoptic"]["things"]["PQ"] == pytest.approx(100.0)
    assert res["panoptic"]["stuff"]["PQ"] == pytest.approx(100.0)
    assert res["semantic"]["mIoU"] == pytest.approx(100.0)


def test_dropping_an_instance_lowers_ap_and_pq(scenes, gt_files) -> None:
    gt = GroundTruth(*gt_files)
    gt.match([s.stamp_ns for s in scenes])
    ev = Evaluator(gt)
    for i, s in enumerate(scenes):
        r = oracle_result(s)
        if i == 0:  # forget the first thing: one FN, its pixels become void
            first = r.segments.ids[np.isin(r.segments.label_id, list(THINGS))][0]
            r.panoptic_raster[r.panoptic_raster == first] = 0
            keep = r.segments.ids != first
            r.segments.ids, r.segments.label_id = r.segments.ids[keep], r.segments.label_id[keep]
            r.instances.score[0] = 0.0  # and give its instance the lowest score
            r.instance_raster[r.instance_raster == 1] = 0
        ev.add(i, r)
    res = ev.result()
    assert res["mask_ap"]["AP"] < 100.0
    assert res["panoptic"]["things"]["PQ"] < 100.0
    assert res["panoptic"]["stuff"]["PQ"] == pytest.approx(100.0)


def perturb(scene, rng: np.random.Generator):
    """A plausible prediction: shifted segments, one merged, a spurious one, some void."""
    pred = np.roll(scene.panoptic, int(rng.integers(-3, 4)), axis=int(rng.integers(0, 2))).copy()
    segs = {k: c for k, (c, _) in scene.segments.items()}
    h, w = pred.shape
    y, x = int(rng.integers(0, h - 6)), int(rng.integers(0, w - 6))
    pred[y : y + 6, x : x + 6] = 2999  # spurious vehicle
    segs[2999] = 2
    pred[: int(rng.integers(0, 4))] = 0  # void rows
    if rng.random() < 0.5:
        pred[pred == 7] = 5  # sky predicted as field
    pred[-4:, -4:] = 9999  # unknown category -> void
    segs[9999] = 42
    return pred, segs


def test_pq_matches_panopticapi_reference(tmp_path) -> None:
    rng = np.random.default_rng(3)
    scenes = make_scenes(6, 40, 56, seed=11)
    images = []
    for i, s in enumerate(scenes):
        gt = s.panoptic.copy()
        gt_segs = dict(s.segments)
        if i % 2:  # a crowd region and some GT void
            gt[-6:, :10] = 1999
            gt_segs[1999] = (1, True)
            gt[:2, :] = 0
        pred, pred_segs = perturb(s, rng)
        images.append((gt, gt_segs, pred, pred_segs))
    categories = {1: True, 2: True, 5: False, 7: False}
    ours = PanopticQuality(categories)
    for image in images:
        ours.add(*image)
    res = ours.result()
    # panopticapi refuses the unknown category 42 and the sky segment listed after it was
    # painted over; ours scores them as void and drops the empty one (documented), so the
    # reference gets the prediction cleaned that way.
    cleaned = [
        (
            gt,
            gt_segs,
            np.where(pred == 9999, 0, pred),
            {k: c for k, c in pred_segs.items() if k != 9999 and (pred == k).any()},
        )
        for gt, gt_segs, pred, pred_segs in images
    ]
    ref = reference(tmp_path, cleaned, categories)
    for name in ("all", "things", "stuff"):
        assert ref[name]["n"] == res[name]["n"] > 0
        for key in ("PQ", "SQ", "RQ"):
            assert res[name][key] == pytest.approx(ref[name][key], abs=1e-3), (name, key)
    assert 0 < res["all"]["PQ"] < 100


def test_pq_hand_computed() -> None:
    gt = np.zeros((10, 10), np.int64)
    gt[:, :5] = 1001
    pred = np.zeros((10, 10), np.int64)
    pred[:, :4] = 1001  # IoU 40/50 = 0.8 with the GT thing
    pred[:, 8:] = 1002  # on GT void only: not a false positive
    pred[:, 5:8] = 5  # stuff on void too: ignored
    pq = PanopticQuality({1: True, 5: False})
    pq.add(gt, {1001: (1, False)}, pred, {1001: 1, 1002: 1, 5: 5})
    res = pq.result()
    assert res["things"]["PQ"] == pytest.approx(80.0)
    assert res["things"]["SQ"] == pytest.approx(80.0)
    assert res["stuff"]["n"] == 0


def test_miou_hand_computed() -> None:
    gt = np.array([[1, 1, 2, 2], [1, 1, 2, 0]])
    pred = np.array([[1, 2, 2, 2], [1, 1, 2, 2]])
    res = SemanticIoU((1, 2, 3)).result()
    assert res["mIoU"] is None
    miou = SemanticIoU((1, 2, 3))
    miou.add(gt, pred)
    out = miou.result()
    # class 1: tp 3, gt 4, pred 3 -> 3/4; class 2: tp 3, gt 3, pred 4 -> 3/4 (void pixel ignored)
    assert out["per_class"] == {"1": 75.0, "2": 75.0}
    assert out["mIoU"] == pytest.approx(75.0)


def test_eval_modules_do_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import compactinst_ros.eval.replay, compactinst_ros.eval.realtime\n"
        "import compactinst_ros.eval.metrics, compactinst_ros.eval.plots, compactinst_ros.demo\n"
        "sys.exit(1 if 'torch' in sys.modules else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_our_rle_is_pycocotools_rle_byte_for_byte() -> None:
    """coco.encode_rle (the runtime's, no pycocotools) against pycocotools' mask.encode on
    empty, full, sparse, dense and blocky masks of odd sizes."""
    from pycocotools import mask as mask_utils

    from compactinst_ros.coco import encode_rle

    rng = np.random.default_rng(5)
    block = np.zeros((37, 53), bool)
    block[5:30, 11:40] = True
    masks = [block] + [rng.random(shape) < p for shape in [(1, 1), (7, 5), (64, 96)]
                       for p in (0.0, 0.02, 0.5, 0.98, 1.0)]  # fmt: skip
    for mask in masks:
        ours = encode_rle(mask)
        theirs = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        assert ours == {"size": list(theirs["size"]), "counts": theirs["counts"].decode()}
