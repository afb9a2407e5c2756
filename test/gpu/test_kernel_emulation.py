"""Execute the real CUDA kernel sources on a CPU emulator (test/gpu/emu) and compare with the
numpy twin and the reference. Catches logic, indexing, barrier and atomics mistakes in the .cu
files without a GPU; it does not model warp timing, so races that a sequential block schedule
hides are left to scripts/gpu_check.py."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from compactinst_ros.gpu import twin
from compactinst_ros.gpu.constants import ENCODING_CODES, TABLES_DTYPE
from compactinst_ros.gpu.frames import (
    CASES,
    ENCODINGS,
    OPTIONS,
    PAD,
    blob_frame,
    encode,
    random_frame,
    smooth_rgb,
    speck_frame,
)
from compactinst_ros.gpu.postprocess import result_from_tables
from compactinst_ros.labels import SYNTHETIC_LABELS, LabelSet
from compactinst_ros.postprocess import reference
from compactinst_ros.postprocess.resample import bilinear_taps, logit_threshold, valid_region
from compactinst_ros.postprocess.semantic import semantic_dtype
from compactinst_ros.structures import (
    FrameMeta,
    FrameResult,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")


@pytest.fixture(scope="module")
def emu(emu_lib: ctypes.CDLL) -> ctypes.CDLL:
    """The emulator library with the argument types of its direct entry points."""
    lib = emu_lib
    lib.emu_tables_size.restype = ctypes.c_size_t
    lib.emu_postprocess.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 4 + [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_float,
        ctypes.c_float, ctypes.c_float, ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.c_int,
        ctypes.c_int,
    ] + [ctypes.c_void_p] * 6 + [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int]  # fmt: skip
    lib.emu_preprocess.argtypes = (
        [ctypes.c_void_p]
        + [ctypes.c_int] * 6
        + [ctypes.c_float] * 5
        + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    )
    lib.emu_preprocess_half.argtypes = lib.emu_preprocess.argtypes
    lib.emu_to_half.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.emu_overlay.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 4 + [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_float, ctypes.c_float, ctypes.c_void_p,
    ]  # fmt: skip
    return lib


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


def run_kernels(
    lib: ctypes.CDLL,
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
) -> FrameResult:
    """The kernels' FrameResult, assembled from tables and rasters by GpuPostprocessor's code."""
    assert lib.emu_tables_size() == TABLES_DTYPE.itemsize
    cls = np.ascontiguousarray(raw.class_logits, np.float32)
    masks = np.ascontiguousarray(raw.mask_logits, np.float32)
    q, h, w = masks.shape
    taps = [
        np.ascontiguousarray(a.astype(dt))
        for axis in (
            bilinear_taps(meta.src_h, meta.resized_h, h, raw.mask_stride),
            bilinear_taps(meta.src_w, meta.resized_w, w, raw.mask_stride),
        )
        for a, dt in zip(axis, (np.int32, np.int32, np.float32), strict=True)
    ]
    vh, vw = valid_region(meta, raw.mask_stride, h, w)
    isthing = labels.thing_mask.astype(np.uint8)
    ids = labels.id_array.astype(np.int32)
    tables = np.zeros(1, TABLES_DTYPE)
    shape = (meta.src_h, meta.src_w)
    inst = np.zeros(shape, np.uint16)
    pan = np.zeros(shape, np.int32)
    sem_dt = semantic_dtype(labels)
    sem = np.zeros(shape, sem_dt)
    want = outputs.instance * 1 + outputs.panoptic * 2 + outputs.semantic * 4
    lib.emu_postprocess(
        _ptr(cls), _ptr(masks), q, cls.shape[1], h, w, _ptr(isthing), _ptr(ids), vh, vw,
        float(logit_threshold(options.mask_threshold)), options.score_threshold,
        options.object_mask_threshold, options.max_instances, options.overlap_threshold,
        max(1, options.min_area), meta.src_h, meta.src_w, *[_ptr(t) for t in taps], want,
        _ptr(tables), _ptr(inst), _ptr(pan), _ptr(sem), int(sem_dt == np.uint16),
    )  # fmt: skip
    rasters = {"instance": inst, "panoptic": pan, "semantic": sem}
    requested = {name: rasters[name] for name in rasters if getattr(outputs, name)}
    return result_from_tables(tables[0], labels, meta, requested)


def assert_same(a: FrameResult, b: FrameResult, min_equal: float = 1.0) -> None:
    for name in RASTERS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            assert (x == y).mean() >= min_equal, (name, (x != y).sum())
    np.testing.assert_array_equal(a.instances.ids, b.instances.ids)
    np.testing.assert_array_equal(a.instances.class_index, b.instances.class_index)
    np.testing.assert_allclose(a.instances.score, b.instances.score, rtol=1e-5)
    np.testing.assert_array_equal(a.instances.box, b.instances.box)
    np.testing.assert_array_equal(a.instances.area, b.instances.area)
    np.testing.assert_array_equal(a.segments.ids, b.segments.ids)
    np.testing.assert_array_equal(a.segments.label_id, b.segments.label_id)
    np.testing.assert_array_equal(a.segments.isthing, b.segments.isthing)
    np.testing.assert_array_equal(a.segments.area, b.segments.area)


@pytest.mark.parametrize(("raw", "src_h", "src_w", "in_h", "in_w"), CASES[:4])
def test_kernels_equal_twin_and_reference(emu, raw, src_h, src_w, in_h, in_w) -> None:
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    got = run_kernels(emu, raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    assert len(got.instances) > 0 and len(got.segments) > 0
    expected = twin.TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet()).postprocess()
    assert_same(got, expected)
    ref = reference.postprocess(raw, meta, SYNTHETIC_LABELS, OPTIONS, OutputSet())
    assert_same(got, ref, min_equal=0.999)


@pytest.mark.parametrize("seed", [1, 3])
def test_kernels_on_near_ties(emu, seed: int) -> None:
    """Unstructured logits (the culling's worst case) and a subset of outputs."""
    raw = random_frame(seed, q=16, h=8, w=16)
    meta = FrameMeta.letterbox(70, 120, 64, 128)
    outputs = OutputSet(instance=False, semantic=seed == 3)
    got = run_kernels(emu, raw, meta, SYNTHETIC_LABELS, OPTIONS, outputs)
    expected = twin.TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, outputs).postprocess()
    assert_same(got, expected)


