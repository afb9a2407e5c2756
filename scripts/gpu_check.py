#!/usr/bin/env python3
"""GPU check for a machine with an NVIDIA GPU and pycuda (TensorRT optional): kernel parity
against the numpy twin, the post-processing benchmark and, where TensorRT is installed, the
TensorRT backend; a table comes last and everything also lands in OUTDIR/gpu_check.json.

1. environment: GPU, CUDA driver, pycuda, PyTorch, TensorRT;
2. preprocessing kernel vs its numpy twin and vs the OpenCV letterbox, every encoding, its half
   variant (the FP16 engines' image) vs the float one rounded to half, the overlay kernels vs
   their twin, and the 3-D lifting kernels vs their twin and spatial.lift_depth on the twin's
   synthetic scenes;
3. fused post-processing kernels vs the numpy twin (bit-exact up to float ties) and vs the numpy
   reference (>= 99.9 % of pixels), on random, blob and constructed frames, tables included;
4. the post-processing benchmark (scripts/bench_postprocess_gpu.py): fused kernels vs naive
   PyTorch vs numpy vs the byte floor;
5. with --bundle and TensorRT (last: an engine build can take minutes): engine build (or, with
   --engine-cache holding them, load) time, the TensorRT backend end to end vs the onnxruntime
   backend, and its per-stage latency. Under the
   test stand-in for TensorRT (test/gpu/emu/tensorrt_emu.py, whose engines run the ONNX graphs
   on ONNX Runtime) the row is labelled as what it is: ONNX Runtime vs ONNX Runtime, not FP16;
6. with --bundle and TensorRT: the FP16 and INT8 typed graphs, each parsed into a strongly
   typed network (every parser error printed on failure: the parser log of each stage), then
   built (or loaded from --engine-cache) and run through the acceptance check on the bundle's
   golden cases, one row per precision. So one run says whether this TensorRT parses the typed
   graphs and whether its engines agree with their CPU reference.

    python scripts/gpu_check.py [--out out/gpu_check] [--bundle models/default] [--reps 30]
        [--quick] [--sizes 512x1024 1024x2048 1080x1920] [--engine-cache DIR]

Needs no nvcc: every kernel, the benchmark floor's idle launch included, comes from the shipped
images. The GPU is reported with its roofline preset and how it was identified (a Jetson by its
device tree). The JSON is rewritten after every step, so a hard kill keeps what was measured.
Exit status 0 when every check passed, 1 otherwise; 2 when there is no usable GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_postprocess_gpu as bench  # noqa: E402

from compactinst_ros.bench.devices import identify_device  # noqa: E402
from compactinst_ros.gpu import frames, loader, twin  # noqa: E402
from compactinst_ros.labels import SYNTHETIC_LABELS  # noqa: E402
from compactinst_ros.postprocess import reference  # noqa: E402
from compactinst_ros.preprocess import letterbox  # noqa: E402
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions  # noqa: E402

RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")
#: Row labels of the TensorRT backend check, by what ``import tensorrt`` gave.
TENSORRT_ROW = "TensorRT backend (FP16) vs onnxruntime"
STAND_IN_ROW = "TensorRT stand-in: ONNX Runtime vs ONNX Runtime, not FP16"


class Checks:
    """Collects check results (name, ok, detail and any measured values) and prints each."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, name: str, ok: bool, detail: str, **values: Any) -> None:
        """Record and print one check result; ``values`` go to the JSON only."""
        self.rows.append({"name": name, "ok": bool(ok), "detail": detail, **values})
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)

    @property
    def passed(self) -> bool:
        """True when every recorded check passed."""
        return all(row["ok"] for row in self.rows)


def environment() -> dict[str, str]:
    """Versions of what the GPU path uses (missing ones say so)."""
    env = {"python": sys.version.split()[0]}
    for mod in ("pycuda", "torch", "tensorrt", "cupy"):
        spec = importlib.util.find_spec(mod)
        if spec is None:
            env[mod] = "missing"
            continue
        try:
            env[mod] = str(getattr(__import__(mod), "__version__", "present"))
        except Exception as exc:  # a broken install is reported, not fatal
            env[mod] = f"broken ({type(exc).__name__})"
    return env


