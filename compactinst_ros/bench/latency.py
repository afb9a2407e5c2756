"""``compactinst bench``: decoder-only and model-level latency across configs and resolutions.

Protocol (the paper's): batch 1, static shapes, warm-up, then ``--trials`` rounds in which every
config is timed once (the order alternates each round so drift hits all configs alike); the
reported latency is the median of the rounds. Decoder-only timing feeds preallocated synthetic
pixel-decoder maps (``e3``, ``e4`` and, for M 1/4, ``e2``). Sizes are HxW and are padded up to
multiples of 32 as the model requires (1080 -> 1088).

Backends: ``onnxruntime`` (CPU, FP32, stage graphs exported with the export module's wrappers),
``torch-cuda`` (FP16, CUDA graphs, CUDA-event timing), ``tensorrt`` (FP16 engines built by
``compactinst_ros.backends.trt_build``), and ``torch-cpu`` (FP32 eager; exercises the torch
path where there is no GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import BackendError, ConfigError

if TYPE_CHECKING:
    import torch

BASELINE = "fastinst_r18_d3"
DEFAULT_CONFIGS = ("fastinst_r18_d3", "compactinst_r18", "compactinst_r18_pf32",
                   "compactinst_r18_m4")
#: The six named resolutions of the sweep (HxW before padding to /32).
NAMED_SIZES: dict[str, tuple[int, int]] = {
    "vga": (480, 640),
    "square640": (640, 640),
    "hd720": (720, 1280),
    "square1024": (1024, 1024),
    "fullhd": (1080, 1920),
    "cityscapes": (1024, 2048),
}
BACKEND_NAMES = ("onnxruntime", "torch-cuda", "tensorrt", "torch-cpu")
STAGES = ("decoder", "model")


def pad32(height: int, width: int) -> tuple[int, int]:
    """Round both sides up to the backbone stride 32 (the model's size divisibility)."""
    return -(-height // 32) * 32, -(-width // 32) * 32


def parse_sizes(text: str) -> list[tuple[str, tuple[int, int]]]:
    """``'vga,1080x1920'`` -> [(name, (H, W)), ...]; names from NAMED_SIZES or ``HxW``."""
    sizes = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item in NAMED_SIZES:
            sizes.append((item, NAMED_SIZES[item]))
            continue
        try:
            h, w = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise ConfigError(f"size '{item}' must be HxW (e.g. 1080x1920) or one of "
                              f"{', '.join(NAMED_SIZES)}") from None
        if h < 160 or w < 160:
            raise ConfigError(f"size {item}: both sides must be >= 160 (the query proposal needs "
                              "100 cells on the 1/16 grid)")
        sizes.append((f"{h}x{w}", (h, w)))
    if not sizes:
        raise ConfigError("--sizes is empty; give e.g. vga,fullhd or 480x640")
    return sizes


def feature_shapes(model: torch.nn.Module, height: int, width: int) -> dict[str, tuple]:
    """Decoder inputs (encoder outputs) for a padded input: e3 at 1/8, e4 at 1/16, e2 at 1/4."""
    dim = model.cfg.hidden_dim
    strides = {"e2": 4, "e3": 8, "e4": 16}
    return {n: (1, dim, height // strides[n], width // strides[n]) for n in model.encoder_outputs}


class Runner(Protocol):
    """One prepared inference; ``time(iters)`` runs it ``iters`` times, returns ms per run."""

    def time(self, iters: int) -> float:
        """Mean wall (CPU) or device (CUDA events) milliseconds per run."""
        ...


@dataclass
class WallRunner:
    """Times a synchronous callable with ``time.perf_counter``."""

    fn: Callable[[], object]

    def time(self, iters: int) -> float:
        """Mean milliseconds per call."""
        start = time.perf_counter()
        for _ in range(iters):
            self.fn()
        return (time.perf_counter() - start) * 1e3 / iters


class CudaGraphRunner:
    """Captures ``fn`` on static CUDA inputs once and times graph replays with CUDA events.

    Falls back to eager launches (``graphed`` = False) when the model cannot be captured.
    """

    def __init__(self, fn: Callable[[], object]) -> None:
        import torch

        self.fn = fn
        self.graph = None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        try:
            # A host sync (e.g. a pageable host->device copy in forward) would break the
            # capture and can leave CUDA in a bad state: probe for one first.
            torch.cuda.set_sync_debug_mode("error")
            with torch.no_grad():
                fn()
            torch.cuda.set_sync_debug_mode("default")
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph):
                fn()
            self.graph = graph
        except RuntimeError as exc:
            print(f"  not capturable as a CUDA graph ({str(exc).splitlines()[0]}); timing "
                  "eager launches", flush=True)
            with contextlib.suppress(RuntimeError):
                torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        self.graphed = self.graph is not None

    def time(self, iters: int) -> float:
        """Mean device milliseconds per run between two CUDA events."""
        import torch

        step = self.graph.replay if self.graph is not None else self.fn
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.no_grad():
            start.record()
            for _ in range(iters):
                step()
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters


def measure(runners: dict[str, Runner], warmup: int, iters: int, trials: int,
            progress: Callable[[str], None] = print) -> dict[str, list[float]]:
    """Warm every runner up, then ``trials`` alternating rounds; ms per run, per config."""
    for name, runner in runners.items():
        if warmup:
            runner.time(warmup)
            progress(f"    warmed up {name}")
    order = list(runners)
    times: dict[str, list[float]] = {name: [] for name in order}
    for trial in range(trials):
        for name in order if trial % 2 == 0 else order[::-1]:
            times[name].append(runners[name].time(iters))
        progress(f"    trial {trial + 1}/{trials}: " + ", ".join(
            f"{n} {times[n][-1]:.2f} ms" for n in order))
    return times


def backend_status(name: str) -> str | None:
    """None when backend ``name`` can run here, else why not (and how to get it)."""
    if name == "onnxruntime":
        return None if importlib.util.find_spec("onnxruntime") else "onnxruntime not installed"
    if name == "torch-cpu":
        return None
    if name == "tensorrt":
        for module, hint in (("tensorrt", "TensorRT Python bindings (JetPack: python3-libnvinfer)"),
                             ("pycuda", "pycuda (pip install pycuda)")):
            if importlib.util.find_spec(module) is None:
                return f"{hint} not installed"
        return None
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device (needs an NVIDIA GPU and a CUDA build of torch)"
    return None


def build_bench_model(config: str, num_classes: int | None, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised model in eval mode (latency does not depend on the weights)."""
    import torch

    from ..model import build_model

    torch.manual_seed(seed)
    overrides = {"num_classes": num_classes} if num_classes else {}
    return build_model(config, **overrides).eval()


def synthetic_features(shapes: dict[str, tuple], seed: int = 0) -> dict[str, torch.Tensor]:
    """Preallocated N(0, 1) feature maps, float32 on the CPU."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=gen) for n, s in shapes.items()}


def export_stages(model: torch.nn.Module, stage: str, size: tuple[int, int], workdir: Path,
                  tag: str) -> list[Path]:
    """Stage ONNX graphs (opset 17, static, the export module's wrappers), cached by ``tag``."""
    import torch

    from ..export.onnx_export import OPSET, wrap_decoder, wrap_encoder

    names = list(model.encoder_outputs)
    graphs = []
    if stage == "model":
        graphs.append(("encoder", wrap_encoder(model), (torch.zeros(1, 3, *size),),
                       ["image"], names))
    graphs.append(("decoder", wrap_decoder(model),
                   tuple(synthetic_features(feature_shapes(model, *size)).values()), names,
                   ["pred_logits", "pred_masks"]))
    paths = []
    for part, module, args, inputs, outputs in graphs:
        path = workdir / f"{tag}_{part}.onnx"
        if not path.exists():
            # Static shapes are intended: silence the tracer's shape-to-int warnings.
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET,
                                  input_names=inputs, output_names=outputs,
                                  do_constant_folding=True)
        paths.append(path)
    return paths


def _ort_runner(model: torch.nn.Module, stage: str, size: tuple[int, int], workdir: Path,
                tag: str, threads: int) -> Runner:
    """ONNX Runtime (CPU) on the exported stage graphs, fed preallocated inputs."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sessions = [ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
                for p in export_stages(model, stage, size, workdir, tag)]
    names = list(model.encoder_outputs)
    feeds = {n: t.numpy() for n, t in synthetic_features(feature_shapes(model, *size)).items()}
    if stage == "decoder":
        return WallRunner(lambda: sessions[0].run(None, feeds))
    image = {"image": np.full((1, 3, *size), 120.0, dtype=np.float32)}

    def model_level() -> object:
        maps = sessions[0].run(names, image)
        return sessions[1].run(None, dict(zip(names, maps, strict=True)))

    return WallRunner(model_level)


def _torch_runner(model: torch.nn.Module, stage: str, size: tuple[int, int],
                  device: str) -> Runner:
    """PyTorch runner: FP16 + CUDA graph on ``cuda``, FP32 eager on ``cpu``."""
    import torch

    dtype = torch.float16 if device == "cuda" else torch.float32
    model = model.to(device=device, dtype=dtype)
    torch.backends.cudnn.benchmark = device == "cuda"  # static shapes: pick the fastest convs
    if stage == "decoder":
        feats = {n: t.to(device=device, dtype=dtype)
                 for n, t in synthetic_features(feature_shapes(model, *size)).items()}

        def fn() -> object:
            return model.decode(feats)
    else:
        image = torch.full((1, 3, *size), 120.0, device=device, dtype=dtype)

        def fn() -> object:
            return model(image)

    if device == "cuda":
        return CudaGraphRunner(fn)

    def eager() -> object:
        with torch.no_grad():
            return fn()

    return WallRunner(eager)


class TrtRunner:
    """FP16 TensorRT engines of the stage graphs, chained on one stream, timed with CUDA events.

    Engines come from ``backends.trt_build.build_serialized`` (the deployment builder: FP16,
    static shapes, timing cache) and are kept next to the ONNX files as ``.plan``.
    """

    def __init__(self, onnx_paths: Sequence[Path], workdir: Path, seed: int = 0) -> None:
        import numpy as np

        from ..backends.trt_build import (
            BuildOptions,
            build_serialized,
            device_info,
            engine_key,
            import_pycuda,
            import_tensorrt,
        )
        from ..export.onnx_export import stage_spec

        trt, cuda = import_tensorrt(), import_pycuda()
        self.cuda = cuda
        self.ctx = cuda.Device(0).retain_primary_context()
        self.ctx.push()
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        info, options = device_info(0), BuildOptions()
        rng = np.random.default_rng(seed)
        self.buffers: dict[str, object] = {}
        self.engines, self.contexts = [], []
        for path in onnx_paths:
            plan_path = path.with_suffix(".plan")
            if not plan_path.exists():
                spec = stage_spec(path.stem, path)
                key = engine_key(spec, trt.__version__, info, options)
                plan_path.write_bytes(build_serialized(spec, key, workdir / "timing.cache",
                                                       options))
            engine = runtime.deserialize_cuda_engine(plan_path.read_bytes())
            context = engine.create_execution_context()
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                if name not in self.buffers:
                    shape = tuple(context.get_tensor_shape(name))
                    dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
                    host = rng.standard_normal(shape).astype(dtype)
                    if name == "image":
                        host = np.full(shape, 120.0, dtype=dtype)
                    self.buffers[name] = cuda.mem_alloc(max(1, host.nbytes))
                    cuda.memcpy_htod(self.buffers[name], host)
                context.set_tensor_address(name, int(self.buffers[name]))
            self.engines.append(engine)
            self.contexts.append(context)
        self.stream = cuda.Stream()
        self.ctx.pop()

    def time(self, iters: int) -> float:
        """Mean device milliseconds per run (all stages) between two CUDA events."""
        self.ctx.push()
        try:
            start, end = self.cuda.Event(), self.cuda.Event()
            start.record(self.stream)
            for _ in range(iters):
                for context in self.contexts:
                    if not context.execute_async_v3(self.stream.handle):
                        raise BackendError("TensorRT failed to enqueue a bench engine")
            end.record(self.stream)
            end.synchronize()
            return end.time_since(start) / iters
        finally:
            self.ctx.pop()


def make_runner(backend: str, model: torch.nn.Module, stage: str, size: tuple[int, int],
                workdir: Path, tag: str, threads: int) -> Runner:
    """The runner of ``stage`` of ``model`` at padded ``size`` on ``backend``."""
    if backend == "onnxruntime":
        return _ort_runner(model, stage, size, workdir, tag, threads)
    if backend == "torch-cuda":
        return _torch_runner(model, stage, size, "cuda")
    if backend == "torch-cpu":
        return _torch_runner(model, stage, size, "cpu")
    if backend == "tensorrt":
        return TrtRunner(export_stages(model, stage, size, workdir, tag), workdir)
    raise ConfigError(f"unknown backend '{backend}'; choose from {', '.join(BACKEND_NAMES)}")


@dataclass
class BenchOptions:
    """Everything one sweep needs (the CLI arguments, typed)."""

    configs: Sequence[str] = DEFAULT_CONFIGS
    sizes: Sequence[tuple[str, tuple[int, int]]] = tuple(NAMED_SIZES.items())
    backends: Sequence[str] = ("onnxruntime",)
    stages: Sequence[str] = STAGES
    warmup: int = 3
    iters: int = 3
    trials: int = 5
    threads: int = 2
    num_classes: int | None = None
    workdir: Path = Path("out/bench/onnx")


def run_sweep(opts: BenchOptions, progress: Callable[[str], None] = print) -> dict:
    """Time every (backend, stage, size) for all configs; returns the JSON-able record."""
    import torch

    torch.set_num_threads(opts.threads)
    baseline = opts.configs[0]
    if len(set(opts.configs)) != len(opts.configs):
        raise ConfigError(f"--configs lists a config twice: {list(opts.configs)}")
    opts.workdir.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "protocol": {"batch": 1, "warmup": opts.warmup, "iters_per_trial": opts.iters,
                     "trials": opts.trials, "statistic": "median over trials",
                     "order": "alternating", "baseline": baseline, "threads": opts.threads,
                     "size_divisibility": 32},
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "torch": torch.__version__, "cpu_count": _cpu_count(),
                 "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                 "date": datetime.datetime.now(datetime.timezone.utc).isoformat()},
        "results": [], "unavailable": {},
    }
    for backend in opts.backends:
        reason = backend_status(backend)
        if reason is None:
            try:
                record["results"] += _sweep_backend(backend, opts, progress)
            except BackendError as exc:
                reason = str(exc)
        if reason is not None:
            record["unavailable"][backend] = reason
            progress(f"[{backend}] not available: {reason}")
    return record


def _sweep_backend(backend: str, opts: BenchOptions,
                   progress: Callable[[str], None]) -> list[dict]:
    """Result rows of one backend over all stages and sizes (configs timed side by side)."""
    baseline = opts.configs[0]
    rows = []
    for stage in opts.stages:
        for size_name, requested in opts.sizes:
            size = pad32(*requested)
            note = f" (padded from {requested[0]}x{requested[1]})" if size != requested else ""
            progress(f"[{backend}] {stage} at {size[0]}x{size[1]}{note}")
            runners = {}
            for c in opts.configs:
                progress(f"    preparing {c} (export/build/capture)")
                model = build_bench_model(c, opts.num_classes)
                tag = f"{c}_k{model.cfg.num_classes}_{size[0]}x{size[1]}"
                runners[c] = make_runner(backend, model, stage, size, opts.workdir, tag,
                                         opts.threads)
            times = measure(runners, opts.warmup, opts.iters, opts.trials, progress)
            base = statistics.median(times[baseline])
            for config, ms in times.items():
                median = statistics.median(ms)
                rows.append({
                    "backend": backend, "stage": stage, "config": config,
                    "size_name": size_name, "requested_size": list(requested),
                    "size": list(size), "median_ms": median, "trials_ms": ms,
                    "speedup": base / median,
                    # Same-round ratios cancel load drift that hits a whole round alike.
                    "speedup_paired": statistics.median(
                        b / t for b, t in zip(times[baseline], ms, strict=True)),
                    "cuda_graph": getattr(runners[config], "graphed", None),
                })
            del runners
    return rows


def _cpu_count() -> int | None:
    """CPUs this process may use (affinity-aware where the OS supports it)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def format_tables(record: dict) -> str:
    """One table per (backend, stage): rows = sizes, columns = ms and speed-up per config."""
    blocks = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in record["results"]:
        groups.setdefault((r["backend"], r["stage"]), []).append(r)
    baseline = record["protocol"]["baseline"]
    for (backend, stage), rows in groups.items():
        configs = list(dict.fromkeys(r["config"] for r in rows))
        sizes = list(dict.fromkeys(tuple(r["size"]) for r in rows))
        head = f"{'size (padded)':<14}" + "".join(f"{c:>22}" for c in configs)
        lines = [f"{backend} / {stage}: median ms (speed-up vs {baseline})", head]
        for size in sizes:
            cells = {r["config"]: r for r in rows if tuple(r["size"]) == size}
            line = f"{size[0]}x{size[1]:<9}"
            for c in configs:
                r = cells[c]
                line += f"{r['median_ms']:>13.2f} ({r['speedup']:>4.2f}x)"
            lines.append(line)
        blocks.append("\n".join(lines))
    for backend, reason in record["unavailable"].items():
        blocks.append(f"{backend}: not available ({reason})")
    return "\n\n".join(blocks)


def write_outputs(record: dict, out: Path) -> list[Path]:
    """bench.json plus one latency/speed-up figure per (backend, stage)."""
    from .plots import plot_latency

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    paths[0].write_text(json.dumps(record, indent=1))
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in record["results"]:
        groups.setdefault((r["backend"], r["stage"]), []).append(r)
    for (backend, stage), rows in groups.items():
        path = out / f"latency_{stage}_{backend}.png"
        plot_latency(rows, record["protocol"]["baseline"], path, f"{stage} latency, {backend}")
        paths.append(path)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst bench``."""
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help="comma-separated configs; the first is the speed-up baseline")
    parser.add_argument("--sizes", default=",".join(NAMED_SIZES),
                        help="HxW list or names (" + ", ".join(
                            f"{k}={v[0]}x{v[1]}" for k, v in NAMED_SIZES.items())
                        + "); padded up to multiples of 32")
    parser.add_argument("--backends", default="onnxruntime",
                        help=f"comma-separated, from {', '.join(BACKEND_NAMES)}")
    stage = parser.add_mutually_exclusive_group()
    stage.add_argument("--decoder-only", action="store_true", help="time the decoder stage only")
    stage.add_argument("--model-only", action="store_true", help="time the whole model only")
    parser.add_argument("--trials", type=int, default=5, help="alternating rounds (median)")
    parser.add_argument("--iters", type=int, default=3, help="runs per config per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per config first")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch and ORT)")
    parser.add_argument("--num-classes", type=int, default=None,
                        help="override K (the paper's latency models use Cityscapes, K=8)")
    parser.add_argument("--out", type=Path, default=Path("out/bench"),
                        help="directory for bench.json, figures and the exported ONNX graphs")


def run(args: argparse.Namespace) -> int:
    """Run the sweep, print the side-by-side tables, write JSON and figures."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKEND_NAMES]
    if unknown:
        raise ConfigError(f"unknown backend(s) {unknown}; choose from {', '.join(BACKEND_NAMES)}")
    if min(args.trials, args.iters) < 1 or args.warmup < 0:
        raise ConfigError("--trials and --iters must be >= 1 and --warmup >= 0")
    stages = ("decoder",) if args.decoder_only else ("model",) if args.model_only else STAGES
    opts = BenchOptions(configs=configs, sizes=parse_sizes(args.sizes), backends=backends,
                        stages=stages, warmup=args.warmup, iters=args.iters, trials=args.trials,
                        threads=args.threads, num_classes=args.num_classes,
                        workdir=args.out / "onnx")

    def progress(msg: str) -> None:
        print(msg, flush=True)

    record = run_sweep(opts, progress)
    paths = write_outputs(record, args.out)
    print()
    print(format_tables(record))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0 if record["results"] else 1