def test_kernels_respect_max_instances(emu) -> None:
    raw = blob_frame(5, q=30)
    meta = FrameMeta.letterbox(100, 200, 128, 256)
    options = PostprocessOptions(score_threshold=0.1, object_mask_threshold=0.5, max_instances=3)
    got = run_kernels(emu, raw, meta, SYNTHETIC_LABELS, options, OutputSet())
    assert 0 < len(got.instances) <= 3
    assert_same(got, reference.postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet()))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_preprocess_kernel_equals_twin(emu, encoding: str) -> None:
    raw = np.ascontiguousarray(encode(smooth_rgb(50, 150, 2), encoding))
    meta = FrameMeta.letterbox(50, 150, 64, 128)
    out = np.zeros((1, 3, 64, 128), np.float32)
    h, w = raw.shape[:2]
    emu.emu_preprocess(
        _ptr(raw), h, w, int(np.prod(raw.shape[1:])), ENCODING_CODES[encoding],
        meta.resized_h, meta.resized_w, h / meta.resized_h, w / meta.resized_w, *PAD,
        64, 128, _ptr(out),
    )  # fmt: skip
    np.testing.assert_allclose(out, twin.letterbox(raw, encoding, meta, PAD), atol=1e-3)


def test_device_half_rounding_is_numpys(emu) -> None:
    """cvt.rn.f16.f32 as the emulator runs it rounds as numpy's astype(float16) and as the Casts
    of ONNX Runtime and TensorRT: to nearest, ties to even (exact ties, both neighbours of each,
    subnormals, the largest half and overflow to infinity)."""
    rng = np.random.default_rng(3)
    halves = np.arange(0, 0x7C00, 7, dtype=np.uint16).view(np.float16).astype(np.float32)
    ties = (halves[:-1].astype(np.float64) + halves[1:]) / 2  # exact in float32
    values = np.concatenate([
        halves, ties.astype(np.float32), np.nextafter(ties.astype(np.float32), 0),
        np.nextafter(ties.astype(np.float32), np.inf),
        rng.uniform(-300, 300, 20000).astype(np.float32),
        np.array([65504, 65519.99, 65520, 1e9, 2.0**-24, 2.0**-25, 3 * 2.0**-26, np.inf, -0.0],
                 np.float32),
    ])  # fmt: skip
    values = np.concatenate([values, -values])
    got = np.empty(values.size, np.uint16)
    emu.emu_to_half(_ptr(values), values.size, _ptr(got))
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("encoding", ["rgb8", "bgra8", "yuyv"])
def test_half_preprocess_kernel_is_the_float_one_rounded(emu, encoding: str) -> None:
    """An FP16 engine's image: the half kernel writes the float kernel's values rounded to half,
    the bits the Cast at the FP16 graph's input made of them (resized and unresized frames)."""
    for size in ((50, 150), (64, 128)):
        raw = np.ascontiguousarray(encode(smooth_rgb(*size, 2), encoding))
        meta = FrameMeta.letterbox(*size, 64, 128)
        h, w = raw.shape[:2]
        args = (
            _ptr(raw), h, w, int(np.prod(raw.shape[1:])), ENCODING_CODES[encoding],
            meta.resized_h, meta.resized_w, h / meta.resized_h, w / meta.resized_w, *PAD, 64, 128,
        )  # fmt: skip
        wide, half = np.zeros((1, 3, 64, 128), np.float32), np.zeros((1, 3, 64, 128), np.uint16)
        emu.emu_preprocess(*args, _ptr(wide))
        emu.emu_preprocess_half(*args, _ptr(half))
        assert np.unique(wide).size > 100  # resampled values, not only the integers half holds
        np.testing.assert_array_equal(half, wide.astype(np.float16).view(np.uint16))