def tensorrt_is_stand_in() -> bool:
    """True when ``import tensorrt`` gives the test stand-in (it sets ``__stand_in__``)."""
    import tensorrt

    return bool(getattr(tensorrt, "__stand_in__", False))


def check_preprocess(cuda, stream, checks: Checks) -> None:
    """Kernel vs twin (tight) and vs OpenCV (grey-level tolerance) for every encoding, and the
    FP16 engines' half kernel against the float one rounded to half (the same bits)."""
    from compactinst_ros.gpu.preprocess import GpuPreprocessor

    pre, pre_half = GpuPreprocessor(frames.PAD), GpuPreprocessor(frames.PAD, np.float16)
    worst_twin = worst_cv = 0.0
    half_mismatches = 0
    for encoding in frames.ENCODINGS:
        for src_h, src_w, in_h, in_w in frames.GEOMETRIES:
            raw = frames.encode(frames.smooth_rgb(src_h, src_w, 0), encoding)
            meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
            dst = cuda.mem_alloc(4 * 3 * in_h * in_w)
            dst_half = cuda.mem_alloc(2 * 3 * in_h * in_w)
            pre.enqueue(stream, raw, encoding, meta, int(dst))
            pre_half.enqueue(stream, raw, encoding, meta, int(dst_half))
            out = np.empty((1, 3, in_h, in_w), np.float32)
            out_half = np.empty((1, 3, in_h, in_w), np.float16)
            stream.synchronize()
            cuda.memcpy_dtoh(out, dst)
            cuda.memcpy_dtoh(out_half, dst_half)
            expected = twin.letterbox(raw, encoding, meta, frames.PAD)
            cpu = letterbox(raw, encoding, meta, frames.PAD)
            worst_twin = max(worst_twin, float(np.abs(out - expected).max()))
            worst_cv = max(worst_cv, float(np.abs(out - cpu).max()))
            rounded = out.astype(np.float16).view(np.uint16)
            half_mismatches += int((out_half.view(np.uint16) != rounded).sum())
    checks.add(
        "preprocess kernel vs twin", worst_twin <= 1e-3, f"max |diff| {worst_twin:.2e}",
        max_abs_diff=worst_twin,
    )  # fmt: skip
    checks.add(
        "preprocess kernel vs OpenCV", worst_cv <= 2.5, f"max |diff| {worst_cv:.3f} levels",
        max_abs_diff=worst_cv,
    )  # fmt: skip
    checks.add(
        "half preprocess kernel = float one rounded", half_mismatches == 0,
        f"{half_mismatches} values differ", mismatches=half_mismatches,
    )  # fmt: skip


def check_overlay(cuda, stream, checks: Checks) -> None:
    """Overlay kernels vs their twin, instance and panoptic ids, rgb8 and uyvy frames."""
    from compactinst_ros.gpu.overlay import GpuOverlay

    ov = GpuOverlay()
    rng = np.random.default_rng(0)
    h, w = 96, 160
    inst = np.kron(rng.integers(0, 6, (12, 20)), np.ones((8, 8), int)).astype(np.uint16)
    seg_ids = np.array([5, 1001, 1002, 6007], np.int32)
    pan = seg_ids[rng.integers(0, 4, (12, 20))].repeat(8, 0).repeat(8, 1).astype(np.int32)
    pan[:8] = 0
    lut = rng.integers(0, 256, (6, 3), dtype=np.uint8)
    worst = 0
    for encoding in ("rgb8", "uyvy"):
        raw = frames.encode(frames.smooth_rgb(h, w, 1), encoding)
        d_raw = cuda.to_device(np.ascontiguousarray(raw))
        d_out = cuda.mem_alloc(h * w * 3)
        for ids, sorted_ids in ((inst, None), (pan, np.sort(seg_ids))):
            d_ids = cuda.to_device(ids)
            lut_used = lut[: 1 + (len(sorted_ids) if sorted_ids is not None else 5)]
            ov.enqueue(
                stream, src_ptr=int(d_raw), shape=raw.shape, encoding=encoding,
                ids_ptr=int(d_ids), lut=lut_used, alpha=0.45, out_ptr=int(d_out),
                sorted_ids=sorted_ids,
            )  # fmt: skip
            stream.synchronize()
            out = np.empty((h, w, 3), np.uint8)
            cuda.memcpy_dtoh(out, d_out)
            expected = twin.overlay(raw, encoding, ids, lut_used, 0.45, sorted_ids)
            worst = max(worst, int(np.abs(out.astype(int) - expected.astype(int)).max()))
    checks.add(
        "overlay kernels vs twin", worst <= 1, f"max |diff| {worst} levels", max_levels=worst
    )


