"""Cross-check: the chunked, selective reference equals a dense all-queries implementation.

Random but structured logits (smooth blobs, a few confident queries), letterboxed frames with
non-integer scales, tiny and default chunk sizes. Also: only requested outputs are computed,
memory stays bounded, and malformed decoder outputs raise errors that name the fix.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from postprocess_dense import dense_postprocess

from compactinst_ros.errors import BundleError
from compactinst_ros.labels import SYNTHETIC_LABELS, LabelSet
from compactinst_ros.postprocess import postprocess
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions, RawOutputs

OPTIONS = PostprocessOptions(
    score_threshold=0.05, object_mask_threshold=0.4, overlap_threshold=0.6, max_instances=12
)


def random_frame(seed: int, queries: int, grid: tuple[int, int], k: int) -> RawOutputs:
    """Elliptic blob masks with texel noise, and class logits with some confident rows."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0 : grid[0], 0 : grid[1]].astype(np.float64)
    centre = rng.uniform(0, 1, (queries, 2, 1, 1)) * np.array(grid)[None, :, None, None]
    radius = rng.uniform(0.1, 0.4, (queries, 2, 1, 1)) * np.array(grid)[None, :, None, None]
    dist = ((ys - centre[:, 0]) / radius[:, 0]) ** 2 + ((xs - centre[:, 1]) / radius[:, 1]) ** 2
    masks = 6.0 * (1.0 - dist) + rng.normal(0.0, 1.0, (queries, *grid))
    cls = rng.normal(0.0, 1.0, (queries, k + 1))
    confident = rng.random(queries) < 0.5
    cls[confident, rng.integers(0, k, confident.sum())] += rng.uniform(3, 9, confident.sum())
    return RawOutputs(cls.astype(np.float32), masks.astype(np.float32), 8)


CASES = [
    # seed, camera (h, w), model input (h, w), labels
    (0, (90, 170), (128, 256), SYNTHETIC_LABELS),
    (1, (200, 150), (128, 128), SYNTHETIC_LABELS),
    (2, (48, 80), (64, 96), LabelSet(("a", "b", "c"), (300, 5, 6), (True, False, True))),
    (3, (333, 517), (128, 192), SYNTHETIC_LABELS),
]


@pytest.mark.parametrize("chunk_bytes", [4096, 16 * 1024 * 1024])
@pytest.mark.parametrize(("seed", "src", "inp", "labels"), CASES)
def test_matches_dense_implementation(
    seed: int, src: tuple, inp: tuple, labels: LabelSet, chunk_bytes: int
) -> None:
    meta = FrameMeta.letterbox(*src, *inp)
    raw = random_frame(seed, 24, (inp[0] // 8, inp[1] // 8), labels.num_classes)
    ours = postprocess(raw, meta, labels, OPTIONS, OutputSet(), chunk_bytes=chunk_bytes)
    dense = dense_postprocess(raw.class_logits, raw.mask_logits, 8, meta, labels, OPTIONS)

    assert len(dense["instances"]) >= 2 and len(dense["segments"]) >= 2  # a non-trivial scene
    np.testing.assert_array_equal(ours.instance_raster, dense["instance_raster"])
    inst = ours.instances
    np.testing.assert_array_equal(inst.ids, [row[0] for row in dense["instances"]])
    np.testing.assert_array_equal(inst.class_index, [row[2] for row in dense["instances"]])
    np.testing.assert_array_equal(inst.label_id, [row[3] for row in dense["instances"]])
    np.testing.assert_array_equal(inst.score, [row[4] for row in dense["instances"]])
    np.testing.assert_array_equal(inst.box, [row[5] for row in dense["instances"]])
    np.testing.assert_array_equal(inst.area, [row[6] for row in dense["instances"]])

    np.testing.assert_array_equal(ours.panoptic_raster, dense["panoptic_raster"])
    seg = ours.segments
    np.testing.assert_array_equal(seg.ids, [s[0] for s in dense["segments"]])
    np.testing.assert_array_equal(seg.isthing, [s[1] for s in dense["segments"]])
    np.testing.assert_allclose(seg.score, [s[2] for s in dense["segments"]], rtol=1e-6)
    np.testing.assert_array_equal(seg.area, [s[3] for s in dense["segments"]])

    np.testing.assert_array_equal(ours.semantic_raster, dense["semantic_raster"])
    assert ours.semantic_raster.dtype == (np.uint16 if max(labels.ids) > 255 else np.uint8)


def test_matches_dense_implementation_at_other_thresholds() -> None:
    options = PostprocessOptions(
        score_threshold=0.0,
        mask_threshold=0.7,
        object_mask_threshold=0.0,
        overlap_threshold=0.3,
        max_instances=5,
    )
    meta = FrameMeta.letterbox(120, 100, 128, 128)
    raw = random_frame(7, 16, (16, 16), SYNTHETIC_LABELS.num_classes)
    ours = postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet(), chunk_bytes=8192)
    dense = dense_postprocess(raw.class_logits, raw.mask_logits, 8, meta, SYNTHETIC_LABELS, options)
    assert len(ours.instances) == 5
    np.testing.assert_array_equal(ours.instance_raster, dense["instance_raster"])
    np.testing.assert_array_equal(ours.instances.box, [row[5] for row in dense["instances"]])
    np.testing.assert_array_equal(ours.panoptic_raster, dense["panoptic_raster"])
    np.testing.assert_array_equal(ours.segments.ids, [s[0] for s in dense["segments"]])
    np.testing.assert_array_equal(ours.semantic_raster, dense["semantic_raster"])


def test_only_requested_outputs_are_computed() -> None:
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    raw = random_frame(0, 24, (16, 32), SYNTHETIC_LABELS.num_classes)
    result = postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet(False, True, False))
    assert result.instance_raster is None and len(result.instances) == 0
    assert result.semantic_raster is None
    assert result.panoptic_raster is not None and len(result.segments) > 0
    assert result.timings_ms == {}