def test_overlay_kernels_equal_twin(emu) -> None:
    rng = np.random.default_rng(1)
    image = np.ascontiguousarray(encode(smooth_rgb(40, 64, 4), "yuyv"))
    inst = np.kron(rng.integers(0, 4, (5, 8)), np.ones((8, 8), int)).astype(np.uint16)
    seg_ids = np.array([7, 1001, 2003], np.int32)
    pan = seg_ids[rng.integers(0, 3, (40, 64))].astype(np.int32)
    pan[:5] = 0
    lut = rng.integers(0, 256, (4, 3), dtype=np.uint8)
    for ids, sorted_ids in ((inst, None), (pan, seg_ids)):
        out = np.zeros((40, 64, 3), np.uint8)
        emu.emu_overlay(
            _ptr(image), 40, 64, 128, ENCODING_CODES["yuyv"], _ptr(ids),
            _ptr(sorted_ids), 0 if sorted_ids is None else len(sorted_ids), _ptr(lut), len(lut),
            np.float32(0.6), np.float32(0.4), _ptr(out),
        )  # fmt: skip
        expected = twin.overlay(image, "yuyv", ids, lut, 0.4, sorted_ids)
        assert np.abs(out.astype(int) - expected.astype(int)).max() <= 1


def test_kernels_uint16_semantic_and_instance_only(emu) -> None:
    """Label ids above 255 (uint16 semantic raster); instance-only output set."""
    labels = LabelSet(names=("a", "b", "c"), ids=(300, 7, 1000), isthing=(True, False, True))
    rng = np.random.default_rng(9)
    raw = RawOutputs(
        rng.normal(0, 3, (10, 4)).astype(np.float32),
        rng.normal(0, 2, (10, 8, 16)).astype(np.float32),
        8,
    )
    meta = FrameMeta.letterbox(40, 100, 64, 128)
    options = PostprocessOptions(score_threshold=0.1, object_mask_threshold=0.4)
    for outputs in (OutputSet(), OutputSet(panoptic=False, semantic=False)):
        got = run_kernels(emu, raw, meta, labels, options, outputs)
        assert_same(got, reference.postprocess(raw, meta, labels, options, outputs), 0.999)
    assert got.panoptic_raster is None and got.instance_raster is not None


def test_kernels_many_classes_span_semantic_chunks(emu) -> None:
    """K = 40 > 32 classes: the semantic blocks of pp_stats run two class chunks."""
    labels = LabelSet(
        names=tuple(f"c{i}" for i in range(40)),
        ids=tuple(range(1, 41)),
        isthing=tuple(i % 2 == 0 for i in range(40)),
    )
    rng = np.random.default_rng(4)
    logits = rng.normal(0, 1, (12, 41)).astype(np.float32)
    logits[np.arange(12), rng.integers(0, 40, 12)] += 6
    raw = RawOutputs(logits, rng.normal(0, 2, (12, 8, 16)).astype(np.float32), 8)
    meta = FrameMeta.letterbox(60, 110, 64, 128)
    got = run_kernels(emu, raw, meta, labels, OPTIONS, OutputSet())
    assert len(np.unique(got.semantic_raster)) > 3
    expected = twin.TwinFrame(raw, meta, labels, OPTIONS, OutputSet()).postprocess()
    assert_same(got, expected)


