"""The tiled fast path equals the reference bit for bit: rasters, tables, dtypes.

Every test runs twice: with the compiled per-pixel loops (numba, the ``fast`` extra) and with
the numpy ones they replace where numba is not installed.

Frames: the default model's outputs on demo scenes at three camera sizes, random letterboxed
frames, constructed scenes with saturated logits (+-1000) and frames built for exact ties
(integer logits, equal scores, samples exactly at T). Tile sizes and sample blocks vary; none
may change a result. Also the per-tile bounds on their own: no sample may leave them.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from postprocess_scenes import (
    CAR,
    LABELS,
    NO_OBJECT,
    PERSON,
    ROAD,
    SKY,
    STRIDE,
    class_logits,
    identity_meta,
    rect_masks,
)
from test_postprocess_dense import CASES, OPTIONS, random_frame

sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))
from ort_stages import raw_outputs

from compactinst_ros import jit
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.errors import BundleError
from compactinst_ros.labels import SYNTHETIC_LABELS, LabelSet
from compactinst_ros.postprocess import compiled, fast, postprocess
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.postprocess.resample import Resampler
from compactinst_ros.postprocess.tiles import TileBounds, TileGrid
from compactinst_ros.structures import (
    FrameMeta,
    FrameResult,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)

#: Camera sizes (h, w) of the CPU benchmark: the model's own, 720p and 1080p.
CAMERA_SIZES = [(256, 384), (720, 1280), (1080, 1920)]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which per-pixel loops the fast path runs; the compiled ones need numba."""
    if request.param == "compiled" and not jit.AVAILABLE:
        pytest.skip("numba is not installed (pip install '.[fast]')")
    monkeypatch.setattr(compiled, "AVAILABLE", request.param == "compiled")
    return request.param


def assert_identical(fast_result: FrameResult, reference: FrameResult) -> None:
    """Every raster and table field equal, with equal dtypes."""
    for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
        a, b = getattr(fast_result, name), getattr(reference, name)
        if b is None:
            assert a is None, name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.flags.c_contiguous, name
        mismatch = int((a != b).sum())
        assert mismatch == 0, f"{name}: {mismatch} pixels differ"
    for table in ("instances", "segments"):
        for field, expected in vars(getattr(reference, table)).items():
            got = getattr(getattr(fast_result, table), field)
            assert got.dtype == expected.dtype, f"{table}.{field}"
            np.testing.assert_array_equal(got, expected, err_msg=f"{table}.{field}")


def check(
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions = OPTIONS,
    outputs: OutputSet | None = None,
    tile: int = fast.TILE,
) -> FrameResult:
    """Run both implementations, assert they agree, return the reference result."""
    outputs = outputs or OutputSet()
    reference = postprocess(raw, meta, labels, options, outputs)
    assert_identical(fast_postprocess(raw, meta, labels, options, outputs, tile=tile), reference)
    return reference


@pytest.fixture(scope="module")
def demo_outputs() -> dict[tuple[int, int], tuple[RawOutputs, FrameMeta, LabelSet]]:
    """The default model's decoder outputs for a demo scene at each camera size."""
    from compactinst_ros.backends import BackendOptions
    from compactinst_ros.backends.ort import OrtBackend
    from compactinst_ros.train.synthetic import render_scene

    bundle = ModelBundle.load(default_bundle_path())
    backend = OrtBackend(bundle, BackendOptions(threads=2))
    scene = render_scene(1000, 0, bundle.input_h, bundle.input_w).image
    out = {}
    for h, w in CAMERA_SIZES:
        meta = FrameMeta.letterbox(h, w, bundle.input_h, bundle.input_w)
        image = cv2.resize(scene, (w, h), interpolation=cv2.INTER_LINEAR)
        out[h, w] = (raw_outputs(backend, image, "rgb8", meta), meta, bundle.labels)
    backend.close()
    return out