def test_memory_stays_bounded_with_many_kept_queries() -> None:
    # 48 full-frame queries all kept at 512x1024: dense float32 upsampling would be 100 MB.
    queries, src = 48, (512, 1024)
    cls = np.zeros((queries, 9), np.float32)
    cls[:, 0] = 10.0  # person, p ~ 0.9997: kept by instance and panoptic rules
    masks = np.random.default_rng(0).normal(1.0, 2.0, (queries, 64, 128)).astype(np.float32)
    meta = FrameMeta.letterbox(*src, *src)
    raw = RawOutputs(cls, masks, 8)
    tracemalloc.start()
    result = postprocess(
        raw,
        meta,
        SYNTHETIC_LABELS,
        PostprocessOptions(score_threshold=0.0),
        OutputSet(),
        chunk_bytes=1 << 20,
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(result.instances) > 1
    assert peak < 24 * 2**20, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize(
    ("cls_shape", "mask_shape", "message"),
    [
        ((1, 5, 9), (1, 5, 16, 32), "drop the batch axis"),
        ((5, 9), (4, 16, 32), "different models"),
        ((5, 7), (5, 16, 32), "labels do not match"),
        ((5, 9), (5, 8, 32), "does not cover"),
    ],
)
def test_malformed_outputs_raise_bundle_error(
    cls_shape: tuple, mask_shape: tuple, message: str
) -> None:
    raw = RawOutputs(np.zeros(cls_shape, np.float32), np.zeros(mask_shape, np.float32), 8)
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    with pytest.raises(BundleError, match=message):
        postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())


def test_float16_outputs_give_the_float32_result() -> None:
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    raw = random_frame(0, 24, (16, 32), SYNTHETIC_LABELS.num_classes)
    half = RawOutputs(raw.class_logits.astype(np.float16), raw.mask_logits.astype(np.float16), 8)
    exact = RawOutputs(half.class_logits.astype(np.float32), half.mask_logits.astype(np.float32), 8)
    a = postprocess(half, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    b = postprocess(exact, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    np.testing.assert_array_equal(a.instance_raster, b.instance_raster)
    np.testing.assert_array_equal(a.panoptic_raster, b.panoptic_raster)
    np.testing.assert_array_equal(a.semantic_raster, b.semantic_raster)


def test_zero_queries_give_empty_outputs() -> None:
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    raw = RawOutputs(np.zeros((0, 9), np.float32), np.zeros((0, 16, 32), np.float32), 8)
    result = postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    assert len(result.instances) == 0 and len(result.segments) == 0
    for raster in (result.instance_raster, result.panoptic_raster, result.semantic_raster):
        assert raster.shape == (90, 170) and not raster.any()
