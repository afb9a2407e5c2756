#!/usr/bin/env python3
"""One GPU measurement run (< 8 min on one NVIDIA GPU with PyTorch + CUDA; no TensorRT needed).

1. ``compactinst bench`` on PyTorch FP16 with CUDA graphs: FastInst-R18-D3, CompactInst-R18
   (PF 1/16), PF 1/32 and M 1/4; decoder-only and model-level; the six named resolutions.
2. The decoder as an Orin sees it (``compactinst_ros.bench.orin_proxies``): FastInst-D3 and
   CompactInst decoder latency at 1024x2048 on the whole GPU, with L2 flushed before each
   replay, and in green contexts of 8 and 16 SMs; the speed-up under each beside NVIDIA's
   builder's bytes per frame (``--engine-report``: a report.json of ``compactinst engine-report
   --paper``) and the paper's Orin Nano range.
3. Nsight Compute DRAM bytes of one FastInst and one CompactInst decoder pass at 1080x1920
   (padded to 1088x1920), FP16, with the per-kernel-class shares of ``compactinst roofline``
   (the paper: 5.74 -> 2.09 GB on an RTX A4000 under TensorRT).
4. Where TensorRT and pycuda import: the TensorRT backend on the default model at batch sizes 1-4
   (one camera frame per slot, default 720x1280): CUDA-event device time per batch and per frame,
   side by side, from one run (static-batch engines built first, into ``--engine-cache``:
   give a folder where ``compactinst build-engine --batch-sizes 1 2 3 4`` already built them to
   keep the run short).
5. Where TensorRT and pycuda import: frames overlapped against serialized, at 1080p for one
   camera and for three batched cameras. Serialized, each batch runs both halves before the next
   starts; overlapped, the next batch's uploads, preprocessing and encoder are enqueued on the
   encode stream while this batch is decoded on a second thread, as the staged node runs them
   (ros/worker.Finisher). Frames per second of each, in alternating rounds, median and spread.
6. A short table, printed last.

Usage (repository root)::

    python scripts/gpu_bench.py --out out/gpu_bench
    python scripts/gpu_bench.py --smoke        # CPU check of the whole flow, tiny sizes

Internal: ``--ncu-target CONFIG`` runs one profiled decoder pass (what ``ncu`` launches).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compactinst_ros.bench import latency, roofline  # noqa: E402
from compactinst_ros.bench.devices import (  # noqa: E402
    DEVICES,
    Device,
    Identified,
    get_device,
    identify_device,
)
from compactinst_ros.bench.models import (  # noqa: E402
    build_bench_model,
    feature_shapes,
    synthetic_features,
)
from compactinst_ros.bench.runners import SCOPES  # noqa: E402
from compactinst_ros.errors import CompactInstError, InputError  # noqa: E402

NCU_SIZE = (1088, 1920)
#: Cityscapes' 8 thing classes, as in the paper's latency models and the cost model's default.
NUM_CLASSES = 8
NCU_CONFIGS = ("fastinst_r18_d3", "compactinst_r18")
#: Column labels of the summary table.
SHORT = {
    "fastinst_r18_d3": "FastInst-D3",
    "compactinst_r18": "CI PF1/16",
    "compactinst_r18_pf32": "CI PF1/32",
    "compactinst_r18_m4": "CI M1/4",
}
#: Start no ncu run after this many seconds, so that the whole script stays under 8 minutes.
DEADLINE_S = 300
#: Batch sizes of the TensorRT batch step (a camera frame per slot).
BATCH_SIZES = (1, 2, 3, 4)
#: Camera counts of the overlap step (one batch of that many frames per round).
OVERLAP_CAMERAS = (1, 3)


def device_preset(gpu: str, sm_count: int | None, given: str | None) -> tuple[Device | None, str]:
    """(preset, the line naming it and how it was chosen): ``--device`` if given, else the
    identified GPU's (a Jetson by its device tree); None when no preset fits."""
    if given:
        device = get_device(given)
        return device, f"preset {given} ({device.name}; given with --device)"
    found: Identified = identify_device(gpu, sm_count)
    return (DEVICES[found.preset] if found.preset else None), found.label()


