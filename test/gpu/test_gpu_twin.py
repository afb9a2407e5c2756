"""The numpy twin of the fused CUDA post-processing against the contract and the reference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from compactinst_ros.gpu.constants import TILE
from compactinst_ros.gpu.frames import CASES, OPTIONS, blob_frame, random_frame
from compactinst_ros.gpu.twin import TwinFrame, query_stats, select_queries
from compactinst_ros.labels import SYNTHETIC_LABELS, LabelSet
from compactinst_ros.structures import FrameMeta, OutputSet, RawOutputs

sys.path.insert(0, str(Path(__file__).parent))
from contract_dense import dense_postprocess


def mean_candidates(frame: TwinFrame) -> dict[str, float]:
    """Mean candidates per tile of each list (inst, pan, orig, sem): the work culling leaves."""
    totals: dict[str, int] = {}
    for tile_row in range(frame.n_rows):
        for name, candidates in frame.candidates(tile_row).items():
            totals[name] = totals.get(name, 0) + int(candidates.sum())
    tiles = frame.n_rows * len(frame.col_lo)
    return {name: total / tiles for name, total in totals.items()}


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((np.asarray(a) == np.asarray(b)).mean())


@pytest.mark.parametrize(("raw", "src_h", "src_w", "in_h", "in_w"), CASES)
def test_twin_matches_dense_contract(raw, src_h, src_w, in_h, in_w) -> None:
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    assert raw.mask_logits.shape[1:] == (in_h // 8, in_w // 8)
    twin = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess()
    dense = dense_postprocess(
        raw.class_logits, raw.mask_logits, 8, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()
    )
    assert agreement(twin.instance_raster, dense["instance"]) >= 0.999
    assert agreement(twin.panoptic_raster, dense["panoptic"]) >= 0.999
    assert agreement(twin.semantic_raster, dense["semantic"]) >= 0.999
    assert twin.instance_raster.dtype == np.uint16
    assert twin.panoptic_raster.dtype == np.int32
    assert twin.semantic_raster.dtype == np.uint8
    np.testing.assert_allclose(twin.instances.score, dense["inst_score"], rtol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_culling_is_exact(seed: int) -> None:
    """Per-tile culling changes no pixel, even on unstructured logits full of near-ties."""
    raw = random_frame(seed) if seed % 2 else blob_frame(seed)
    h, w = raw.mask_logits.shape[1:]
    meta = FrameMeta.letterbox(h * 8 + 3 * seed, w * 8 - 5 * seed, h * 8, w * 8)
    a = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess(cull=True)
    b = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess(cull=False)
    np.testing.assert_array_equal(a.instance_raster, b.instance_raster)
    np.testing.assert_array_equal(a.panoptic_raster, b.panoptic_raster)
    np.testing.assert_array_equal(a.semantic_raster, b.semantic_raster)
    np.testing.assert_array_equal(a.segments.area, b.segments.area)


def test_culling_skips_work_on_structured_masks() -> None:
    """On blob-like masks most tiles keep only a few candidates (the point of culling)."""
    raw = blob_frame(7, q=40, h=32, w=64)
    meta = FrameMeta.letterbox(512, 1024, 256, 512)
    stats = mean_candidates(TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()))
    sel = select_queries(
        raw.class_logits,
        query_stats(raw.mask_logits, meta, 8, np.float32(0.0)),
        SYNTHETIC_LABELS,
        OPTIONS,
    )
    assert len(sel.panoptic) > 5
    assert stats["pan"] < 0.5 * len(sel.panoptic)
    assert stats.get("inst", 0.0) < 0.5 * max(1, len(sel.instance))


def test_atomics_are_order_independent() -> None:
    """Areas, boxes and overlap counts do not depend on the order tile rows are processed."""
    raw = blob_frame(11)
    meta = FrameMeta.letterbox(200, 300, 128, 256)
    base = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess()
    rows = -(-meta.src_h // TILE)
    order = np.random.default_rng(0).permutation(rows)
    other = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess(
        chunk_order=order
    )
    np.testing.assert_array_equal(base.instance_raster, other.instance_raster)
    np.testing.assert_array_equal(base.instances.box, other.instances.box)
    np.testing.assert_array_equal(base.instances.area, other.instances.area)
    np.testing.assert_array_equal(base.segments.area, other.segments.area)


def test_tables_match_rasters() -> None:
    """Instance boxes/areas and segment areas are exactly those of the written rasters."""
    raw = blob_frame(12)
    meta = FrameMeta.letterbox(150, 260, 128, 256)
    res = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess()
    assert len(res.instances) > 0 and len(res.segments) > 0
    for i, iid in enumerate(res.instances.ids):
        ys, xs = np.nonzero(res.instance_raster == iid)
        assert res.instances.area[i] == len(xs)
        np.testing.assert_array_equal(
            res.instances.box[i], [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        )
    for sid, area in zip(res.segments.ids, res.segments.area, strict=True):
        assert (res.panoptic_raster == sid).sum() == area


def test_outputs_are_optional_and_stuff_merges() -> None:
    """Only requested rasters are built; two stuff queries of one label form one segment."""
    h, w = 8, 16
    masks = np.full((3, h, w), -5.0, np.float32)
    masks[0, :, :8] = 5.0  # stuff "field" (index 4), left half
    masks[1, :, 8:] = 5.0  # stuff "field" again, right half
    masks[2, 2:5, 2:5] = 8.0  # thing "person" (index 0), cut out of the stuff
    masks[0, 1:6, 1:6] = -5.0
    k = SYNTHETIC_LABELS.num_classes
    logits = np.full((3, k + 1), -5.0, np.float32)
    logits[0, 4] = logits[1, 4] = logits[2, 0] = 5.0
    raw = RawOutputs(logits, masks, 8)
    meta = FrameMeta.letterbox(64, 128, 64, 128)
    res = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(instance=False)).postprocess()
    assert res.instance_raster is None and len(res.instances) == 0
    assert sorted(res.segments.ids.tolist()) == [5, 1001]
    assert {5, 1001} <= set(np.unique(res.panoptic_raster).tolist()) <= {0, 5, 1001}


def test_semantic_uint16_for_large_label_ids() -> None:
    labels = LabelSet(names=("a", "b"), ids=(300, 7), isthing=(True, False))
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, (5, 3)).astype(np.float32)
    raw = RawOutputs(logits, rng.normal(0, 2, (5, 4, 8)).astype(np.float32), 8)
    meta = FrameMeta.letterbox(32, 64, 32, 64)
    res = TwinFrame(raw, meta, labels, OPTIONS, OutputSet()).postprocess()
    assert res.semantic_raster.dtype == np.uint16
    assert set(np.unique(res.semantic_raster).tolist()) <= {0, 7, 300}


@pytest.mark.skipif(
    importlib.util.find_spec("compactinst_ros.postprocess.reference") is None,
    reason="postprocess/reference.py not present yet",
)
@pytest.mark.parametrize(("raw", "src_h", "src_w", "in_h", "in_w"), CASES)
def test_twin_matches_numpy_reference(raw, src_h, src_w, in_h, in_w) -> None:
    """>= 99.9 % of pixels equal to the numpy reference (the spec), tables close."""
    from compactinst_ros.postprocess import reference

    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    ref = reference.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    twin = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess()
    for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
        assert agreement(getattr(twin, name), getattr(ref, name)) >= 0.999, name
        assert getattr(twin, name).dtype == getattr(ref, name).dtype, name
    assert len(twin.instances) == len(ref.instances)
    np.testing.assert_allclose(twin.instances.score, ref.instances.score, rtol=1e-4)
    np.testing.assert_array_equal(twin.segments.ids, ref.segments.ids)
