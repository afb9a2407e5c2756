#!/usr/bin/env python3
"""Soak test: the node under a steady camera stream, its resources sampled over time.

Starts ``compactinst_node`` in a subprocess (DDS on loopback, the shipped loopback-only Fast DDS
shared-memory profile), publishes a best-effort bgr8 stream (default 30 Hz 1920x1080) to it,
subscribes to ``~/instance_mask`` so every frame is computed, and samples the node process five
times a second: RSS (total, private and shared), open file descriptors and threads (from /proc),
plus input/output rate and frame counters from /diagnostics. A node slower than the camera drops
frames and counts them; the soak checks resources, not throughput. Writes ``soak.csv`` (row by
row, so a long soak can be watched), ``soak.png`` and ``summary.json``.

Leaks show in private memory (RssAnon). Shared memory (RssShmem) is FastDDS's shared-memory
transport: its segments (config/fastdds_loopback.xml, 32 MB each, the node's own and the camera's)
count once their pages are touched, so it steps up by frame sizes until the segments are fully
used and then stays; it is reported, not judged. While frames stream, private memory swings by
whole frame buffers (a 1080p frame is 6 MB), more than the growth to detect, so it is measured
at idle probes: the stream pauses until /diagnostics shows every received frame handled, and the
memory with nothing in flight is taken (median of five samples). The warm-up lasts at least
``--warmup`` seconds and ``--warmup-frames`` processed frames: private memory steps up over the
first frames (allocator and ONNX Runtime arena reaching their working sizes; measured here, about
6-18 MB within the first 15 frames at 1080p) and is flat after. Probes run after the warm-up,
every ``--probe-every`` seconds and at the end; growth is the median of the last third of the
probes minus the median of the first third.

glibc raises its mmap threshold as large blocks are freed, after which it keeps freed frame
buffers in its heaps: idle private memory then varies by 0-4 frame buffers (6 MB each at 1080p)
from one probe to the next, up and down, which hides a leak of that size. The node therefore
runs with ``MALLOC_MMAP_THRESHOLD_=131072`` (glibc's default value, fixed): frame buffers are
mapped and unmapped, and idle private memory is what the node holds. ``--allocator-default``
measures the node with glibc's dynamic threshold instead.

    . scripts/ros_env.sh
    .venv/bin/python scripts/soak.py --duration 1800 --out out/soak
"""

from __future__ import annotations

import argparse
import array
import contextlib
import csv
import json
import os
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from compactinst_ros.eval.realtime import (
    NodeProcess,
    node_command,
    ros_environment,
    use_in_this_process,
)
from compactinst_ros.resources import default_model

NS = "/compactinst"
INPUT_TOPIC = "/soak/image"
#: /diagnostics values copied into each sample
DIAG_KEYS = (
    "input_rate_hz",
    "output_rate_hz",
    "frames_received",
    "frames_processed",
    "frames_dropped",
    "errors",
    "input_errors",
)
#: glibc's default mmap threshold, set explicitly so that glibc does not raise it (see above)
MMAP_THRESHOLD = 128 * 1024
COLUMNS = (
    "t_s",
    "rss_mb",
    "private_mb",
    "shared_mb",
    "fds",
    "threads",
    "frames_sent",
    "masks_received",
    *DIAG_KEYS,
)


@dataclass(frozen=True)
class SoakSummary:
    """What the soak is judged on: resource growth after warm-up, rates and drops."""

    duration_s: float
    warmup_s: float  # the warm-up as it ran (at least its seconds and frames)
    samples: int
    rss_start_mb: float  # idle RSS (total), median of the first third of the probes
    rss_end_mb: float  # idle RSS (total), median of the last third of the probes
    rss_max_mb: float  # while streaming
    private_start_mb: float  # idle private memory, first third of the probes
    private_end_mb: float  # idle private memory, last third of the probes
    private_growth_mb: float  # end - start: what a leak raises
    shared_end_mb: float  # DDS shared-memory segments touched, at the end
    probes: tuple[tuple[float, float, float], ...]  # (t_s, idle RSS, idle private) per probe
    fds_start: int
    fds_end: int
    fds_max: int
    threads_start: int
    threads_end: int
    threads_max: int
    frames_sent: int
    frames_received: int
    frames_processed: int
    frames_dropped: int
    errors: int
    output_rate_hz: float  # processed frames / time after warm-up
    input_rate_hz: float  # frames the node received / time after warm-up


