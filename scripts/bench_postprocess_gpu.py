#!/usr/bin/env python3
"""Post-processing benchmark: fused CUDA kernels vs a naive GPU path vs the numpy reference vs
the byte floor, at 512x1024, 1024x2048 and 1080x1920 camera frames with 100 queries.

Needs an NVIDIA GPU and pycuda (the kernels are the shipped images: no nvcc); the naive path needs
PyTorch with CUDA (reported as n/a otherwise). Every method is first checked against the numpy
reference on the same frame, then timed with CUDA events (median of --reps), twice: with the start
event recorded on an idle stream (the host's launch time included, as a lone call pays it) and
with it recorded behind a 256 MB device-to-device copy, so the launches are queued while the GPU
copies and only the GPU's own time is measured (in the node, the engines hide the launches the
same way). Floor = (low-res logits read once + every raster written once) / the measured device
copy bandwidth, or where Nsight Compute (``ncu``) can profile one frame of the fused kernels, the
larger of that and their instructions at peak issue (each SM sub-partition issues one warp
instruction a cycle, at the clock the profile saw: ``roofline.issue_floor_s``), + three dependent
launches of a kernel that does no work, timed behind the copy as well (the fused path's three
launches). Where the driver offers CUDA graphs (gpu/graphs.py), the
fused kernels are also timed as one graph replay behind the copy, and the floor's launches as a
graph of three idle kernels (a graph of one beside it): "graph ms" against "graph floor".

    .venv/bin/python scripts/bench_postprocess_gpu.py [--reps 50] [--sizes 1024x2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compactinst_ros.errors import CompactInstError
from compactinst_ros.labels import LabelSet
from compactinst_ros.postprocess import reference
from compactinst_ros.structures import (
    FrameMeta,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)

#: Cityscapes-like label set: 8 things, 11 stuff classes.
BENCH_LABELS = LabelSet(
    names=tuple(f"c{i}" for i in range(19)),
    ids=tuple(range(1, 20)),
    isthing=(True,) * 8 + (False,) * 11,
)
#: (camera h, camera w, model input h, model input w)
SIZES = {
    "512x1024": (512, 1024, 512, 1024),
    "1024x2048": (1024, 2048, 1024, 2048),
    "1080x1920": (1080, 1920, 1024, 2048),
}
OPTIONS = PostprocessOptions()
ALL = OutputSet()

#: The size the floor's issue term is profiled at (the targets' size).
ISSUE_SIZE = "1024x2048"


def synthetic_outputs(q: int, h: int, w: int, labels: LabelSet, seed: int = 0) -> RawOutputs:
    """Decoder-like outputs: stuff queries cover large smooth regions, thing queries blobs,
    the rest are low-confidence no-object queries with weak noisy masks."""
    rng = np.random.default_rng(seed)
    k = labels.num_classes
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    masks = rng.normal(-4.0, 1.0, (q, h, w)).astype(np.float32)
    logits = rng.normal(0.0, 1.0, (q, k + 1)).astype(np.float32)
    logits[:, k] += 4.0  # mostly no-object
    stuff = [c for c in range(k) if not labels.isthing[c]]
    things = [c for c in range(k) if labels.isthing[c]]
    band = h / max(1, len(stuff))
    for i, c in enumerate(stuff[: q // 4]):
        centre = (i + 0.5) * band
        masks[i] = (band / 2 - np.abs(yy - centre)) * (8.0 / band) + rng.normal(0, 0.3, (h, w))
        logits[i, c] += 9.0
    for i in range(len(stuff), min(q, len(stuff) + 30)):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(2, h / 6)
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        masks[i] = (r - d) * (6.0 / r) + rng.normal(0, 0.3, (h, w))
        logits[i, things[i % len(things)]] += 9.0
    return RawOutputs(class_logits=logits, mask_logits=masks.astype(np.float32), mask_stride=8)


def frame_for(size: str, q: int = 100) -> tuple[RawOutputs, FrameMeta]:
    """Synthetic decoder outputs and letterbox geometry for one benchmark size."""
    src_h, src_w, in_h, in_w = SIZES[size]
    meta = FrameMeta.letterbox(src_h, src_w, in_h, in_w)
    return synthetic_outputs(q, in_h // 8, in_w // 8, BENCH_LABELS), meta


def agreement(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """Fraction of equal pixels of two rasters."""
    return float((np.asarray(a) == np.asarray(b)).mean())


@dataclass
class Row:
    """One benchmark line, milliseconds (nan where not measured)."""

    size: str
    fused: float  # kernels only, results left in device memory (like the naive path)
    copy: float  # the one device-to-host copy of tables + rasters (pinned)
    naive: float
    reference: float
    floor: float  # max(bytes at the copy bandwidth, issue) + three launches
    parity: float
    fused_gpu: float  # the fused kernels timed behind the busy copy: the GPU's own time
    launches: float  # three dependent idle launches behind the busy copy (part of the floor)
    fused_graph: float  # the fused kernels as one graph replay behind the busy copy
    graph_one: float  # a graph of one idle kernel behind the busy copy
    graph_three: float  # a graph of three dependent idle kernels behind the busy copy
    graph_floor: float  # max(bytes at the copy bandwidth, issue) + graph_three
    issue: float = float("nan")  # the fused kernels' instructions at peak issue (ncu)


def _median_ms(fn, reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def gpu_timer(
    cuda, stream, busy: Callable[[], None] | None = None
) -> Callable[[Callable[[], None]], float]:
    """Returns time(fn) -> ms between two events around fn's enqueue on ``stream``; with
    ``busy``, that is enqueued first, so the start event and fn's launches wait behind it."""
    start, stop = cuda.Event(), cuda.Event()

    def timed(enqueue) -> float:
        if busy is not None:
            busy()
        start.record(stream)
        enqueue()
        stop.record(stream)
        stop.synchronize()
        return start.time_till(stop)

    return timed