def check_lift(cuda, stream, checks: Checks) -> None:
    """Lift kernels vs their twin (exact fields equal, sums to 1e-12 relative) and vs
    spatial.lift_depth (centroid to 1e-6 m) on every scene of ``gpu.lift_twin.SCENES``."""
    from compactinst_ros.gpu.lift_twin import check_against_twin

    ok, detail, worst = check_against_twin(stream)
    checks.add("lift kernels vs twin", ok, detail, **worst)


def _run_post(cuda, stream, raw, meta, labels, options, outputs):
    from compactinst_ros.gpu.postprocess import GpuPostprocessor

    q, h, w = raw.mask_logits.shape
    post = GpuPostprocessor(labels, q, h, w, raw.mask_stride)
    d_cls = cuda.to_device(np.ascontiguousarray(raw.class_logits, np.float32))
    d_masks = cuda.to_device(np.ascontiguousarray(raw.mask_logits, np.float32))
    post.enqueue(stream, int(d_cls), int(d_masks), meta, options, outputs)
    stream.synchronize()
    return post.collect(meta, outputs)


def check_postprocess(cuda, stream, checks: Checks, quick: bool) -> None:
    """Fused kernels vs twin and reference on the unit-test frames and a benchmark frame."""
    cases = [
        (raw, FrameMeta.letterbox(a, b, c, d), SYNTHETIC_LABELS, frames.OPTIONS)
        for raw, a, b, c, d in frames.CASES
    ]
    for seed in range(4 if quick else 12):
        if seed % 2:
            raw = frames.random_frame(seed, q=40, h=16, w=32)
        else:
            raw = frames.blob_frame(seed, q=60, h=32, w=64)
        h, w = raw.mask_logits.shape[1:]
        meta = FrameMeta.letterbox(h * 8 + 7 * seed, w * 8 - 3 * seed, h * 8, w * 8)
        cases.append((raw, meta, SYNTHETIC_LABELS, frames.OPTIONS))
    raw, meta = bench.frame_for("512x1024")
    cases.append((raw, meta, bench.BENCH_LABELS, PostprocessOptions()))
    worst_twin, worst_ref, table_ok = 1.0, 1.0, True
    for raw, meta, labels, options in cases:
        for outputs in (OutputSet(), OutputSet(instance=False, semantic=False)):
            gpu = _run_post(cuda, stream, raw, meta, labels, options, outputs)
            expected = twin.TwinFrame(raw, meta, labels, options, outputs).postprocess()
            ref = reference.postprocess(raw, meta, labels, options, outputs)
            for name in RASTERS:
                a = getattr(gpu, name)
                if a is None:
                    table_ok &= getattr(ref, name) is None
                    continue
                worst_twin = min(worst_twin, bench.agreement(a, getattr(expected, name)))
                worst_ref = min(worst_ref, bench.agreement(a, getattr(ref, name)))
                table_ok &= a.dtype == getattr(ref, name).dtype
            if outputs.instance:
                table_ok &= len(gpu.instances) == len(ref.instances)
                table_ok &= bool(np.allclose(gpu.instances.score, ref.instances.score, rtol=1e-4))
                table_ok &= bool(np.array_equal(gpu.instances.box, ref.instances.box))
                table_ok &= bool(np.array_equal(gpu.instances.area, ref.instances.area))
            table_ok &= bool(np.array_equal(gpu.segments.ids, ref.segments.ids))
            table_ok &= bool(np.array_equal(gpu.segments.area, ref.segments.area))
    checks.add(
        "postprocess kernels vs twin", worst_twin >= 0.9999,
        f"worst {100 * worst_twin:.4f}% equal", worst_equal=worst_twin, frames=len(cases),
    )  # fmt: skip
    checks.add(
        "postprocess kernels vs reference", worst_ref >= 0.999,
        f"worst {100 * worst_ref:.4f}% equal", worst_equal=worst_ref, frames=len(cases),
    )  # fmt: skip
    checks.add("postprocess tables vs reference", table_ok, "ids, scores, boxes, areas, dtypes")