@dataclass(frozen=True)
class Resources:
    """One /proc sample of a process."""

    rss_mb: float
    private_mb: float  # RssAnon
    shared_mb: float  # RssShmem
    fds: int
    threads: int


def proc_resources(pid: int) -> Resources:
    """Memory, open file descriptors and threads of process ``pid``, from /proc."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssShmem", "Threads"):
                fields[key] = int(value.split()[0])
    return Resources(
        rss_mb=fields["VmRSS"] / 1024.0,
        private_mb=fields["RssAnon"] / 1024.0,
        shared_mb=fields["RssShmem"] / 1024.0,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=fields["Threads"],
    )


def test_frame(height: int, width: int) -> np.ndarray:
    """A bgr8 frame with some structure (the model sees shapes, not a flat colour)."""
    rng = np.random.default_rng(0)
    frame = np.full((height, width, 3), 90, np.uint8)
    for _ in range(12):
        y, x = int(rng.integers(0, height * 3 // 4)), int(rng.integers(0, width * 3 // 4))
        frame[y : y + height // 5, x : x + width // 6] = rng.integers(0, 255, 3, dtype=np.uint8)
    return frame


class Camera:
    """This process's rclpy side: a paced best-effort publisher, a mask consumer and a
    /diagnostics listener."""

    def __init__(self, domain: int, frame: np.ndarray, rate_hz: float) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions
        from sensor_msgs.msg import Image

        self.rclpy = rclpy
        self.context = Context()
        # Ctrl-C must end the soak (and stop the node), not only this rclpy context.
        rclpy.init(
            context=self.context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO
        )
        self.node = rclpy.create_node("compactinst_soak", context=self.context)
        best_effort = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.pub = self.node.create_publisher(Image, INPUT_TOPIC, best_effort)
        self.msg = Image(height=frame.shape[0], width=frame.shape[1], encoding="bgr8")
        self.msg.step = frame.shape[1] * 3
        self.msg.header.frame_id = "soak_camera"
        self.msg.data = array.array("B", frame.tobytes())
        self.period = 1.0 / rate_hz
        self.lock = threading.Lock()
        self.sent = 0
        self.masks = 0
        self.reports: deque[dict[str, str]] = deque(maxlen=2)
        self.report_count = 0
        self._streaming = threading.Event()
        reliable = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        mask_topic = f"{NS}/instance_mask"
        self.node.create_subscription(Image, mask_topic, self._on_mask, reliable, raw=True)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._spin, daemon=True),
            threading.Thread(target=self._publish_loop, daemon=True),
        ]
        self._threads[0].start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        with contextlib.suppress(ExternalShutdownException):
            self.executor.spin()

    def _on_mask(self, _raw: bytes) -> None:
        with self.lock:
            self.masks += 1

    def _on_diag(self, msg: object) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "frames_received" in values:
                with self.lock:
                    self.reports.append(values)
                    self.report_count += 1

    def node_ready(self) -> bool:
        """The node subscribes to the stream and has reported on /diagnostics."""
        with self.lock:
            reported = bool(self.reports)
        return reported and self.pub.get_subscription_count() > 0

    def start_stream(self) -> None:
        """Start publishing at the configured rate (paced on the monotonic clock)."""
        self._streaming.set()
        self._threads[1].start()

    def pause(self) -> int:
        """Stop publishing; returns the number of /diagnostics reports seen so far."""
        self._streaming.clear()
        with self.lock:
            return self.report_count

    def resume(self) -> None:
        """Publish again."""
        self._streaming.set()

    def settled_since(self, reports_before: int) -> bool:
        """Two reports after ``reports_before`` agree and account for every received frame."""
        with self.lock:
            if self.report_count < reports_before + 2:
                return False
            a, b = self.reports
        keys = ("frames_received", "frames_processed", "frames_dropped")
        handled = ("frames_processed", "frames_dropped", "frames_skipped_no_subscribers")
        handled += ("errors", "input_errors")
        done = sum(int(b[k]) for k in handled)
        return all(a[k] == b[k] for k in keys) and int(b["frames_received"]) == done

    def _publish_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            if not self._streaming.is_set():
                self._stop.wait(0.05)
                next_at = time.monotonic()
                continue
            now_ns = time.time_ns()
            self.msg.header.stamp.sec, self.msg.header.stamp.nanosec = divmod(now_ns, 10**9)
            self.pub.publish(self.msg)
            with self.lock:
                self.sent += 1
            next_at += self.period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def counters(self) -> tuple[int, int, dict[str, str]]:
        """(frames sent, masks received, newest /diagnostics values)."""
        with self.lock:
            return self.sent, self.masks, dict(self.reports[-1]) if self.reports else {}

    def close(self) -> None:
        """Stop publishing and spinning; shut the context down."""
        self._stop.set()
        if self._threads[1].is_alive():
            self._threads[1].join(timeout=5.0)
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
        self._threads[0].join(timeout=5.0)


def idle_memory(pid: int, camera: Camera, timeout_s: float = 120.0) -> tuple[float, float]:
    """(RSS, private memory) of the node with no frame in flight: the stream paused until
    /diagnostics shows every received frame handled, then the median of five samples each; the
    stream resumes after."""
    reports = camera.pause()
    try:
        deadline = time.monotonic() + timeout_s
        while not camera.settled_since(reports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node did not go idle within {timeout_s} s of pausing")
            time.sleep(0.1)
        samples = []
        for _ in range(5):
            samples.append(proc_resources(pid))
            time.sleep(0.2)
        return (
            float(np.median([r.rss_mb for r in samples])),
            float(np.median([r.private_mb for r in samples])),
        )
    finally:
        camera.resume()


def summarise(
    rows: list[dict[str, float]], probes: list[tuple[float, float, float]], warmup_s: float
) -> SoakSummary:
    """The summary of the sampled rows and idle probes; the warm-up is left out."""
    if not rows or not probes:
        raise RuntimeError("no samples were taken; is the duration shorter than the warm-up?")
    steady = [r for r in rows if r["t_s"] >= warmup_s] or rows[-1:]
    first, last = steady[0], rows[-1]
    span = max(last["t_s"] - first["t_s"], 1e-9)
    third = max(len(probes) // 3, 1)

    def median(column: int, part: list[tuple[float, float, float]]) -> float:
        return round(float(np.median([p[column] for p in part])), 1)

    return SoakSummary(
        duration_s=round(last["t_s"] - warmup_s, 1),
        warmup_s=warmup_s,
        samples=len(rows),
        rss_start_mb=median(1, probes[:third]),
        rss_end_mb=median(1, probes[-third:]),
        rss_max_mb=round(max(r["rss_mb"] for r in rows), 1),
        private_start_mb=median(2, probes[:third]),
        private_end_mb=median(2, probes[-third:]),
        private_growth_mb=round(median(2, probes[-third:]) - median(2, probes[:third]), 1),
        shared_end_mb=round(last["shared_mb"], 1),
        probes=tuple(tuple(round(v, 1) for v in p) for p in probes),
        fds_start=int(first["fds"]),
        fds_end=int(last["fds"]),
        fds_max=int(max(r["fds"] for r in steady)),
        threads_start=int(first["threads"]),
        threads_end=int(last["threads"]),
        threads_max=int(max(r["threads"] for r in steady)),
        frames_sent=int(last["frames_sent"]),
        frames_received=int(last["frames_received"]),
        frames_processed=int(last["frames_processed"]),
        frames_dropped=int(last["frames_dropped"]),
        errors=int(last["errors"]),
        output_rate_hz=round((last["frames_processed"] - first["frames_processed"]) / span, 2),
        input_rate_hz=round((last["frames_received"] - first["frames_received"]) / span, 2),
    )


def write_plot(rows: list[dict[str, float]], summary: SoakSummary, path: Path) -> None:
    """RSS, fds and threads, rates, and cumulative drops against time (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_s"] for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    axes[0].plot(t, [r["rss_mb"] for r in rows], label="RSS")
    axes[0].plot(t, [r["private_mb"] for r in rows], label="private")
    axes[0].plot(t, [r["shared_mb"] for r in rows], label="shared (DDS)")
    probe_t, probe_rss, probe_private = zip(*summary.probes, strict=True)
    axes[0].plot(probe_t, probe_rss, "o", color="C0", label="idle RSS")
    axes[0].plot(probe_t, probe_private, "o", color="C1", label="idle private")
    axes[0].set_ylabel("memory (MB)")
    axes[0].legend(fontsize="small")
    axes[0].set_title(
        f"soak: idle private memory {summary.private_start_mb} -> {summary.private_end_mb} MB "
        f"({summary.private_growth_mb:+} MB after {summary.warmup_s:g} s warm-up)"
    )
    axes[1].plot(t, [r["fds"] for r in rows], label="open fds")
    axes[1].plot(t, [r["threads"] for r in rows], label="threads")
    axes[1].set_ylabel("count")
    axes[1].legend()
    axes[2].plot(t, [r["input_rate_hz"] for r in rows], label="node input")
    axes[2].plot(t, [r["output_rate_hz"] for r in rows], label="node output")
    axes[2].set_ylabel("rate (Hz)")
    axes[2].legend()
    axes[3].plot(t, [r["frames_dropped"] for r in rows], label="dropped (node)")
    axes[3].plot(t, [r["frames_processed"] for r in rows], label="processed")
    axes[3].set_ylabel("frames")
    axes[3].set_xlabel("time (s)")
    axes[3].legend()
    for ax in axes[:1]:
        ax.axvline(summary.warmup_s, color="grey", linestyle=":")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _diag_number(values: dict[str, str], key: str) -> float:
    try:
        return float(values.get(key, "nan"))
    except ValueError:
        return float("nan")


def run_soak(
    model: Path,
    duration_s: float,
    out: Path,
    rate_hz: float = 30.0,
    size: tuple[int, int] = (1080, 1920),
    warmup_s: float = 10.0,
    warmup_frames: int = 25,
    probe_every_s: float = 60.0,
    period_s: float = 0.2,
    domain: int | None = None,
    backend: str = "onnxruntime",
    ort_threads: int = 0,
    allocator_default: bool = False,
    ready_timeout_s: float = 120.0,
) -> SoakSummary:
    """Run the soak: a warm-up of at least ``warmup_s`` seconds and ``warmup_frames`` processed
    frames (the allocator and ONNX Runtime reach their working sizes), then ``duration_s``
    seconds measured. Writes soak.csv, soak.png, summary.json and node.log under ``out``."""
    warmup_limit_s = warmup_s + 600.0
    out.mkdir(parents=True, exist_ok=True)
    domain = int(os.environ.get("ROS_DOMAIN_ID", "0") or 0) if domain is None else domain
    env = ros_environment(domain)
    if not allocator_default:
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    use_in_this_process(env)
    params = {
        "model": str(model.resolve()),
        "backend": backend,
        "ort_threads": ort_threads,
        "image_topic": INPUT_TOPIC,
    }
    node = NodeProcess(node_command(params), env, out / "node.log")
    camera = None
    rows: list[dict[str, float]] = []
    probes: list[tuple[float, float, float]] = []
    csv_file = open(out / "soak.csv", "w", newline="")  # noqa: SIM115 - closed in finally
    table = csv.DictWriter(csv_file, fieldnames=COLUMNS)
    table.writeheader()
    try:
        camera = Camera(domain, test_frame(*size), rate_hz)
        deadline = time.monotonic() + ready_timeout_s
        while not camera.node_ready():
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the node did not come up; its log ends with:\n{node.tail()}")
            time.sleep(0.1)
        camera.start_stream()
        start = time.monotonic()
        next_sample, next_probe = start, float("inf")
        warmed_at: float | None = None
        while True:
            now = time.monotonic()
            if node.proc.poll() is not None:
                raise RuntimeError(
                    f"the node exited with code {node.proc.returncode} during the soak; its log "
                    f"ends with:\n{node.tail()}"
                )
            res = proc_resources(node.proc.pid)
            sent, masks, diag = camera.counters()
            row = {"t_s": round(now - start, 2), "rss_mb": round(res.rss_mb, 2)}
            row |= {"private_mb": round(res.private_mb, 2), "shared_mb": round(res.shared_mb, 2)}
            row |= {"fds": res.fds, "threads": res.threads}
            row |= {"frames_sent": sent, "masks_received": masks}
            row |= {key: _diag_number(diag, key) for key in DIAG_KEYS}
            rows.append(row)
            table.writerow(row)
            csv_file.flush()
            t = now - start
            if warmed_at is None and t >= warmup_s and row["frames_processed"] >= warmup_frames:
                warmed_at = next_probe = t
            elif warmed_at is None and t > warmup_limit_s:
                raise RuntimeError(
                    f"the node processed {row['frames_processed']:.0f} frames in {t:.0f} s, "
                    f"fewer than the {warmup_frames} of the warm-up; lower --warmup-frames"
                )
            ended = warmed_at is not None and t >= warmed_at + duration_s
            if ended or t >= next_probe:
                probes.append((now - start, *idle_memory(node.proc.pid, camera)))
                next_probe = now - start + probe_every_s
                next_sample = time.monotonic()
            if ended:
                break
            next_sample += period_s
            time.sleep(max(0.0, next_sample - time.monotonic()))
    finally:
        csv_file.close()
        if camera is not None:
            camera.close()
        code = node.stop()
    if code != 0:
        raise RuntimeError(f"the node exited with code {code} on Ctrl-C:\n{node.tail()}")
    summary = summarise(rows, probes, warmed_at or 0.0)
    write_plot(rows, summary, out / "soak.png")
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command line: run the soak and print the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, help="bundle folder (default: models/default)")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds measured after the warm-up"
    )
    parser.add_argument("--rate", type=float, default=30.0, help="camera rate in Hz (default 30)")
    parser.add_argument("--size", default="1080x1920", help="HxW of the frames (default 1080p)")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="warm-up: at least these seconds (default 10)"
    )
    parser.add_argument(
        "--warmup-frames",
        type=int,
        default=25,
        help="warm-up: at least this many frames processed (default 25)",
    )
    parser.add_argument(
        "--probe-every", type=float, default=60.0, help="seconds between idle RSS probes"
    )
    parser.add_argument("--period", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--backend", default="onnxruntime", help="node backend parameter")
    parser.add_argument("--ort-threads", type=int, default=0, help="node ort_threads parameter")
    parser.add_argument(
        "--allocator-default",
        action="store_true",
        help="run the node with glibc's dynamic mmap threshold (idle memory then varies by "
        "a few frame buffers)",
    )
    parser.add_argument("--domain", type=int, help="ROS_DOMAIN_ID (default: the environment's)")
    parser.add_argument("--out", type=Path, default=Path("out/soak"), help="output folder")
    args = parser.parse_args(argv)
    model = args.model or default_model()
    if model is None:
        parser.error("no default model is installed; pass --model BUNDLE")
    try:
        height, width = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size {args.size} is not HxW, e.g. 1080x1920")
    if min(args.duration, args.rate, args.period, args.probe_every, args.warmup_frames) <= 0:
        parser.error("--duration, --rate, --period, --probe-every, --warmup-frames must be > 0")
    try:
        summary = run_soak(
            model,
            args.duration,
            args.out,
            rate_hz=args.rate,
            size=(height, width),
            warmup_s=args.warmup,
            warmup_frames=args.warmup_frames,
            probe_every_s=args.probe_every,
            period_s=args.period,
            domain=args.domain,
            backend=args.backend,
            ort_threads=args.ort_threads,
            allocator_default=args.allocator_default,
        )
    except KeyboardInterrupt:
        print(f"interrupted; the samples so far are in {args.out / 'soak.csv'}")
        return 130
    for key, value in asdict(summary).items():
        print(f"{key:>18}: {value}")
    print(f"wrote {args.out / 'soak.csv'}, {args.out / 'soak.png'}, {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