@pytest.mark.parametrize("size", CAMERA_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("tile", [16, 5])
def test_default_model_on_demo_scene(demo_outputs: dict, size: tuple, tile: int) -> None:
    raw, meta, labels = demo_outputs[size]
    reference = check(raw, meta, labels, PostprocessOptions(), tile=tile)
    assert len(reference.instances) >= 3 and len(reference.segments) >= 4  # a real scene


@pytest.mark.parametrize(
    "block_samples", [0, 5000, 10**12], ids=["tile-per-block", "small-blocks", "one-block"]
)
def test_block_size_does_not_change_results(
    demo_outputs: dict, block_samples: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fast, "BLOCK_SAMPLES", block_samples)
    raw, meta, labels = demo_outputs[720, 1280]
    check(raw, meta, labels, PostprocessOptions())


@pytest.mark.parametrize("tile", [1, 3, 16, 64])
@pytest.mark.parametrize(("seed", "src", "inp", "labels"), CASES)
def test_random_letterboxed_frames(
    seed: int, src: tuple, inp: tuple, labels: LabelSet, tile: int
) -> None:
    meta = FrameMeta.letterbox(*src, *inp)
    raw = random_frame(seed, 24, (inp[0] // 8, inp[1] // 8), labels.num_classes)
    check(raw, meta, labels, tile=tile)


@pytest.mark.parametrize(
    "outputs",
    [OutputSet(True, False, False), OutputSet(False, True, False), OutputSet(False, False, True)],
    ids=["instance", "panoptic", "semantic"],
)
def test_single_outputs(outputs: OutputSet) -> None:
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    raw = random_frame(0, 24, (16, 32), SYNTHETIC_LABELS.num_classes)
    check(raw, meta, SYNTHETIC_LABELS, outputs=outputs)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a host with two CPUs")
@pytest.mark.parametrize("cpus", [1, 2])
def test_helper_thread_only_with_two_cpus_and_the_same_result(
    demo_outputs: dict, cpus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two CPUs the semantic and instance rasters are made on the helper thread; with
    one (this thread's affinity narrowed), here; the result is the reference's either way."""
    ran_on: list[str] = []
    for name in ("fast_semantic", "fast_instances"):
        original = getattr(fast, name)

        def spy(*args, _original=original):
            ran_on.append(threading.current_thread().name)
            return _original(*args)

        monkeypatch.setattr(fast, name, spy)
    raw, meta, labels = demo_outputs[720, 1280]
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(affinity)[:cpus])
    try:
        check(raw, meta, labels, PostprocessOptions())
    finally:
        os.sched_setaffinity(0, affinity)
    here = threading.current_thread().name
    assert len(ran_on) == 2 and all((name == here) == (cpus == 1) for name in ran_on), ran_on


@pytest.mark.parametrize("rows", [1, 3, 8, 1000])
def test_panoptic_pieces_of_any_size_give_the_same_result(
    demo_outputs: dict, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However the panoptic per-pixel work is cut, and whichever thread takes a piece, the
    raster and the segment table are the reference's."""
    monkeypatch.setattr(compiled, "PIECE_ROWS", rows)
    raw, meta, labels = demo_outputs[1080, 1920]
    check(raw, meta, labels, PostprocessOptions())


def _forked_semantic(raw, meta, labels, queue) -> None:
    """A forked child's semantic raster (the helper thread of its parent is not in it)."""
    result = fast_postprocess(raw, meta, labels, PostprocessOptions(), OutputSet())
    queue.put(result.semantic_raster)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a host with two CPUs")
def test_a_forked_child_makes_its_own_helper_thread(demo_outputs: dict) -> None:
    raw, meta, labels = demo_outputs[256, 384]
    expected = check(raw, meta, labels, PostprocessOptions())  # the parent's helper runs
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_forked_semantic, args=(raw, meta, labels, queue))
    child.start()
    try:
        got = queue.get(timeout=60)  # a child waiting on its parent's thread never answers
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    np.testing.assert_array_equal(got, expected.semantic_raster)


@pytest.mark.parametrize("src", [(64, 128), (100, 190), (333, 700)])
def test_saturated_logits(src: tuple) -> None:
    # +-1000 logits: the rounding margin must scale with the magnitude for culling to be exact.
    rects = [(6, 8, 0, 16), (0, 2, 0, 6), (2, 5, 1, 4), (2, 5, 3, 9), (2, 6, 11, 14), None]
    classes = [ROAD, SKY, PERSON, PERSON, CAR, NO_OBJECT]
    cls = class_logits(classes, [12.0, 13.0, 12.0, 12.5, 12.0, 12.0])
    raw = RawOutputs(cls, rect_masks(8, 16, rects), STRIDE)
    meta = FrameMeta.letterbox(*src, 64, 128)
    check(raw, meta, LABELS, PostprocessOptions(overlap_threshold=0.2))
    check(raw, identity_meta(8, 16), LABELS, PostprocessOptions())


@pytest.mark.parametrize("seed", range(4))
def test_exact_ties_and_samples_at_the_threshold(seed: int) -> None:
    # Integer logits in -2..2 give many texels and samples exactly at T = 0, equal blends of
    # different queries, and equal class maps; equal class logits give equal panoptic scores.
    rng = np.random.default_rng(seed)
    masks = rng.integers(-2, 3, (10, 8, 12)).astype(np.float32)
    masks[5:] = masks[:5]  # duplicated queries: exact ties everywhere
    cls = np.zeros((10, LABELS.num_classes + 1), np.float32)
    cls[np.arange(10), rng.integers(0, LABELS.num_classes, 10)] = 9.0
    options = PostprocessOptions(
        score_threshold=0.0, object_mask_threshold=0.5, overlap_threshold=0.0
    )
    for src in ((64, 96), (150, 190), (47, 61)):
        check(RawOutputs(cls, masks, STRIDE), FrameMeta.letterbox(*src, 64, 96), LABELS, options)


def test_kept_queries_that_never_exceed_t_and_no_queries() -> None:
    cls = class_logits([PERSON, CAR, ROAD])
    masks = np.full((3, 8, 16), -3.0, np.float32)
    check(RawOutputs(cls, masks, STRIDE), identity_meta(8, 16), LABELS, PostprocessOptions())
    empty = RawOutputs(np.zeros((0, 5), np.float32), np.zeros((0, 8, 16), np.float32), STRIDE)
    check(empty, FrameMeta.letterbox(90, 170, 64, 128), LABELS)


def test_float16_outputs() -> None:
    meta = FrameMeta.letterbox(90, 170, 128, 256)
    raw = random_frame(1, 24, (16, 32), SYNTHETIC_LABELS.num_classes)
    half = RawOutputs(raw.class_logits.astype(np.float16), raw.mask_logits.astype(np.float16), 8)
    check(half, meta, SYNTHETIC_LABELS)


def test_malformed_outputs_raise_the_reference_error() -> None:
    raw = RawOutputs(np.zeros((5, 9), np.float32), np.zeros((5, 8, 32), np.float32), 8)
    with pytest.raises(BundleError, match="does not cover"):
        fast_postprocess(
            raw, FrameMeta.letterbox(90, 170, 128, 256), SYNTHETIC_LABELS, OPTIONS, OutputSet()
        )


@pytest.mark.parametrize("src", [(256, 384), (333, 517), (1080, 1920), (50, 70)])
def test_tile_bounds_contain_every_sample(src: tuple) -> None:
    rng = np.random.default_rng(0)
    grids = (rng.normal(0, 30, (6, 32, 48)) * rng.uniform(0.1, 40, (6, 1, 1))).astype(np.float32)
    meta = FrameMeta.letterbox(*src, 256, 384)
    resampler = Resampler(meta, 8, 32, 48)
    tiles = TileGrid.of(resampler)
    bounds = fast.tile_bounds(grids, tiles)  # compiled or numpy, as the loops fixture says
    samples = resampler.sample(grids, slice(0, meta.src_h))
    tile_of_y = np.repeat(np.arange(len(tiles.rows)), tiles.rows.size)
    tile_of_x = np.repeat(np.arange(len(tiles.cols)), tiles.cols.size)
    lower = bounds.lower[:, tile_of_y][:, :, tile_of_x]
    upper = bounds.upper[:, tile_of_y][:, :, tile_of_x]
    assert (samples > lower).all() and (samples < upper).all()
    # every tile reads one texel pair per axis and stays within TILE pixels
    idx0, rows = resampler.rows_taps[0], tiles.rows
    for start, size, texel in zip(rows.start, rows.size, rows.texel0, strict=True):
        assert 1 <= size <= fast.TILE and (idx0[start : start + size] == texel).all()


@pytest.mark.parametrize("src", [(256, 384), (333, 517), (1080, 1920), (50, 70)])
@pytest.mark.parametrize("scale", [1.0, 30.0, 1000.0])
def test_compiled_tile_bounds_are_numpys_bit_for_bit(src: tuple, scale: float) -> None:
    if not jit.AVAILABLE:
        pytest.skip("numba is not installed (pip install '.[fast]')")
    rng = np.random.default_rng(2)
    grids = (rng.normal(0, scale, (9, 32, 48))).astype(np.float32)
    grids[3, 5, 7] = np.nan  # a broken map: all its bounds NaN, in both
    grids[4, :, :6] = 0.0  # flat runs: zero spreads, signed zeros
    tiles = TileGrid.of(Resampler(FrameMeta.letterbox(*src, 256, 384), 8, 32, 48))
    expected, got = TileBounds.of(grids, tiles), compiled.tile_bounds_compiled(grids, tiles)
    for name in ("lower", "upper"):
        want, have = getattr(expected, name), getattr(got, name)
        assert have.dtype == np.float32 and np.isnan(want[3]).all()
        # NaN payloads are the CPU's business; every other value must match to the bit
        assert np.array_equal(np.isnan(have), np.isnan(want)), name
        number = ~np.isnan(want)
        assert np.array_equal(have[number].view(np.uint32), want[number].view(np.uint32)), name


@pytest.mark.parametrize(
    ("queries", "classes", "grid"),
    [(100, 8, (32, 48)), (50, 80, (24, 40)), (1, 1, (1, 1)), (0, 3, (4, 5))],
)
def test_compiled_class_maps_are_the_specs_bit_for_bit(queries, classes, grid) -> None:
    if not jit.AVAILABLE:
        pytest.skip("numba is not installed (pip install '.[fast]')")
    from compactinst_ros.postprocess.resample import sigmoid, softmax
    from compactinst_ros.postprocess.semantic import class_maps

    rng = np.random.default_rng(queries + classes)
    probs = softmax(rng.normal(0, 3, (queries, classes + 1)).astype(np.float32))[:, :-1]
    masks = sigmoid(rng.normal(0, 5, (queries, *grid)).astype(np.float32))
    expected, got = class_maps(probs, masks), compiled.class_maps_compiled(probs, masks)
    assert got.dtype == np.float32 and got.shape == expected.shape == (classes, *grid)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("src", [(256, 384), (333, 517), (50, 70)])
def test_sampled_pairs_are_the_reference_samples(src: tuple) -> None:
    # Every (map, tile) pair: its padded block holds the reference's samples bit for bit at the
    # tile's pixels, NaN at padding, and its raster offsets point there (padding: past the end).
    rng = np.random.default_rng(1)
    grids = rng.normal(0, 20, (3, 32, 48)).astype(np.float32)
    meta = FrameMeta.letterbox(*src, 256, 384)
    resampler = Resampler(meta, 8, 32, 48)
    tiles = TileGrid.of(resampler, tile=5)
    expected = resampler.sample(grids, slice(0, meta.src_h)).reshape(3, -1)
    maps, rows, cols = (a.ravel() for a in np.indices((3, *tiles.shape)))
    values = tiles.sample_pairs(grids, maps, rows, cols)
    index = tiles.flat_index(rows, cols)
    real = index < tiles.raster_size
    assert (index[~real] == tiles.raster_size).all()
    assert np.isnan(values[~real]).all() and not np.isnan(values[real]).any()
    pair = np.broadcast_to(maps[:, None, None], index.shape)
    np.testing.assert_array_equal(values[real], expected[pair[real], index[real]])
    per_pixel = np.bincount(index[real], minlength=tiles.raster_size)
    assert (per_pixel == len(grids)).all()  # every pixel once per map
