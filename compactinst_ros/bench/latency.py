"""``compactinst bench``: decoder-only and model-level latency across configs and resolutions.

Protocol (the paper's): batch 1, static shapes, warm-up, then ``--trials`` rounds in which every
config is timed once (the order alternates each round so drift hits all configs alike); the
reported latency is the median of the rounds. Sizes are HxW and are padded up to multiples of 32
as the model requires (1080 -> 1088). The runners (what is timed on each backend) are in
``runners.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends import usable_cores
from ..errors import BackendError, ConfigError
from ..sizes import NAMED_SIZES, pad32, parse_size
from .models import build_bench_model, num_classes_of, placeholder_labels, random_bundle
from .runners import (
    BACKEND_NAMES,
    SCOPES,
    Runner,
    TensorRTRunner,
    backend_status,
    ort_runner,
    torch_runner,
)

BASELINE = "fastinst_r18_d3"
DEFAULT_CONFIGS = (
    "fastinst_r18_d3",
    "compactinst_r18",
    "compactinst_r18_pf32",
    "compactinst_r18_m4",
)
def parse_sizes(text: str) -> list[tuple[str, tuple[int, int]]]:
    """``'vga,1080x1920'`` -> [(name, (H, W)), ...]; names from NAMED_SIZES or ``HxW``."""
    sizes = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item in NAMED_SIZES:
            sizes.append((item, NAMED_SIZES[item]))
            continue
        if "x" not in item.lower():
            raise ConfigError(
                f"size '{item}' must be HxW (e.g. 1080x1920) or one of {', '.join(NAMED_SIZES)}"
            )
        h, w = parse_size(item)
        if h < 160 or w < 160:
            raise ConfigError(
                f"size {item}: both sides must be >= 160 (the query proposal needs "
                "100 cells on the 1/16 grid)"
            )
        sizes.append((f"{h}x{w}", (h, w)))
    if not sizes:
        raise ConfigError("--sizes is empty; give e.g. vga,fullhd or 480x640")
    return sizes


def measure(
    runners: dict[str, Runner],
    warmup: int,
    iters: int,
    trials: int,
    progress: Callable[[str], None] = print,
) -> dict[str, list[float]]:
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
        progress(
            f"    trial {trial + 1}/{trials}: "
            + ", ".join(f"{n} {times[n][-1]:.2f} ms" for n in order)
        )
    return times


@dataclass
class BenchOptions:
    """Everything one sweep needs (the CLI arguments, typed)."""

    configs: Sequence[str] = DEFAULT_CONFIGS
    sizes: Sequence[tuple[str, tuple[int, int]]] = tuple(NAMED_SIZES.items())
    backends: Sequence[str] = ("onnxruntime",)
    scopes: Sequence[str] = SCOPES
    warmup: int = 3
    iters: int = 3
    trials: int = 5
    threads: int = 2
    num_classes: int | None = None
    workdir: Path = Path("out/bench/bundles")  # exported random-weight bundles, reused
    engine_cache: Path | None = None  # TensorRT engines; None: the runtime's default cache

    def __post_init__(self) -> None:
        unknown = [b for b in self.backends if b not in BACKEND_NAMES]
        if unknown:
            raise ConfigError(
                f"unknown backend(s) {unknown}; choose from {', '.join(BACKEND_NAMES)}"
            )
        if not self.configs or len(set(self.configs)) != len(self.configs):
            raise ConfigError(f"--configs must list each config once: {list(self.configs)}")
        if not set(self.scopes) <= set(SCOPES):
            raise ConfigError(f"scopes {list(self.scopes)}: choose from {', '.join(SCOPES)}")
        if min(self.trials, self.iters) < 1 or self.warmup < 0:
            raise ConfigError("--trials and --iters must be >= 1 and --warmup >= 0")


def make_runner(
    backend: str, config: str, scope: str, size: tuple[int, int], opts: BenchOptions
) -> Runner:
    """The runner of ``scope`` of ``config`` at padded ``size`` on ``backend``."""
    if backend in ("torch-cuda", "torch-cpu"):
        model = build_bench_model(config, opts.num_classes)
        return torch_runner(model, scope, size, backend.removeprefix("torch-"))
    labels = placeholder_labels(num_classes_of(config, opts.num_classes))
    bundle = random_bundle(config, size, labels, opts.workdir, progress=lambda _: None)
    if backend == "onnxruntime":
        return ort_runner(bundle, scope, opts.threads)
    return TensorRTRunner(bundle, scope, opts.engine_cache)


def run_sweep(opts: BenchOptions, progress: Callable[[str], None] = print) -> dict:
    """Time every (backend, scope, size) for all configs; returns the JSON-able record."""
    import torch

    torch.set_num_threads(opts.threads)
    baseline = opts.configs[0]
    record: dict = {
        "protocol": {
            "batch": 1,
            "warmup": opts.warmup,
            "iters_per_trial": opts.iters,
            "trials": opts.trials,
            "statistic": "median over trials",
            "order": "alternating",
            "baseline": baseline,
            "threads": opts.threads,
            "size_divisibility": 32,
        },
        "host": {
            "machine": platform.machine(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": usable_cores(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        },
        "backends": {},
        "results": [],
        "unavailable": {},
    }
    for backend in opts.backends:
        reason = backend_status(backend)
        if reason is None:
            try:
                record["results"] += _sweep_backend(backend, opts, record["backends"], progress)
            except BackendError as exc:
                reason = str(exc)
        if reason is not None:  # reported once, with the tables (or alone when nothing ran)
            record["unavailable"][backend] = reason
    return record


def _sweep_backend(
    backend: str, opts: BenchOptions, facts: dict[str, dict], progress: Callable[[str], None]
) -> list[dict]:
    """Result rows of one backend over all scopes and sizes (configs timed side by side); the
    backend's runtime facts go into ``facts[backend]``."""
    baseline = opts.configs[0]
    rows = []
    cells = [(scope, name, requested) for scope in opts.scopes for name, requested in opts.sizes]
    pixels = [pad32(*requested)[0] * pad32(*requested)[1] for _, _, requested in cells]
    started = time.perf_counter()
    for done, (scope, size_name, requested) in enumerate(cells):
        if done == 1:  # the first cell's time per pixel, for the rest (larger inputs take longer)
            per_pixel = (time.perf_counter() - started) / pixels[0]
            progress(
                f"    estimate: about {_duration(per_pixel * sum(pixels[1:]))} for the "
                f"other {len(cells) - 1} cells of {backend} (the first took "
                f"{_duration(per_pixel * pixels[0])}; time taken as growing with pixels)"
            )
        size = pad32(*requested)
        note = f" (padded from {requested[0]}x{requested[1]})" if size != requested else ""
        progress(f"[{backend}] {scope} at {size[0]}x{size[1]}{note}")
        runners: dict[str, Runner] = {}
        try:
            for c in opts.configs:
                progress(f"    preparing {c} (export/build/capture)")
                runners[c] = make_runner(backend, c, scope, size, opts)
            if backend not in facts:
                facts[backend] = runners[baseline].facts
                progress(f"    runs on {_describe(facts[backend])}")
            times = measure(runners, opts.warmup, opts.iters, opts.trials, progress)
        finally:
            for runner in runners.values():
                runner.close()
        base = statistics.median(times[baseline])
        for config, ms in times.items():
            median = statistics.median(ms)
            rows.append(
                {
                    "backend": backend,
                    "scope": scope,
                    "config": config,
                    "size_name": size_name,
                    "requested_size": list(requested),
                    "size": list(size),
                    "median_ms": median,
                    "trials_ms": ms,
                    "speedup": base / median,
                    # Same-round ratios cancel load drift that hits a whole round alike.
                    "speedup_paired": statistics.median(
                        b / t for b, t in zip(times[baseline], ms, strict=True)
                    ),
                    "cuda_graph": getattr(runners[config], "graphed", None),
                }
            )
    return rows