def ncu_target(config: str, size: tuple[int, int], device: str) -> None:
    """One decoder pass between cudaProfilerStart/Stop (ncu runs with --profile-from-start off)."""
    import torch

    model = build_bench_model(config, NUM_CLASSES)
    dtype = torch.float16 if device == "cuda" else torch.float32
    model = model.to(device=device, dtype=dtype)
    shapes = feature_shapes(model, *size)
    feats = {n: t.to(device=device, dtype=dtype) for n, t in synthetic_features(shapes).items()}
    with torch.no_grad():
        for _ in range(3):
            model.decode(feats)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        model.decode(feats)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    print(f"profiled one {config} decoder pass at {size[0]}x{size[1]}", flush=True)


def run_with_heartbeat(cmd: list[str], timeout_s: float, log: Path) -> tuple[int, str]:
    """Run ``cmd``, printing elapsed time and ``log``'s size every 15 s; kill it at timeout."""
    start = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        while True:
            try:
                output, _ = proc.communicate(timeout=15)
                return proc.returncode, output
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - start
                size = log.stat().st_size // 1024 if log.exists() else 0
                print(f"  ncu running {elapsed:.0f} s, log {size} KiB", flush=True)
                if elapsed > timeout_s:
                    proc.kill()
                    raise


def profile_decoder(ncu: str, config: str, out: Path, timeout_s: float) -> Path:
    """Run ``ncu`` on one decoder pass; retries with fewer metrics if the GPU lacks some."""
    csv_path = out / f"ncu_{config}_{NCU_SIZE[0]}x{NCU_SIZE[1]}.csv"
    bytes_only = [roofline.TIME, roofline.DRAM_READ, roofline.DRAM_WRITE]
    metric_sets = (  # from all metrics down to bytes only, for GPUs that lack some counters
        roofline.NCU_METRICS,
        ",".join([*bytes_only, *roofline.CUDA_OPS, roofline.TENSOR_INST]),
        ",".join([*bytes_only, *roofline.CUDA_OPS, *roofline.TENSOR_OPS]),
        ",".join(bytes_only),
    )
    for metrics in metric_sets:
        cmd = [
            ncu,
            "--csv",
            "--print-units",
            "base",
            "--profile-from-start",
            "off",
            "--metrics",
            metrics,
            "--log-file",
            str(csv_path),
            sys.executable,
            str(Path(__file__).resolve()),
            "--ncu-target",
            config,
        ]
        print("  $ " + " ".join(cmd), flush=True)
        csv_path.unlink(missing_ok=True)
        returncode, output = run_with_heartbeat(cmd, timeout_s, csv_path)
        text = csv_path.read_text(errors="replace") if csv_path.exists() else ""
        if returncode == 0 and '"ID"' in text:
            return csv_path
        print(f"  ncu exit {returncode}: {(output or text)[-600:]}", flush=True)
    raise RuntimeError(
        f"ncu produced no kernel table for {config} (see the messages above; "
        "ERR_NVGPUCTRPERM means profiling needs root or "
        "NVreg_RestrictProfilingToAdminUsers=0)"
    )


def camera_items(pipe: Any, cameras: int, frame: tuple[int, int]) -> list:
    """One prepared bgr8 frame of ``frame`` size per camera, each its own content, every
    output asked for."""
    import numpy as np

    from compactinst_ros.gpu.frames import smooth_rgb
    from compactinst_ros.structures import OutputSet

    return [
        pipe.prepare(np.ascontiguousarray(smooth_rgb(*frame, seed)[..., ::-1]), "bgr8", OutputSet())
        for seed in range(cameras)
    ]