def test_kernels_merge_stuff_and_number_things(emu) -> None:
    """Two stuff queries of one class merge into one segment; two things get 1001 and 1002."""
    h, w = 8, 16
    masks = np.full((4, h, w), -5.0, np.float32)
    masks[0, :, :8] = 5.0  # "field" (stuff, index 4), left
    masks[1, :, 8:] = 5.0  # "field" again, right
    masks[0, 1:6, 1:6] = -5.0
    masks[2, 2:5, 2:5] = 8.0  # person #1
    masks[1, 2:6, 10:14] = -5.0
    masks[3, 3:5, 11:13] = 8.0  # person #2
    k = SYNTHETIC_LABELS.num_classes
    logits = np.full((4, k + 1), -5.0, np.float32)
    logits[0, 4] = logits[1, 4] = logits[2, 0] = logits[3, 0] = 5.0
    raw = RawOutputs(logits, masks, 8)
    meta = FrameMeta.letterbox(64, 128, 64, 128)
    options = PostprocessOptions(overlap_threshold=0.5)
    got = run_kernels(emu, raw, meta, SYNTHETIC_LABELS, options, OutputSet())
    assert got.segments.ids.tolist() == [5, 1001, 1002]
    assert got.segments.area[0] == (got.panoptic_raster == 5).sum()
    assert_same(got, reference.postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet()))


def _outputs(result: FrameResult) -> list[np.ndarray]:
    """Every array a FrameResult carries (rasters, instance and segment tables)."""
    arrays = [getattr(result, name) for name in RASTERS]
    arrays += [np.asarray(v) for v in vars(result.instances).values()]
    arrays += [np.asarray(v) for v in vars(result.segments).values()]
    return arrays


@pytest.mark.parametrize("case", ["blobs", "near_ties", "caps"])
def test_kernels_give_the_same_result_under_every_schedule(emu, case: str) -> None:
    """Blocks and threads reversed, and shuffled anew in every barrier round: a missing
    __syncthreads or an order-dependent atomic would change some output."""
    if case == "blobs":
        raw, meta, options = blob_frame(0), FrameMeta.letterbox(100, 200, 128, 256), OPTIONS
    elif case == "near_ties":
        raw, meta, options = (
            random_frame(3, q=16, h=8, w=16),
            FrameMeta.letterbox(70, 120, 64, 128),
            OPTIONS,
        )
    else:
        raw, meta = blob_frame(5, q=30), FrameMeta.letterbox(100, 200, 128, 256)
        options = PostprocessOptions(
            score_threshold=0.1, object_mask_threshold=0.5, max_instances=3
        )
    emu.emu_set_schedule.argtypes = [ctypes.c_int, ctypes.c_uint]
    try:
        base = _outputs(run_kernels(emu, raw, meta, SYNTHETIC_LABELS, options, OutputSet()))
        for mode, seed in ((1, 0), (2, 1), (2, 2), (2, 3)):
            emu.emu_set_schedule(mode, seed)
            got = _outputs(run_kernels(emu, raw, meta, SYNTHETIC_LABELS, options, OutputSet()))
            for a, b in zip(base, got, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"schedule {mode} seed {seed}")
    finally:
        emu.emu_set_schedule(0, 1)


def test_kernels_remove_specks_as_the_reference_does(emu) -> None:
    """min_area in the finalisation: the speck of test/postprocess/test_specks.py goes, from the
    table, the instance raster and the panoptic things, and the rest are numbered 1..N."""
    raw, meta = speck_frame()
    for min_area in (0, PostprocessOptions().min_area):
        options = PostprocessOptions(min_area=min_area)
        got = run_kernels(emu, raw, meta, SYNTHETIC_LABELS, options, OutputSet())
        assert_same(got, reference.postprocess(raw, meta, SYNTHETIC_LABELS, options, OutputSet()))
        assert len(got.instances) == (3 if min_area == 0 else 2)