#: bytes of the device-to-device copies the floor measures bandwidth with, and the busy copy
#: the GPU-time measurements start behind
COPY_BYTES = 256 << 20


def copy_buffers(cuda) -> tuple[Any, Any]:
    """Two device buffers of COPY_BYTES (source, destination)."""
    return cuda.mem_alloc(COPY_BYTES), cuda.mem_alloc(COPY_BYTES)


def busy_copy(cuda, stream, buffers: tuple[Any, Any]) -> Callable[[], None]:
    """Enqueues one COPY_BYTES device-to-device copy: GPU work long enough (0.1 ms at 3 TB/s,
    4 ms at an Orin Nano's 68 GB/s) for the host to queue a frame's launches behind it."""
    source, destination = buffers
    return lambda: cuda.memcpy_dtod_async(destination, source, COPY_BYTES, stream)


def idle_launches(stream, count: int) -> Callable[[], None]:
    """Enqueues ``count`` dependent launches that do no work: the shipped ``pre_letterbox``
    with a 0x0 output, whose every thread returns at its bounds check. No compiler needed (no
    nvcc on a Jetson's PATH), and the launch cost of a real kernel's parameter list."""
    from compactinst_ros.gpu.launch import load_kernels

    (kernel,) = load_kernels("preprocess", "pre_letterbox")
    zero = np.float32(0)
    args = (0, 0, 0, 0, 0, 0, 0, zero, zero, zero, zero, zero, 0, 0, 0)

    def launch() -> None:
        for _ in range(count):
            kernel.prepared_async_call((1, 1), (32, 1, 1), stream, *args)

    return launch


def graph_api() -> Any:
    """The driver's CUDA graph API (``gpu.graphs.CudaGraphs``), or None with the reason
    printed where this driver does not offer it."""
    from compactinst_ros.gpu.graphs import CudaGraphs, GraphError

    try:
        return CudaGraphs()
    except GraphError as exc:
        print(f"  CUDA graphs not measured: {exc}", file=sys.stderr)
        return None