def batch_step(
    bundle: str | Path, sizes: list[int], frame: tuple[int, int], iters: int, cache_dir: Path
) -> list[dict]:
    """The TensorRT backend on ``bundle`` with a static-batch engine per size: per size, the
    median (and spread) over ``iters`` batches of the CUDA-event device time (preprocess +
    encoder + decoder + postprocess) per batch and per frame, and the host's wall time."""
    from compactinst_ros.backends.trt import TIMED_STAGES
    from compactinst_ros.pipeline import Pipeline
    from compactinst_ros.structures import INFERENCE

    rows = []
    with Pipeline(
        bundle, backend="tensorrt", batch_sizes=tuple(sizes), engine_cache_dir=cache_dir
    ) as pipe:
        for n in sizes:
            items = camera_items(pipe, n, frame)
            trackers = [pipe.make_tracker() for _ in items]
            pipe.infer_batch(items, trackers)  # warm-up
            device, wall = [], []
            for _ in range(iters):
                timings = pipe.infer_batch(items, trackers)[0].timings_ms
                device.append(sum(timings[k] for k in TIMED_STAGES))
                wall.append(timings[INFERENCE])
            per_batch = statistics.median(device)
            rows.append(
                {
                    "batch": n,
                    "device_ms_per_batch": per_batch,
                    "device_ms_per_frame": per_batch / n,
                    "device_ms_spread": [min(device), max(device)],
                    "wall_ms_per_batch": statistics.median(wall),
                }
            )
    return rows


def run_serialized(pipe: Any, items: list, trackers: list, batches: int) -> None:
    """``batches`` batches of ``items``, each whole before the next starts."""
    for _ in range(batches):
        pipe.infer_batch(items, trackers)


def run_overlapped(pipe: Any, items: list, trackers: list, batches: int) -> None:
    """``batches`` batches of ``items``: each encoded here while the one before is decoded on
    the finishing thread, as the staged node runs them."""
    from compactinst_ros.ros.worker import Finisher

    finisher = Finisher(lambda started: pipe.decode_batch(started, trackers), "bench_finish")
    for _ in range(batches):
        finisher.put(pipe.encode_batch(items))
    finisher.close()


def overlap_step(
    bundle: str | Path,
    cameras: tuple[int, ...],
    frame: tuple[int, int],
    batches: int,
    rounds: int,
    cache_dir: Path,
) -> list[dict]:
    """Frames per second of the TensorRT backend on ``bundle``, serialized against overlapped,
    per camera count: ``rounds`` alternating rounds of ``batches`` batches each (every output
    asked for, tracking on, as the node runs); per count the median and spread of each and the
    ratio of the medians."""
    from compactinst_ros.pipeline import Pipeline

    rows = []
    with Pipeline(
        bundle, backend="tensorrt", tracking=True, batch_sizes=tuple(sorted(set(cameras))),
        engine_cache_dir=cache_dir,
    ) as pipe:  # fmt: skip
        for n in cameras:
            items = camera_items(pipe, n, frame)
            trackers = [pipe.make_tracker() for _ in items]

            runs = {"serialized": run_serialized, "overlapped": run_overlapped}
            for run in runs.values():  # warm-up: engines, buffers, kernels, both ring slots
                run(pipe, items, trackers, 2)
            fps: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(rounds):
                for name, run in runs.items():
                    began = time.perf_counter()
                    run(pipe, items, trackers, batches)
                    fps[name].append(batches * n / (time.perf_counter() - began))
            medians = {name: statistics.median(v) for name, v in fps.items()}
            rows.append(
                {
                    "cameras": n,
                    "frame": list(frame),
                    **{f"{name}_fps": m for name, m in medians.items()},
                    **{f"{name}_fps_spread": [min(v), max(v)] for name, v in fps.items()},
                    "overlapped_over_serialized": medians["overlapped"] / medians["serialized"],
                }
            )
    return rows