def _duration(seconds: float) -> str:
    """``42 s``, ``17 min`` or ``3.2 h``: an estimate's precision."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _describe(facts: dict) -> str:
    """One line of a backend's runtime facts, its note (e.g. the stand-in label) first."""
    note = f"{facts['note']}; " if "note" in facts else ""
    return note + ", ".join(f"{k} {v}" for k, v in facts.items() if k not in ("note", "backend"))


def _tables(record: dict) -> dict[tuple[str, str], list[dict]]:
    """Result rows grouped by (backend, scope), in sweep order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in record["results"]:
        groups.setdefault((r["backend"], r["scope"]), []).append(r)
    return groups


def _title(record: dict, backend: str, scope: str) -> str:
    """``backend / scope``, with the backend's note (e.g. the stand-in label) when it has one."""
    note = record["backends"].get(backend, {}).get("note")
    return f"{backend} / {scope}" + (f" [{note}]" if note else "")


def format_tables(record: dict) -> str:
    """One table per (backend, scope): rows = sizes, columns = ms and speed-up per config."""
    blocks = []
    baseline = record["protocol"]["baseline"]
    for (backend, scope), rows in _tables(record).items():
        configs = list(dict.fromkeys(r["config"] for r in rows))
        sizes = list(dict.fromkeys(tuple(r["size"]) for r in rows))
        head = f"{'size (padded)':<14}" + "".join(f"{c:>22}" for c in configs)
        title = _title(record, backend, scope)
        lines = [f"{title}: median ms (speed-up vs {baseline})", head]
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
    """bench.json plus one latency/speed-up figure per (backend, scope)."""
    from .plots import plot_latency

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    paths[0].write_text(json.dumps(record, indent=1))
    for (backend, scope), rows in _tables(record).items():
        path = out / f"latency_{scope}_{backend}.png"
        title = f"{scope} latency, {_title(record, backend, scope)}"
        plot_latency(rows, record["protocol"]["baseline"], path, title)
        paths.append(path)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst bench``."""
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help="comma-separated configs; the first is the speed-up baseline",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(NAMED_SIZES),
        help="HxW list or names ("
        + ", ".join(f"{k}={v[0]}x{v[1]}" for k, v in NAMED_SIZES.items())
        + "); padded up to multiples of 32",
    )
    parser.add_argument(
        "--backends",
        default="onnxruntime",
        help=f"comma-separated, from {', '.join(BACKEND_NAMES)}",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--decoder-only", action="store_true", help="time the decoder only")
    scope.add_argument("--model-only", action="store_true", help="time the whole model only")
    parser.add_argument("--trials", type=int, default=5, help="alternating rounds (median)")
    parser.add_argument("--iters", type=int, default=3, help="runs per config per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per config first")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch and ORT)")
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="override K (default: the config's; the paper's latency models use Cityscapes, K=8)",
    )
    parser.add_argument(
        "--engine-cache",
        type=Path,
        default=None,
        help="TensorRT engine cache folder (default: the runtime's, see "
        "'compactinst build-engine --help')",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("out/bench"),
        help="directory for bench.json, figures and the exported bundles",
    )


def run(args: argparse.Namespace) -> int:
    """Run the sweep, print the side-by-side tables, write JSON and figures."""
    from ..cli import warn

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    scopes = ("decoder",) if args.decoder_only else ("model",) if args.model_only else SCOPES
    opts = BenchOptions(
        configs=configs,
        sizes=parse_sizes(args.sizes),
        backends=backends,
        scopes=scopes,
        warmup=args.warmup,
        iters=args.iters,
        trials=args.trials,
        threads=args.threads,
        num_classes=args.num_classes,
        workdir=args.out / "bundles",
        engine_cache=args.engine_cache,
    )

    def progress(msg: str) -> None:
        print(msg, flush=True)

    if args.engine_cache is not None and "tensorrt" not in backends:
        warn("bench", "--engine-cache has no effect without --backends tensorrt")
    cells = len(opts.sizes) * len(scopes)
    print(
        f"bench: {len(configs)} configs x {len(opts.sizes)} sizes x {len(scopes)} scopes on "
        f"{', '.join(backends)}: {cells} cells per backend, each exporting its models and timing "
        f"every config {opts.warmup} + {opts.trials} x {opts.iters} times; an estimate of the "
        "rest follows the first cell (a short run: --sizes vga --configs A,B --trials 2)",
        flush=True,
    )
    record = run_sweep(opts, progress)
    if not record["results"]:
        for backend, reason in record["unavailable"].items():
            print(f"compactinst bench: {backend} is not available: {reason}", file=sys.stderr)
        print("compactinst bench: nothing could be timed; nothing written", file=sys.stderr)
        return 1
    paths = write_outputs(record, args.out)
    print()
    print(format_tables(record))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0 if record["results"] else 1