def graph_ms(
    graphs: Any, stream, enqueue: Callable[[], None], behind: Callable, reps: int
) -> float:
    """ms of one replay of the graph of what ``enqueue`` enqueues, timed with ``behind``."""
    executable = graphs.capture(stream, enqueue)
    try:
        launch = lambda: graphs.launch(executable, stream)  # noqa: E731
        behind(launch)
        return _median_ms(lambda: behind(launch), reps)
    finally:
        graphs.destroy(executable)


def issue_floor_ms(size: str, timeout_s: float = 120.0) -> float:
    """ms the fused kernels' instructions need at peak issue for one frame at ``size``: this
    script's ``--ncu-target`` profiled by ncu (``roofline.ISSUE_METRICS``); nan, with the
    reason printed, where ncu is missing or fails."""
    import subprocess
    import tempfile

    from compactinst_ros.bench import roofline

    ncu = roofline.find_ncu()
    if ncu is None:
        print("  issue floor not measured: no ncu", file=sys.stderr)
        return float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "issue.csv"
        cmd = [
            ncu, "--csv", "--print-units", "base", "--profile-from-start", "off",
            "--metrics", roofline.ISSUE_METRICS, "--log-file", str(log),
            sys.executable, str(Path(__file__).resolve()), "--ncu-target", size,
        ]  # fmt: skip
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"  issue floor not measured: {exc}", file=sys.stderr)
            return float("nan")
        try:
            floors = roofline.issue_floor_s(log.read_text(errors="replace"), "pp_")
        except (OSError, CompactInstError) as exc:  # no CSV, or one without the metrics
            output = (run.stdout + run.stderr)[-400:]
            print(f"  issue floor not measured: {exc}; ncu said: {output}", file=sys.stderr)
            return float("nan")
    if set(floors) != {"pp_stats", "pp_tiles", "pp_remap"}:
        print(f"  issue floor not measured: ncu profiled {sorted(floors)}", file=sys.stderr)
        return float("nan")
    return sum(floors.values()) * 1e3


def ncu_target(size: str) -> None:
    """One frame of the fused kernels at ``size`` between cuProfilerStart/Stop (what
    ``issue_floor_ms`` has ncu profile)."""
    import pycuda.driver as cuda

    from compactinst_ros.gpu.postprocess import GpuPostprocessor

    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    try:
        raw, meta = frame_for(size)
        q, h, w = raw.mask_logits.shape
        post = GpuPostprocessor(BENCH_LABELS, q, h, w, raw.mask_stride)
        d_cls, d_masks = cuda.to_device(raw.class_logits), cuda.to_device(raw.mask_logits)
        stream = cuda.Stream()
        post.enqueue(stream, int(d_cls), int(d_masks), meta, OPTIONS, ALL, copy=False)
        stream.synchronize()
        cuda.start_profiler()
        post.enqueue(stream, int(d_cls), int(d_masks), meta, OPTIONS, ALL, copy=False)
        stream.synchronize()
        cuda.stop_profiler()
    finally:
        ctx.pop()


def measure_floor(
    cuda, stream, nbytes: int, buffers: tuple[Any, Any], issue_ms: float = float("nan")
) -> tuple[float, float, float]:
    """(copy bandwidth GB/s, ms of three dependent idle launches behind a busy copy, floor ms)
    for ``nbytes`` of essential traffic and the kernels' ``issue_ms`` (nan: not measured)."""
    copy = busy_copy(cuda, stream, buffers)
    timed = gpu_timer(cuda, stream)
    timed(copy)
    copy_ms = _median_ms(lambda: timed(copy), 20)
    bandwidth = 2 * COPY_BYTES / (copy_ms * 1e-3)  # a copy reads and writes every byte
    three = idle_launches(stream, 3)
    behind = gpu_timer(cuda, stream, busy=copy)
    behind(three)
    launches_ms = _median_ms(lambda: behind(three), 50)
    bound_ms = nbytes / bandwidth * 1e3
    if issue_ms == issue_ms:  # measured (not nan)
        bound_ms = max(bound_ms, issue_ms)
    return bandwidth / 1e9, launches_ms, bound_ms + launches_ms