def overlap_table(rows: list[dict]) -> list[str]:
    """One line per camera count: serialized and overlapped FPS (median, spread) and the ratio."""
    lines = [f"{'cameras':>7} {'serialized FPS':>22} {'overlapped FPS':>22} {'ratio':>6}"]
    for r in rows:
        cells = [
            f"{r[f'{k}_fps']:7.1f} ({r[f'{k}_fps_spread'][0]:.1f}-{r[f'{k}_fps_spread'][1]:.1f})"
            for k in ("serialized", "overlapped")
        ]
        lines.append(
            f"{r['cameras']:>7} {cells[0]:>22} {cells[1]:>22} "
            f"{r['overlapped_over_serialized']:>5.2f}x"
        )
    return lines


def builder_bytes(report: Path | None) -> dict[str, float] | None:
    """Decoder bytes per frame by config from a ``compactinst engine-report --paper``
    report.json (None without one)."""
    if report is None:
        return None
    paper = json.loads(report.read_text()).get("paper", {})
    return {config: float(r["summary"]["bytes_per_frame"]) for config, r in paper.items()}


def batch_table(rows: list[dict]) -> list[str]:
    """One line per batch size: device ms per batch and per frame, spread, wall ms."""
    lines = [f"{'batch':>5} {'ms/batch':>9} {'ms/frame':>9} {'min-max ms':>15} {'wall ms':>8}"]
    for r in rows:
        low, high = r["device_ms_spread"]
        lines.append(
            f"{r['batch']:>5} {r['device_ms_per_batch']:>9.2f} {r['device_ms_per_frame']:>9.2f} "
            f"{low:>7.2f}-{high:<7.2f} {r['wall_ms_per_batch']:>8.2f}"
        )
    return lines


def speedup_table(record: dict) -> list[str]:
    """Compact rows: size, then speed-up vs FastInst per config, per scope (decoder, model)."""
    lines = []
    for scope in SCOPES:
        rows = [r for r in record["results"] if r["scope"] == scope]
        if not rows:
            continue
        configs = list(dict.fromkeys(r["config"] for r in rows))
        lines.append(
            f"{scope:<8} {'size':>10} " + " ".join(f"{SHORT.get(c, c):>16}" for c in configs)
        )
        for size in dict.fromkeys(tuple(r["size"]) for r in rows):
            cells = {r["config"]: r for r in rows if tuple(r["size"]) == size}
            lines.append(
                f"{'':<8} {size[0]:>4}x{size[1]:<5} "
                + " ".join(
                    f"{cells[c]['median_ms']:>8.2f}ms {cells[c]['speedup']:>4.2f}x" for c in configs
                )
            )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "gpu_bench")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CPU check of the flow: torch-cpu, one small size, one trial",
    )
    parser.add_argument("--skip-ncu", action="store_true", help="latency sweep only")
    parser.add_argument(
        "--device",
        help=f"roofline preset ({', '.join(DEVICES)}) or 'label:GBps:tensor_TFLOPS[:cuda_TFLOPS]'"
        " instead of the identified GPU's",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=list(BATCH_SIZES),
        metavar="B",
        help="TensorRT batch step: batch sizes, one engine set each (default 1 2 3 4)",
    )
    parser.add_argument(
        "--batch-frame",
        type=_size,
        default=(720, 1280),
        metavar="HxW",
        help="TensorRT batch step: camera frame size (default 720x1280)",
    )
    parser.add_argument(
        "--engine-cache",
        type=Path,
        default=None,
        help="TensorRT batch step: engine cache folder (default OUT/engines)",
    )
    parser.add_argument(
        "--overlap-frame",
        type=_size,
        default=(1080, 1920),
        metavar="HxW",
        help="TensorRT overlap step: camera frame size (default 1080x1920)",
    )
    parser.add_argument(
        "--skip-batches", action="store_true", help="no TensorRT batch or overlap step"
    )
    parser.add_argument(
        "--skip-proxies", action="store_true", help="no Orin proxies of the decoder (step 2)"
    )
    parser.add_argument(
        "--engine-report",
        type=Path,
        default=None,
        help="report.json of 'compactinst engine-report --paper': the builder's decoder bytes "
        "per frame, printed beside the proxies",
    )
    parser.add_argument("--ncu-target", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.batch_sizes) < 1:
        parser.error(f"--batch-sizes {args.batch_sizes}: every size must be >= 1")
    return args


