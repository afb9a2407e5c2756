#!/usr/bin/env python3
"""Soak test: the node under a steady camera stream, its resources sampled over time.

Starts ``compactinst_node`` in a subprocess (DDS on loopback, the shipped FastDDS shared-memory
profile), publishes a best-effort bgr8 stream (default 30 Hz 1920x1080) to it, subscribes to
``~/instance_mask`` so every frame is computed, and samples the node process five times a second:
RSS, open file descriptors and threads (from /proc), plus input/output rate and frame counters
from /diagnostics. A node slower than the camera drops frames and counts them; the soak checks
resources, not throughput. Writes ``soak.csv`` (row by row, so a long soak can be watched),
``soak.png`` and ``summary.json``.

While frames stream, RSS swings by a few frame buffers from one sample to the next (a 1080p frame
is 6 MB), more than the growth to detect. Memory growth is therefore measured at idle probes: the
stream pauses until /diagnostics shows every received frame handled, and the RSS with nothing in
flight is taken (median of five samples). Probes run after the warm-up, every ``--probe-every``
seconds and at the end. Idle RSS still depends on whether the allocator handed the last frame's
buffers back to the system (two levels about 12 MB apart at 1080p), so growth is the median of
the last third of the probes minus the median of the first third.

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

from compactinst_ros.eval.realtime import NodeProcess, node_command, ros_environment
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
COLUMNS = ("t_s", "rss_mb", "fds", "threads", "frames_sent", "masks_received", *DIAG_KEYS)


@dataclass(frozen=True)
class SoakSummary:
    """What the soak is judged on: resource growth after warm-up, rates and drops."""

    duration_s: float
    warmup_s: float
    samples: int
    rss_start_mb: float  # median idle RSS of the first third of the probes
    rss_end_mb: float  # median idle RSS of the last third of the probes
    rss_growth_mb: float  # end - start
    rss_max_mb: float  # while streaming
    idle_rss_mb: tuple[tuple[float, float], ...]  # (t_s, idle RSS) of every probe
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


def proc_resources(pid: int) -> tuple[float, int, int]:
    """(RSS in MB, open file descriptors, threads) of process ``pid``, from /proc."""
    rss_kb = threads = 0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kb / 1024.0, fds, threads


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
        from sensor_msgs.msg import Image

        self.rclpy = rclpy
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain)
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


def idle_rss(pid: int, camera: Camera, timeout_s: float = 120.0) -> float:
    """RSS of the node with no frame in flight: the stream paused until /diagnostics shows every
    received frame handled, then the median of five samples; the stream resumes after."""
    reports = camera.pause()
    try:
        deadline = time.monotonic() + timeout_s
        while not camera.settled_since(reports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node did not go idle within {timeout_s} s of pausing")
            time.sleep(0.1)
        samples = []
        for _ in range(5):
            samples.append(proc_resources(pid)[0])
            time.sleep(0.2)
        return float(np.median(samples))
    finally:
        camera.resume()


def summarise(
    rows: list[dict[str, float]], probes: list[tuple[float, float]], warmup_s: float
) -> SoakSummary:
    """The summary of the sampled rows and idle probes; the warm-up is left out."""
    if not rows or not probes:
        raise RuntimeError("no samples were taken; is the duration shorter than the warm-up?")
    steady = [r for r in rows if r["t_s"] >= warmup_s] or rows[-1:]
    first, last = steady[0], rows[-1]
    span = max(last["t_s"] - first["t_s"], 1e-9)
    third = max(len(probes) // 3, 1)
    rss_start = float(np.median([mb for _, mb in probes[:third]]))
    rss_end = float(np.median([mb for _, mb in probes[-third:]]))
    return SoakSummary(
        duration_s=round(last["t_s"], 1),
        warmup_s=warmup_s,
        samples=len(rows),
        rss_start_mb=round(rss_start, 1),
        rss_end_mb=round(rss_end, 1),
        rss_growth_mb=round(rss_end - rss_start, 2),
        rss_max_mb=round(max(r["rss_mb"] for r in rows), 1),
        idle_rss_mb=tuple((round(t, 1), round(mb, 1)) for t, mb in probes),
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
    axes[0].plot(t, [r["rss_mb"] for r in rows], label="streaming")
    idle_t, idle_mb = zip(*summary.idle_rss_mb, strict=True)
    axes[0].plot(idle_t, idle_mb, "o-", label="idle probes")
    axes[0].set_ylabel("RSS (MB)")
    axes[0].legend()
    axes[0].set_title(
        f"soak: idle RSS {summary.rss_start_mb} -> {summary.rss_end_mb} MB "
        f"({summary.rss_growth_mb:+} MB after {summary.warmup_s:g} s warm-up)"
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
    warmup_s: float = 20.0,
    probe_every_s: float = 60.0,
    period_s: float = 0.2,
    domain: int | None = None,
    backend: str = "onnxruntime",
    ort_threads: int = 0,
    ready_timeout_s: float = 120.0,
) -> SoakSummary:
    """Run the soak; writes soak.csv, soak.png, summary.json and node.log under ``out``."""
    if duration_s <= warmup_s:
        raise ValueError(
            f"duration {duration_s} s ends within the {warmup_s} s warm-up; run longer or "
            "shorten --warmup"
        )
    out.mkdir(parents=True, exist_ok=True)
    domain = int(os.environ.get("ROS_DOMAIN_ID", "0") or 0) if domain is None else domain
    env = ros_environment(domain)
    for key in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY", "RMW_IMPLEMENTATION"):
        os.environ.setdefault(key, env[key])
    if "FASTDDS_DEFAULT_PROFILES_FILE" in env:
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = env["FASTDDS_DEFAULT_PROFILES_FILE"]
    params = {
        "model": str(model.resolve()),
        "backend": backend,
        "ort_threads": ort_threads,
        "image_topic": INPUT_TOPIC,
    }
    node = NodeProcess(node_command(params), env, out / "node.log")
    camera = None
    rows: list[dict[str, float]] = []
    probes: list[tuple[float, float]] = []
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
        next_sample, next_probe = start, warmup_s
        while True:
            now = time.monotonic()
            if node.proc.poll() is not None:
                raise RuntimeError(
                    f"the node exited with code {node.proc.returncode} during the soak; its log "
                    f"ends with:\n{node.tail()}"
                )
            rss, fds, threads = proc_resources(node.proc.pid)
            sent, masks, diag = camera.counters()
            row = {"t_s": round(now - start, 2), "rss_mb": round(rss, 2), "fds": fds}
            row |= {"threads": threads, "frames_sent": sent, "masks_received": masks}
            row |= {key: _diag_number(diag, key) for key in DIAG_KEYS}
            rows.append(row)
            table.writerow(row)
            csv_file.flush()
            ended = now - start >= duration_s
            if ended or now - start >= next_probe:
                probes.append((now - start, idle_rss(node.proc.pid, camera)))
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
    summary = summarise(rows, probes, warmup_s)
    write_plot(rows, summary, out / "soak.png")
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command line: run the soak and print the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, help="bundle folder (default: models/default)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--rate", type=float, default=30.0, help="camera rate in Hz (default 30)")
    parser.add_argument("--size", default="1080x1920", help="HxW of the frames (default 1080p)")
    parser.add_argument(
        "--warmup", type=float, default=20.0, help="seconds excluded from the trends (default 20)"
    )
    parser.add_argument(
        "--probe-every", type=float, default=60.0, help="seconds between idle RSS probes"
    )
    parser.add_argument("--period", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--backend", default="onnxruntime", help="node backend parameter")
    parser.add_argument("--ort-threads", type=int, default=0, help="node ort_threads parameter")
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
    if min(args.duration, args.rate, args.period, args.probe_every) <= 0:
        parser.error("--duration, --rate, --period and --probe-every must be positive")
    try:
        summary = run_soak(
            model,
            args.duration,
            args.out,
            rate_hz=args.rate,
            size=(height, width),
            warmup_s=args.warmup,
            probe_every_s=args.probe_every,
            period_s=args.period,
            domain=args.domain,
            backend=args.backend,
            ort_threads=args.ort_threads,
        )
    except ValueError as exc:  # a duration within the warm-up
        parser.error(str(exc))
    for key, value in asdict(summary).items():
        print(f"{key:>18}: {value}")
    print(f"wrote {args.out / 'soak.csv'}, {args.out / 'soak.png'}, {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