def naive_torch(raw: RawOutputs, meta: FrameMeta, labels: LabelSet, reps: int) -> float:
    """ms of the Mask2Former-style path in PyTorch: upsample all masks, threshold, argmax."""
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    cls = torch.from_numpy(raw.class_logits).to(dev)
    masks = torch.from_numpy(raw.mask_logits).to(dev)
    k = labels.num_classes
    thing = torch.from_numpy(labels.thing_mask).to(dev)

    def run() -> None:
        up = F.interpolate(masks[None], size=(meta.input_h, meta.input_w), mode="bilinear")
        up = up[:, :, : meta.resized_h, : meta.resized_w]
        up = F.interpolate(up, size=(meta.src_h, meta.src_w), mode="bilinear")[0]
        prob = up.sigmoid()
        p = cls.softmax(-1)
        score, label = p.max(-1)
        keep = (label != k) & (score > OPTIONS.object_mask_threshold)
        pan = (score[keep, None, None] * prob[keep]).argmax(0)
        pan_on = (up[keep] > 0).sum((1, 2))
        sem = torch.einsum("qc,qhw->chw", p[:, :k], prob).argmax(0)
        pt = torch.where(thing[None], p[:, :k], torch.zeros_like(p[:, :k]))
        top = pt.flatten().topk(OPTIONS.max_instances).indices // k
        on = up[top] > 0
        inst = torch.where(on.any(0), on.float().argmax(0) + 1, 0)
        torch.stack([pan.float().sum(), pan_on.float().sum(), sem.float().sum(), inst.sum()])

    run()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def bench_size(cuda, stream, size: str, reps: int, ref_reps: int) -> Row:
    """Check the fused kernels against the reference at ``size``, then time every method."""
    from compactinst_ros.gpu.postprocess import GpuPostprocessor

    raw, meta = frame_for(size)
    q, h, w = raw.mask_logits.shape
    post = GpuPostprocessor(BENCH_LABELS, q, h, w, raw.mask_stride)
    d_cls = cuda.to_device(raw.class_logits)
    d_masks = cuda.to_device(raw.mask_logits)
    post.enqueue(stream, int(d_cls), int(d_masks), meta, OPTIONS, ALL)
    stream.synchronize()
    gpu = post.collect(meta, ALL)
    start = time.perf_counter()
    ref = reference.postprocess(raw, meta, BENCH_LABELS, OPTIONS, ALL)
    ref_ms = (time.perf_counter() - start) * 1e3
    for _ in range(ref_reps - 1):
        start = time.perf_counter()
        reference.postprocess(raw, meta, BENCH_LABELS, OPTIONS, ALL)
        ref_ms = min(ref_ms, (time.perf_counter() - start) * 1e3)
    parity = min(
        agreement(gpu.instance_raster, ref.instance_raster),
        agreement(gpu.panoptic_raster, ref.panoptic_raster),
        agreement(gpu.semantic_raster, ref.semantic_raster),
    )
    timed = gpu_timer(cuda, stream)
    buffers = copy_buffers(cuda)
    behind = gpu_timer(cuda, stream, busy=busy_copy(cuda, stream, buffers))

    def fused(copy: bool) -> None:
        post.enqueue(stream, int(d_cls), int(d_masks), meta, OPTIONS, ALL, copy=copy)

    fused_ms = _median_ms(lambda: timed(lambda: fused(False)), reps)
    copy_ms = _median_ms(lambda: timed(lambda: fused(True)), reps) - fused_ms
    fused_gpu_ms = _median_ms(lambda: behind(lambda: fused(False)), reps)
    pixels = meta.src_h * meta.src_w
    sem_bytes = np.dtype(post.sem_dtype).itemsize
    essential = raw.mask_logits.nbytes + pixels * (2 + 4 + sem_bytes)
    # profiled at the targets' size only: each ncu run costs its own process and start-up
    issue_ms = issue_floor_ms(size) if size == ISSUE_SIZE else float("nan")
    _, launches_ms, floor_ms = measure_floor(cuda, stream, essential, buffers, issue_ms)
    graphed = [float("nan")] * 4
    graphs = graph_api()
    if graphs is not None:
        graphed[:3] = (
            graph_ms(graphs, stream, lambda: fused(False), behind, reps),
            graph_ms(graphs, stream, idle_launches(stream, 1), behind, reps),
            graph_ms(graphs, stream, idle_launches(stream, 3), behind, reps),
        )
        graphed[3] = floor_ms - launches_ms + graphed[2]
    try:
        naive_ms = naive_torch(raw, meta, BENCH_LABELS, max(3, reps // 5))
    except Exception as exc:  # torch missing or without CUDA: the row says n/a
        print(f"  naive path unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
        naive_ms = float("nan")
    return Row(
        size, fused_ms, copy_ms, naive_ms, ref_ms, floor_ms, parity, fused_gpu_ms, launches_ms,
        *graphed, issue_ms,
    )  # fmt: skip


def print_table(rows: list[Row]) -> None:
    """Side-by-side ms and ratios; targets: naive/fused >= 20, fused/floor <= 3 at 1024x2048
    (the GPU's own time of the fused kernels against the floor; "fused ms" includes launching
    on an idle stream), then the same as CUDA graphs where measured."""
    head = (
        f"{'size':>10} {'fused ms':>9} {'gpu ms':>8} {'+D2H ms':>8} {'naive ms':>9} "
        f"{'numpy ms':>9} {'3 launch':>8} {'issue ms':>8} {'floor ms':>9} "
        f"{'naive/fused':>11} {'fused/floor':>11} {'numpy/fused':>11} {'parity':>8}"
    )
    print(head)
    for r in rows:
        print(
            f"{r.size:>10} {r.fused:9.3f} {r.fused_gpu:8.3f} {r.copy:8.3f} {r.naive:9.3f} "
            f"{r.reference:9.1f} {r.launches:8.3f} {r.issue:8.3f} {r.floor:9.3f} "
            f"{r.naive / r.fused:11.1f} {r.fused_gpu / r.floor:11.2f} "
            f"{r.reference / r.fused:11.0f} {100 * r.parity:7.3f}%"
        )
    graphed = [r for r in rows if r.fused_graph == r.fused_graph]  # nan: not measured
    if graphed:
        print(
            f"{'size':>10} {'graph ms':>9} {'1-kernel graph':>14} {'3-kernel graph':>14} "
            f"{'graph floor':>11} {'graph/floor':>11}"
        )
    for r in graphed:
        print(
            f"{r.size:>10} {r.fused_graph:9.3f} {r.graph_one:14.3f} {r.graph_three:14.3f} "
            f"{r.graph_floor:11.3f} {r.fused_graph / r.graph_floor:11.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark on CUDA device 0 and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--ref-reps", type=int, default=1, help="numpy reference repetitions")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--ncu-target", choices=list(SIZES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ncu_target:
        ncu_target(args.ncu_target)
        return 0
    import pycuda.driver as cuda

    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    try:
        stream = cuda.Stream()
        rows = []
        for size in args.sizes:
            print(f"benchmarking {size} ...", file=sys.stderr, flush=True)
            rows.append(bench_size(cuda, stream, size, args.reps, args.ref_reps))
        print(f"GPU: {cuda.Device(0).name()}")
        print_table(rows)
    finally:
        ctx.pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
