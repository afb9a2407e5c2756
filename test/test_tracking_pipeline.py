"""Track ids through the Pipeline: the default model on a ``synth --sequence`` video keeps its
ids, the raster, table and overlay colours all carry them, and ``tracking=False`` gives the
per-frame ids back; the raster remap's cv2.LUT path equals numpy's."""

from __future__ import annotations

import json
from dataclasses import replace

import cv2
import numpy as np
import pytest

from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.coco import rgb_to_id
from compactinst_ros.eval.tracking_metrics import tracking_counts
from compactinst_ros.overlay import overlay_bgr
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import OutputSet
from compactinst_ros.tracking import MAX_TRACK_ID, remap_ids
from compactinst_ros.train.synthetic import generate

pytest.importorskip("pycocotools")
FRAMES = 10


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, list]:
    """(bgr frames, GT panoptic rasters, GT {segment id: track id}) of one synthetic video."""
    out = tmp_path_factory.mktemp("seq")
    generate(out, FRAMES, 7, 256, 384, progress=False, sequence=FRAMES)
    panoptic = json.loads((out / "panoptic.json").read_text())
    frames, rasters, tracks = [], [], []
    for image, ann in zip(panoptic["images"], panoptic["annotations"], strict=True):
        frames.append(cv2.imread(str(out / "images" / image["file_name"])))
        rgb = cv2.imread(str(out / "panoptic" / ann["file_name"]))[..., ::-1]
        rasters.append(rgb_to_id(rgb))
        tracks.append({s["id"]: s["track_id"] for s in ann["segments_info"] if "track_id" in s})
    return frames, rasters, tracks


def _run(frames: list, tracking: bool, outputs: OutputSet) -> list:
    with Pipeline(default_bundle_path(), "onnxruntime", tracking=tracking, threads=1) as pipe:
        return [pipe(frame, "bgr8", outputs) for frame in frames]


def test_track_ids_persist_through_the_pipeline_and_colour_the_overlay(video) -> None:
    frames, gt_rasters, gt_tracks = video
    asked = OutputSet(instance=True, panoptic=False, semantic=False, overlay=True)
    tracked = _run(frames, True, asked)
    per_frame = _run(frames, False, asked)
    labels = ModelBundle.load(default_bundle_path()).labels
    for frame, result in zip(frames, tracked, strict=True):
        values = set(np.unique(result.instance_raster).tolist()) - {0}
        assert values == set(result.instances.ids.tolist())  # the table names the raster
        expected = overlay_bgr(frame, "bgr8", replace(result, overlay=None), labels, 0.5)
        np.testing.assert_array_equal(result.overlay, expected)  # track-id colours
    counts = tracking_counts(gt_rasters, gt_tracks, [r.instance_raster for r in tracked])
    plain = tracking_counts(gt_rasters, gt_tracks, [r.instance_raster for r in per_frame])
    print(f"tracked {counts}\nper-frame {plain}")
    assert counts.matches > 0.8 * counts.gt_objects  # the model finds the objects
    assert counts.id_switches == 0
    assert plain.id_switches > 0  # score order changes: per-frame ids switch
    assert counts.matches == plain.matches  # the same masks, only their ids differ
    for a, b in zip(tracked, per_frame, strict=True):
        assert sorted(b.instances.ids.tolist()) == list(range(1, len(b.instances) + 1))
        mapping = dict(zip(b.instances.ids.tolist(), a.instances.ids.tolist(), strict=True))
        lut = np.zeros(MAX_TRACK_ID + 1, np.uint16)
        lut[list(mapping)] = list(mapping.values())
        np.testing.assert_array_equal(lut[b.instance_raster], a.instance_raster)


def test_the_overlay_alone_tracks_without_returning_the_raster(video) -> None:
    """Overlay only: ids still tracked (same colours as with the raster), raster not returned."""
    frames = video[0][:4]
    alone = _run(
        frames, True, OutputSet(instance=False, panoptic=False, semantic=False, overlay=True)
    )
    both = _run(
        frames, True, OutputSet(instance=True, panoptic=False, semantic=False, overlay=True)
    )
    for a, b in zip(alone, both, strict=True):
        assert a.instance_raster is None
        np.testing.assert_array_equal(a.instances.ids, b.instances.ids)
        np.testing.assert_array_equal(a.overlay, b.overlay)


@pytest.mark.parametrize("high", [40, 255, 256, 3000, MAX_TRACK_ID])
def test_remap_fast_path_equals_numpy(high: int) -> None:
    """cv2.LUT (raster max <= 255) and the numpy gather give the same raster, including values no
    row names (-> 0) and ids above the raster's maximum."""
    rng = np.random.default_rng(high)
    raster = rng.integers(0, high + 1, (61, 83)).astype(np.uint16)
    ids = np.unique(np.concatenate([rng.choice(high + 1, 12), [high]]))
    ids = ids[ids > 0]
    ids = np.concatenate([ids, [min(high + 7, MAX_TRACK_ID)]])  # maybe not in the raster
    ids = np.unique(ids)
    new = rng.integers(1, MAX_TRACK_ID + 1, ids.size).astype(np.uint16)
    lut = np.zeros(MAX_TRACK_ID + 1, np.uint16)
    lut[ids] = new
    got = remap_ids(raster, ids, new)
    assert got.dtype == np.uint16 and got.shape == raster.shape
    np.testing.assert_array_equal(got, lut[raster])
    np.testing.assert_array_equal(remap_ids(raster[:, ::2], ids, new), lut[raster[:, ::2]])


def test_remap_of_an_empty_raster() -> None:
    empty = np.zeros((0, 5), np.uint16)
    assert remap_ids(empty, np.zeros(0, np.intp), np.zeros(0, np.uint16)).shape == (0, 5)
