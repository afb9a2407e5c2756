"""The numpy twin of the fused CUDA post-processing against the contract and the reference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from compactinst_ros.labels import SYNTHETIC_LABELS, LabelSet
from compactinst_ros.postprocess import gpu_twin
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions, RawOutputs

sys.path.insert(0, str(Path(__file__).parent))
from contract_dense import dense_postprocess

OPTIONS = PostprocessOptions(score_threshold=0.2, object_mask_threshold=0.5)


def blob_frame(seed: int, q: int = 20, h: int = 16, w: int = 32) -> RawOutputs:
    """Mask logits with spatial structure (Gaussian blobs) and peaked class logits."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    cy, cx = rng.uniform(0, h, q), rng.uniform(0, w, q)
    r = rng.uniform(1.5, 6.0, q)
    d2 = (yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2
    masks = (6.0 * np.exp(-d2 / (2 * r[:, None, None] ** 2)) - 3.0).astype(np.float32)
    masks += rng.normal(0, 0.3, masks.shape).astype(np.float32)
    k = SYNTHETIC_LABELS.num_classes
    logits = rng.normal(0, 1, (q, k + 1)).astype(np.float32)
    logits[np.arange(q), rng.integers(0, k + 1, q)] += rng.uniform(2, 8, q).astype(np.float32)
    return RawOutputs(class_logits=logits, mask_logits=masks, mask_stride=8)


def random_frame(seed: int, q: int = 12, h: int = 8, w: int = 16) -> RawOutputs:
    """Unstructured logits: many near-ties between queries, the hardest case for culling."""
    rng = np.random.default_rng(seed)
    k = SYNTHETIC_LABELS.num_classes
    return RawOutputs(
        class_logits=rng.normal(0, 3, (q, k + 1)).astype(np.float32),
        mask_logits=rng.normal(0, 2, (q, h, w)).astype(np.float32),
        mask_stride=8,
    )


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((np.asarray(a) == np.asarray(b)).mean())


CASES = [
    # (frame, src_h, src_w, input_h, input_w)
    (blob_frame(0), 100, 200, 128, 256),
    (blob_frame(1), 128, 256, 128, 256),
    (blob_frame(2), 90, 256, 128, 256),  # letterbox: padding rows at the bottom
    (blob_frame(3), 300, 333, 128, 256),  # upscale-free odd sizes, padding on the right
    (random_frame(4), 70, 130, 64, 128),
    (random_frame(5), 64, 128, 64, 128),
]


@pytest.mark.parametrize(("raw", "src_h", "src_w", "in_h", "in_w"), CASES)
def test_twin_matches_dense_contract(raw, src_h, src_w, in_h, in_w) -> None:
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    assert raw.mask_logits.shape[1:] == (in_h // 8, in_w // 8)
    twin = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
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
    a = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(), cull=True)
    b = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(), cull=False)
    np.testing.assert_array_equal(a.instance_raster, b.instance_raster)
    np.testing.assert_array_equal(a.panoptic_raster, b.panoptic_raster)
    np.testing.assert_array_equal(a.semantic_raster, b.semantic_raster)
    np.testing.assert_array_equal(a.segments.area, b.segments.area)


def test_culling_skips_work_on_structured_masks() -> None:
    """On blob-like masks most tiles keep only a few candidates (the point of culling)."""
    raw = blob_frame(7, q=40, h=32, w=64)
    meta = FrameMeta.letterbox(512, 1024, 256, 512)
    stats = gpu_twin.tile_stats(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    sel = gpu_twin.select_queries(
        raw.class_logits,
        gpu_twin.query_stats(raw.mask_logits, meta, 8, np.float32(0.0)),
        SYNTHETIC_LABELS,
        OPTIONS,
    )
    assert len(sel.pan_query) > 5
    assert stats.pan < 0.5 * len(sel.pan_query)
    assert stats.inst < 0.5 * max(1, len(sel.inst_query))


def test_atomics_are_order_independent() -> None:
    """Areas, boxes and overlap counts do not depend on the order tile rows are processed."""
    raw = blob_frame(11)
    meta = FrameMeta.letterbox(200, 300, 128, 256)
    base = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    rows = -(-meta.src_h // gpu_twin.TILE)
    order = np.random.default_rng(0).permutation(rows)
    other = gpu_twin.postprocess(
        raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(), chunk_order=order
    )
    np.testing.assert_array_equal(base.instance_raster, other.instance_raster)
    np.testing.assert_array_equal(base.instances.box, other.instances.box)
    np.testing.assert_array_equal(base.instances.area, other.instances.area)
    np.testing.assert_array_equal(base.segments.area, other.segments.area)


def test_tables_match_rasters() -> None:
    """Instance boxes/areas and segment areas are exactly those of the written rasters."""
    raw = blob_frame(12)
    meta = FrameMeta.letterbox(150, 260, 128, 256)
    res = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
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
    res = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(instance=False))
    assert res.instance_raster is None and len(res.instances) == 0
    assert sorted(res.segments.ids.tolist()) == [5, 1001]
    assert {5, 1001} <= set(np.unique(res.panoptic_raster).tolist()) <= {0, 5, 1001}


def test_semantic_uint16_for_large_label_ids() -> None:
    labels = LabelSet(names=("a", "b"), ids=(300, 7), isthing=(True, False))
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, (5, 3)).astype(np.float32)
    raw = RawOutputs(logits, rng.normal(0, 2, (5, 4, 8)).astype(np.float32), 8)
    meta = FrameMeta.letterbox(32, 64, 32, 64)
    res = gpu_twin.postprocess(raw, meta, labels, OPTIONS, OutputSet())
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
    twin = gpu_twin.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
        assert agreement(getattr(twin, name), getattr(ref, name)) >= 0.999, name
        assert getattr(twin, name).dtype == getattr(ref, name).dtype, name
    assert len(twin.instances) == len(ref.instances)
    np.testing.assert_allclose(twin.instances.score, ref.instances.score, rtol=1e-4)
    np.testing.assert_array_equal(twin.segments.ids, ref.segments.ids)