def _engine_files(folder: Path) -> dict[str, int]:
    """Engine file name -> mtime (ns) in ``folder``: what a build changes."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.engine")}


def check_backend(bundle_path: str, checks: Checks, reps: int, cache_dir: Path | None) -> None:
    """TensorRT backend end to end vs onnxruntime on scenes the model was trained on (its
    masks on out-of-distribution frames flip with sub-grey-level input differences): engine
    build (or load, from ``cache_dir``) seconds, worst raster agreement, median per-stage ms
    over ``reps``. Without ``cache_dir`` the engines are built into a fresh temporary folder."""
    from compactinst_ros.pipeline import Pipeline
    from compactinst_ros.train.synthetic import render_scene

    stand_in = tensorrt_is_stand_in()
    with tempfile.TemporaryDirectory(prefix="engines-") as scratch:
        cache = cache_dir or Path(scratch)
        before = _engine_files(cache)
        start = time.perf_counter()
        gpu_pipe = Pipeline(bundle_path, backend="tensorrt", engine_cache_dir=str(cache))
        build_s = time.perf_counter() - start
        built = _engine_files(cache) != before
        cpu_pipe = Pipeline(bundle_path, backend="onnxruntime")
        with gpu_pipe as gpu, cpu_pipe as cpu:
            agree = 1.0
            for seed in (1, 2, 3):
                frame = render_scene(seed, 0, 480, 640).image
                a, b = gpu(frame), cpu(frame)
                agree = min(
                    agree, *(bench.agreement(getattr(a, n), getattr(b, n)) for n in RASTERS)
                )
            runs = [gpu(frame).timings_ms for _ in range(max(1, reps))]
    latency = {k: statistics.median(t[k] for t in runs) for k in runs[-1]}
    times = ", ".join(f"{k} {v:.2f}" for k, v in latency.items())
    ready = f"{'built' if built else 'loaded from the cache'} in {build_s:.1f} s"
    detail = f"engines {ready}; worst {100 * agree:.2f}% equal over 3 scenes; ms: {times}"
    checks.add(
        STAND_IN_ROW if stand_in else TENSORRT_ROW, agree >= 0.99, detail,
        tensorrt_stand_in=stand_in, build_s=build_s, engines_built=built, worst_equal=agree,
        latency_ms=latency,
    )  # fmt: skip


def check_typed_engines(bundle_path: str, checks: Checks, cache_dir: Path | None) -> None:
    """Per typed precision (fp16, int8): parse each stage's graph (printing the parser log on
    failure), then build or load its engines, which the acceptance check on the golden cases
    admits or refuses; one row per precision."""
    import tensorrt as trt

    from compactinst_ros.backends import trt_build
    from compactinst_ros.backends.engine_cache import EngineCache
    from compactinst_ros.bundle import ModelBundle
    from compactinst_ros.errors import BackendError

    bundle = ModelBundle.load(bundle_path)
    for precision in ("fp16", "int8"):
        name = f"TensorRT {trt.__version__} {precision} engines: parse, build, acceptance"
        if precision not in bundle.precisions:
            checks.add(name, False, f"the bundle has no {precision} graphs")
            continue
        failed = []
        for stage in bundle.stages:
            graph = bundle.stage_graph(stage.name, precision)
            errors = trt_build.parser_log(trt, trt_build.parser_bytes(graph))
            if errors:
                failed.append(f"{stage.name} ({len(errors)} parser errors)")
                print(f"parser log, {precision} {stage.name} ({graph.sha256[:12]}):")
                for error in errors:
                    print(f"    {error}")
        if failed:
            checks.add(name, False, "the parser refused " + ", ".join(failed), parsed=False)
            continue
        with tempfile.TemporaryDirectory(prefix="engines-") as scratch:
            cache = EngineCache(cache_dir or scratch)
            runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            start = time.perf_counter()
            try:
                trt_build.ensure_engines(
                    bundle, cache, runtime.deserialize_cuda_engine, trt_build.device_info(0),
                    precision, log=print,
                )  # fmt: skip
            except BackendError as exc:
                checks.add(name, False, str(exc), parsed=True)
                continue
        cases = len(bundle.golden_cases(precision))
        checks.add(
            name, cases > 0,
            f"parsed; engines ready in {time.perf_counter() - start:.1f} s; acceptance "
            + (f"passed on {cases} golden cases" if cases else "not run: no golden cases"),
            parsed=True, golden_cases=cases,
        )  # fmt: skip


def _json_safe(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN (not measured) as None."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_report(out_dir: Path, report: dict[str, Any]) -> Path:
    """OUTDIR/gpu_check.json with everything measured (null for what was not)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu_check.json"
    path.write_text(json.dumps(_json_safe(report), indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run every check that the machine supports; table last, JSON in --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "gpu_check")
    parser.add_argument("--bundle", help="model bundle for the TensorRT end-to-end check")
    parser.add_argument("--reps", type=int, default=30, help="benchmark repetitions")
    parser.add_argument("--quick", action="store_true", help="fewer parity frames, one bench size")
    parser.add_argument(
        "--sizes", nargs="+", choices=list(bench.SIZES), help="benchmark sizes (default: all)"
    )
    parser.add_argument(
        "--engine-cache", type=Path, help="engine cache to load from or build into (default: fresh)"
    )
    args = parser.parse_args(argv)
    env = environment()
    report: dict[str, Any] = {"environment": env, "checks": [], "benchmark": []}
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    if env["pycuda"] == "missing" or env["pycuda"].startswith("broken"):
        print("pycuda is needed: pip install pycuda (with nvcc and CUDA headers on PATH)")
        write_report(args.out, {**report, "error": "pycuda missing"})
        return 2
    import pycuda.driver as cuda

    cuda.init()
    if cuda.Device.count() == 0:
        print("no CUDA device")
        write_report(args.out, {**report, "error": "no CUDA device"})
        return 2
    # a time limit's SIGTERM unwinds through the finally below, so the JSON keeps what was measured
    previous_handler = signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    checks = Checks()
    rows: list[bench.Row] = []

    def snapshot() -> Path:
        """The JSON with everything so far (rewritten after every step)."""
        report["checks"] = checks.rows
        report["benchmark"] = [dataclasses.asdict(row) for row in rows]
        report["kernel_images"] = dict(loader.LOADED)
        return write_report(args.out, report)

    try:
        stream = cuda.Stream()
        report["gpu"] = cuda.Device(0).name()
        sms = cuda.Device(0).get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        device = identify_device(report["gpu"], sms)
        report["device_preset"] = device.label()
        print(f"GPU: {report['gpu']}, driver {cuda.get_driver_version()}; {device.label()}")
        for step in (
            lambda: check_preprocess(cuda, stream, checks),
            lambda: check_postprocess(cuda, stream, checks, args.quick),
            lambda: check_overlay(cuda, stream, checks),
            lambda: check_lift(cuda, stream, checks),
        ):
            try:
                step()
            except Exception:
                traceback.print_exc()
                checks.add("check crashed", False, "see traceback above")
            snapshot()
        sizes = args.sizes or (["1024x2048"] if args.quick else list(bench.SIZES))
        for size in sizes:
            print(f"benchmarking {size} ...", flush=True)
            rows.append(bench.bench_size(cuda, stream, size, args.reps, 1))
            snapshot()
        if args.bundle and env["tensorrt"] != "missing":
            try:
                check_backend(args.bundle, checks, args.reps, args.engine_cache)
            except Exception:
                traceback.print_exc()
                checks.add("TensorRT backend", False, "see traceback above")
            snapshot()
            try:
                check_typed_engines(args.bundle, checks, args.engine_cache)
            except Exception:
                traceback.print_exc()
                checks.add("TensorRT typed engines", False, "see traceback above")
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        ctx.pop()
        path = snapshot()
    print(f"written: {path}\n")
    print("kernel images: " + ", ".join(f"{k} {v}" for k, v in sorted(loader.LOADED.items())))
    print(f"checks: {sum(row['ok'] for row in checks.rows)}/{len(checks.rows)} passed")
    for row in checks.rows:
        print(f"  {'ok  ' if row['ok'] else 'FAIL'} {row['name']}: {row['detail']}")
    print(f"benchmark on {report['gpu']} ({report['device_preset']}), measured ms:")
    bench.print_table(rows)
    return 0 if checks.passed else 1


if __name__ == "__main__":
    sys.exit(main())