def _size(text: str) -> tuple[int, int]:
    """``HxW`` -> (H, W)."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not HxW, e.g. 720x1280") from None
    return h, w


def main(argv: list[str] | None = None) -> int:
    """Bench, then ncu, then TensorRT batches, then the summary table; everything also lands in
    ``--out``."""
    args = parse_args(argv)

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.ncu_target:
        ncu_target(args.ncu_target, (256, 320) if device == "cpu" else NCU_SIZE, device)
        return 0
    if device == "cpu" and not args.smoke:
        print("no CUDA device: this script needs an NVIDIA GPU (use --smoke for a CPU check)")
        return 2
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    sm_count = None
    if device == "cuda":
        sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    preset, preset_line = device_preset(gpu, sm_count, args.device)
    print(f"[1/6] latency sweep on {gpu}; roofline {preset_line}", flush=True)
    if args.smoke:
        opts = latency.BenchOptions(
            sizes=[("small", (256, 320))],
            backends=["torch-cpu"],
            warmup=1,
            iters=1,
            trials=1,
            threads=2,
            num_classes=NUM_CLASSES,
            workdir=args.out / "bundles",
        )
    else:
        opts = latency.BenchOptions(
            backends=["torch-cuda"],
            warmup=10,
            iters=20,
            trials=5,
            threads=4,
            num_classes=NUM_CLASSES,
            workdir=args.out / "bundles",
        )
    record = latency.run_sweep(opts, lambda m: print(m, flush=True))
    (args.out / "bench.json").write_text(json.dumps(record, indent=1))
    try:
        latency.write_outputs(record, args.out)
    except ImportError as exc:
        print(f"  no figures ({exc})")
    print(f"  sweep took {time.perf_counter() - start:.0f} s", flush=True)

    proxies: list = []
    print("[2/6] the decoder as an Orin sees it (L2 flushed, few SMs)", flush=True)
    if args.skip_proxies or args.smoke:
        print("  skipped", flush=True)
    else:
        from compactinst_ros.bench import orin_proxies

        proxies = orin_proxies.measure(log=lambda m: print(m, flush=True))
        (args.out / "orin_proxies.json").write_text(
            json.dumps([dataclasses.asdict(r) | {"ratio": r.ratio} for r in proxies], indent=1)
        )

    dram: dict[str, dict] = {}
    ncu = roofline.find_ncu()
    print(f"[3/6] Nsight Compute decoder DRAM bytes at {NCU_SIZE[0]}x{NCU_SIZE[1]}", flush=True)
    if args.skip_ncu or args.smoke or ncu is None or device == "cpu" or preset is None:
        why = "skipped" if args.skip_ncu or args.smoke else "ncu not found"
        if preset is None:
            why = f"no roofline device: {preset_line}; give --device PRESET or a custom spec"
        print(f"  {why}", flush=True)
    else:
        for config in NCU_CONFIGS:
            if time.perf_counter() - start > DEADLINE_S:
                print(f"  {config}: skipped, past the {DEADLINE_S} s budget", flush=True)
                continue
            try:
                csv_path = profile_decoder(ncu, config, args.out, timeout_s=140)
                kernels = roofline.parse_ncu_csv(csv_path.read_text(errors="replace"))
            except (RuntimeError, subprocess.TimeoutExpired, InputError) as exc:
                print(f"  {config}: {exc}", flush=True)
                continue
            summary = roofline.summarize(kernels, preset)
            dram[config] = summary
            print(roofline.format_table(summary, preset), flush=True)
        record_ncu = {"device_preset": preset_line, **dram}
        (args.out / "ncu_summary.json").write_text(json.dumps(record_ncu, indent=1))

    batches: list[dict] = []
    print(f"[4/6] TensorRT batches {args.batch_sizes} at {args.batch_frame}", flush=True)
    if args.skip_batches or args.smoke:
        print("  skipped", flush=True)
    else:
        from compactinst_ros.bundle import default_bundle_path

        try:
            batches = batch_step(
                default_bundle_path(), sorted(set(args.batch_sizes)), args.batch_frame, 50,
                args.engine_cache or args.out / "engines",
            )  # fmt: skip
            print("\n".join(batch_table(batches)), flush=True)
        except CompactInstError as exc:  # no TensorRT or pycuda here: the step says why
            print(f"  not run: {exc}", flush=True)
        (args.out / "batches.json").write_text(json.dumps(batches, indent=1))

    overlap: list[dict] = []
    frame = args.overlap_frame
    print(
        f"[5/6] TensorRT frames overlapped vs serialized, {list(OVERLAP_CAMERAS)} cameras at "
        f"{frame[0]}x{frame[1]}", flush=True,
    )  # fmt: skip
    if args.skip_batches or args.smoke:
        print("  skipped", flush=True)
    else:
        from compactinst_ros.bundle import default_bundle_path

        try:
            overlap = overlap_step(
                default_bundle_path(), OVERLAP_CAMERAS, frame, 30, 5,
                args.engine_cache or args.out / "engines",
            )  # fmt: skip
            print("\n".join(overlap_table(overlap)), flush=True)
        except CompactInstError as exc:
            print(f"  not run: {exc}", flush=True)
        (args.out / "overlap.json").write_text(json.dumps(overlap, indent=1))

    print(f"[6/6] summary ({time.perf_counter() - start:.0f} s in all)\n", flush=True)
    for backend, reason in record["unavailable"].items():
        print(f"{backend}: not available ({reason})")
    graphed = {r["cuda_graph"] for r in record["results"]}
    print(
        f"GPU: {gpu}; PyTorch {torch.__version__} "
        f"{'FP16, CUDA graphs' if graphed == {True} else 'FP16/FP32 eager where not graphed'}"
        f"; median of {opts.trials} trials; ms and speed-up vs {latency.BASELINE}"
    )
    print("\n".join(speedup_table(record)))
    if dram:
        print(
            f"\ndecoder DRAM bytes at {NCU_SIZE[0]}x{NCU_SIZE[1]} (paper, A4000 TensorRT: "
            f"5.74 -> 2.09 GB, -64%); ridges and % of peak from {preset_line}"
        )
        for config, s in dram.items():
            print(
                f"  {config:<18} {s['all']['dram_gb']:7.3f} GB   CUDA-core kernels: "
                f"{100 * s['cuda-core']['time_share']:.0f}% of time, "
                f"{100 * s['cuda-core']['bytes_share']:.0f}% of bytes"
            )
        if len(dram) == 2:
            a, b = (dram[c]["all"]["dram_gb"] for c in NCU_CONFIGS)
            print(f"  reduction          {100 * (1 - b / a):6.1f}%")
    if batches:
        print(
            f"\nTensorRT batches at {args.batch_frame[0]}x{args.batch_frame[1]} (default model, "
            "CUDA-event device time, median of 50 batches):"
        )
        print("\n".join(batch_table(batches)))
    if overlap:
        print(
            f"\nTensorRT frames at {frame[0]}x{frame[1]}, every output, tracking on: overlapped "
            "(two streams, two threads) vs serialized, median (min-max) of 5 rounds of 30 batches:"
        )
        print("\n".join(overlap_table(overlap)))
    if proxies:
        from compactinst_ros.bench import orin_proxies

        print(
            f"\ndecoder at {orin_proxies.SIZE[0]}x{orin_proxies.SIZE[1]}, PyTorch FP16, CUDA "
            "graphs, median of 30 replays, under each Orin proxy:"
        )
        print("\n".join(orin_proxies.table(proxies, builder_bytes(args.engine_report))))
    return 0 if record["results"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
