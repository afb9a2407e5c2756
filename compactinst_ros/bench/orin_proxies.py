"""The decoder as an Orin sees it, measured on a big GPU: FastInst-D3 and CompactInst decoder
latency (PyTorch FP16, CUDA graphs) at the paper's 1024x2048 under proxies for what a data-centre
GPU hides, and the CompactInst / FastInst ratio under each.

Why proxies: an H100 or H200 keeps a whole CompactInst decoder pass in its 50 MB L2 and spreads
it over 132 SMs at ~2 GHz, while an Orin Nano has a 4 MB L2, 68 GB/s and 8 SMs at 0.6-1.0 GHz;
the paper's 2.35-4.74x is an Orin Nano figure. So besides the whole GPU:

* **L2 flushed**: before every replay a buffer of twice the L2 is zeroed (outside the timed
  interval), so each pass starts from a cold cache and pays DRAM for what it reads, as on a
  4 MB L2.
* **N SMs**: the passes run in a CUDA green context of N SMs (``torch.cuda.green_contexts``,
  beta in PyTorch), 8 as an Orin Nano or NX and 16 as an AGX Orin, so fixed per-kernel costs
  stop being diluted by 132 SMs: as graph replays on the context's own stream where PyTorch
  gives one (2.12 on), else launched one by one with the context made current.

A proxy the machine cannot run (no CUDA, a PyTorch without green-context streams, a driver
without green contexts) is reported with the reason instead of a time. Not a substitute for the
Jetson: clocks, DRAM bandwidth and TensorRT's fusions still differ.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The two decoders compared (the paper's pair).
CONFIGS = ("fastinst_r18_d3", "compactinst_r18")
#: The paper's decoder size.
SIZE = (1024, 2048)
#: SM counts of the green-context proxies: Orin Nano / NX, AGX Orin.
SM_COUNTS = (8, 16)
#: The paper's decoder speed-up range on a Jetson Orin Nano (TensorRT FP16).
PAPER_RANGE = (2.35, 4.74)
#: Cityscapes' 8 thing classes, as the paper's latency models.
NUM_CLASSES = 8


class ProxyUnavailableError(RuntimeError):
    """This machine cannot run a proxy; the message says why."""


@dataclass
class ProxyRow:
    """One proxy: median ms (and min-max) per config, or the reason it did not run."""

    proxy: str
    ms: dict[str, float] = field(default_factory=dict)
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)
    unavailable: str | None = None

    @property
    def ratio(self) -> float | None:
        """FastInst ms / CompactInst ms (the decoder speed-up), where both ran."""
        if self.unavailable or set(self.ms) != set(CONFIGS):
            return None
        return self.ms[CONFIGS[0]] / self.ms[CONFIGS[1]]


def decoder_fn(config: str, size: tuple[int, int]) -> Callable[[], object]:
    """FP16 decoder pass of ``config`` on CUDA on static synthetic features."""
    import torch

    from .models import build_bench_model, feature_shapes, synthetic_features

    model = build_bench_model(config, NUM_CLASSES).to(device="cuda", dtype=torch.float16)
    feats = {
        n: t.to(device="cuda", dtype=torch.float16)
        for n, t in synthetic_features(feature_shapes(model, *size)).items()
    }
    return lambda: model.decode(feats)


def captured(fn: Callable[[], object], stream: Any) -> Any:
    """A CUDA graph of ``fn`` captured on ``stream`` (after three warm-up passes there)."""
    import torch

    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        fn()
    return graph


def time_each(
    step: Callable[[], object],
    stream: Any,
    reps: int,
    before: Callable[[], None] | None = None,
) -> list[float]:
    """ms of ``reps`` runs of ``step`` on ``stream``, each timed alone between two events;
    ``before`` runs ahead of each, outside the timed interval."""
    import torch

    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(reps):
            if before is not None:
                before()
            start.record(stream)
            step()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times


def green_context(sms: int) -> Any:
    """A green context of ``sms`` SMs on device 0; ProxyUnavailableError where this PyTorch or
    driver has none."""
    import torch

    try:
        from torch.cuda import green_contexts
    except ImportError as exc:
        raise ProxyUnavailableError(f"PyTorch {torch.__version__} has no green contexts") from exc
    try:
        context = green_contexts.GreenContext.create(num_sms=sms, device_id=0)
    except Exception as exc:  # the driver's refusal, in whatever type this beta API raises
        raise ProxyUnavailableError(f"no green context of {sms} SMs: {exc}") from exc
    return context


def time_eager(fn: Callable[[], object], reps: int) -> list[float]:
    """ms of ``reps`` passes of ``fn`` launched one kernel at a time on the current stream,
    after three warm-up passes."""
    import torch

    stream = torch.cuda.current_stream()
    time_each(fn, stream, 3)
    return time_each(fn, stream, reps)


def proxy_times(proxy: str, fn: Callable[[], object], reps: int, state: dict) -> list[float]:
    """ms of ``reps`` replays of ``fn``'s graph under ``proxy`` ("whole GPU", "L2 flushed" or
    "<n> SMs"); ``state`` holds the whole-GPU stream, graph and flush buffer between proxies."""
    if proxy == "whole GPU":
        return time_each(state["graph"].replay, state["stream"], reps)
    if proxy == "L2 flushed":
        return time_each(state["graph"].replay, state["stream"], reps, state["flush"].zero_)
    context = green_context(int(proxy.split()[0]))
    if hasattr(context, "Stream"):  # PyTorch 2.12 on: the context's own stream takes a graph
        stream = context.Stream()
        return time_each(captured(fn, stream).replay, stream, reps)
    # before: the context is made current, and a graph cannot capture its legacy stream
    context.set_context()
    try:
        return time_eager(fn, reps)
    finally:
        context.pop_context()


def measure(
    configs: Sequence[str] = CONFIGS,
    size: tuple[int, int] = SIZE,
    sm_counts: Sequence[int] = SM_COUNTS,
    reps: int = 30,
    log: Callable[[str], None] = print,
) -> list[ProxyRow]:
    """One row per proxy (whole GPU, L2 flushed, each of ``sm_counts`` SMs), each config's
    median over ``reps`` replays."""
    import torch

    rows = [ProxyRow(p) for p in ("whole GPU", "L2 flushed", *(f"{n} SMs" for n in sm_counts))]
    if not torch.cuda.is_available():
        for row in rows:
            row.unavailable = "needs CUDA"
        return rows
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    state: dict[str, Any] = {"flush": torch.empty(2 * l2, dtype=torch.uint8, device="cuda")}
    for config in configs:
        fn = decoder_fn(config, size)
        state["stream"] = torch.cuda.Stream()
        state["graph"] = captured(fn, state["stream"])
        for row in rows:
            if row.unavailable:
                continue
            try:
                times = proxy_times(row.proxy, fn, reps, state)
            except (ProxyUnavailableError, RuntimeError) as exc:
                row.unavailable = str(exc).splitlines()[0]
                continue
            row.ms[config] = statistics.median(times)
            row.spread[config] = (min(times), max(times))
            log(f"  {config}, {row.proxy}: {row.ms[config]:.3f} ms")
        state.pop("graph")
        torch.cuda.empty_cache()
    return rows


def table(rows: Sequence[ProxyRow], builder_bytes: dict[str, float] | None = None) -> list[str]:
    """Lines: per proxy each config's median ms and the speed-up, then the builder's bytes per
    frame ratio (``builder_bytes``: config -> bytes, from ``compactinst engine-report --paper``)
    and the paper's Orin Nano range."""
    lines = [f"{'proxy':<12} {'FastInst-D3 ms':>15} {'CompactInst ms':>15} {'speed-up':>9}"]
    for row in rows:
        if row.unavailable:
            lines.append(f"{row.proxy:<12} not run: {row.unavailable}")
            continue
        fast, compact = (row.ms.get(c, float("nan")) for c in CONFIGS)
        ratio = row.ratio
        lines.append(
            f"{row.proxy:<12} {fast:15.3f} {compact:15.3f} "
            + (f"{ratio:8.2f}x" if ratio is not None else f"{'n/a':>9}")
        )
    if builder_bytes and set(builder_bytes) >= set(CONFIGS):
        fast, compact = (builder_bytes[c] for c in CONFIGS)
        lines.append(
            f"NVIDIA's builder, bytes per frame (FP16 engines): {fast / 1e6:.0f} MB / "
            f"{compact / 1e6:.0f} MB = {fast / compact:.2f}x"
        )
    lines.append(f"the paper, Jetson Orin Nano, TensorRT FP16: {PAPER_RANGE[0]}-{PAPER_RANGE[1]}x")
    return lines
