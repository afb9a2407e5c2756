#!/usr/bin/env python3
"""Several cameras through one batched node against one node per camera, side by side.

For each image size and each run, the same synthetic camera streams (``--cameras`` cameras at
``--fps`` each, for ``--seconds``) are published in real time to the batched node
(``image_topics``/``camera_names``) and then to one node per camera, over ROS on loopback (the
realtime replay's player: ``compactinst_ros.eval.cameras``). Per configuration: the total output
rate, each camera's end-to-end latency p50/p90 (player publish to the latency record's receipt),
the dropped frames and the summed RSS (VmRSS of the node processes and their children, the peak
of samples every 0.25 s while streaming). Medians over the runs, with the range.

    . scripts/ros_env.sh
    .venv/bin/python scripts/bench_multicamera.py --sizes 256x384 720x1280 --runs 3 --seconds 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from compactinst_ros.backends import usable_cores
from compactinst_ros.errors import ConfigError
from compactinst_ros.eval.bags import write_camera_bag
from compactinst_ros.eval.cameras import Camera, open_cameras, run_cameras
from compactinst_ros.resources import default_model
from compactinst_ros.sizes import parse_size
from compactinst_ros.train.synthetic import BAG_T0_NS, camera_topic, render_scene

#: configuration -> (one batched node?, its rounds in two halves on two threads?)
CONFIGS = {
    "batched": (True, True),
    "batched-one-thread": (True, False),
    "per-camera": (False, False),
}
#: the node's stages whose p50 the cost table shows (a batch's stage times are the round's)
STAGES = ("queue", "preprocess", "encoder", "decoder", "postprocess", "inference", "publish")
#: distinct scenes per camera, repeated over the run (the frames share their bytes)
SCENES = 6


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model(), help="model bundle")
    parser.add_argument("--sizes", nargs="+", default=["256x384", "720x1280"], help="HxW")
    parser.add_argument("--cameras", type=int, default=3, help="number of cameras")
    parser.add_argument("--fps", type=float, default=10.0, help="rate of each camera")
    parser.add_argument("--seconds", type=float, default=20.0, help="streaming time per run")
    parser.add_argument("--runs", type=int, default=3, help="repeats of every configuration")
    parser.add_argument("--warmup", type=int, default=5, help="frames per camera not timed")
    parser.add_argument(
        "--threads",
        type=int,
        default=usable_cores(),
        help="ONNX Runtime threads of the machine: the batched node gets them all, each "
        "per-camera node its share (at least 1)",
    )
    parser.add_argument(
        "--configs", nargs="+", choices=tuple(CONFIGS), default=list(CONFIGS), help="what to run"
    )
    args = parser.parse_args(argv)
    for size in args.sizes:
        try:
            parse_size(size)
        except ConfigError as exc:
            parser.error(f"--sizes: {exc}")
    if args.cameras < 1 or args.runs < 1 or args.seconds <= 0 or args.fps <= 0:
        parser.error("--cameras and --runs must be >= 1, --seconds and --fps positive")
    if args.model is None:
        parser.error("no default model is installed; pass --model BUNDLE")
    return args


def tree_rss_mb(pids: list[int]) -> float:
    """Summed VmRSS of ``pids`` and all their descendants, in MB (gone processes count 0)."""
    seen: set[int] = set()
    todo = list(pids)
    total_kb = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status") as fh:
                total_kb += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(child) for child in fh.read().split()]
        except (OSError, StopIteration):
            continue
    return total_kb / 1024.0


class RssSampler:
    """Samples the summed RSS of the node processes every ``period`` s once started."""

    def __init__(self, period: float = 0.25) -> None:
        self.period = period
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pids: list[int]) -> None:
        """Begin sampling ``pids`` (the nodes are up and subscribed)."""

        def loop() -> None:
            while not self._stop.wait(self.period):
                self.samples.append(tree_rss_mb(pids))

        self.samples.append(tree_rss_mb(pids))
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """Stop; the peak sample in MB."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return max(self.samples, default=float("nan"))


def camera_streams(folder: Path, size: str, count: int, fps: float, seconds: float) -> list[Camera]:
    """``count`` cameras of SCENES synthetic scenes each, repeated for ``seconds`` at ``fps``."""
    height, width = parse_size(size)
    names = [f"cam{k}" for k in range(count)]
    period = round(1e9 / fps)
    streams = {
        camera_topic(name): (
            name,
            [
                (BAG_T0_NS + i * period, render_scene(100 + k, i, height, width).image[..., ::-1])
                for i in range(SCENES)
            ],
        )
        for k, name in enumerate(names)
    }
    bag = write_camera_bag(folder / f"bag_{size}", streams)
    cameras = open_cameras(bag, ",".join(streams))
    frames = int(seconds * fps)
    for camera in cameras:
        scenes = camera.frames
        camera.frames = [
            replace(
                scenes[i % SCENES],
                index=i,
                bag_time_ns=BAG_T0_NS + i * period,
                stamp_ns=BAG_T0_NS + i * period,
            )
            for i in range(frames)
        ]
    return cameras


def node_threads(args: argparse.Namespace, config: str) -> int:
    """ONNX Runtime threads of one session, so that every configuration has the machine's
    cores: all of them for the one-thread batched node, half for each of the two-thread batched
    node's halves (they run at once), a share for each per-camera node."""
    batched, halves = CONFIGS[config]
    if not batched:
        return max(1, args.threads // args.cameras)
    return max(1, args.threads // 2) if halves else args.threads


def measure(cameras: list[Camera], args: argparse.Namespace, config: str) -> dict:
    """One run of one configuration: output rate, per-camera latency, drops, peak RSS."""
    sampler = RssSampler()
    batched, halves = CONFIGS[config]
    try:
        block, _ = run_cameras(
            cameras,
            args.model,
            "onnxruntime",
            pacing="realtime",
            batched=batched,
            warmup=args.warmup,
            progress=False,
            node_params={
                "ort_threads": node_threads(args, config),
                "stage_threads": 2 if halves else 1,
            },
            outputs=("instance_mask",),
            on_ready=sampler.start,
        )
    finally:
        rss = sampler.stop()
    latency = {
        name: (
            camera["latency"].get("end_to_end", {}).get("p50", float("nan")),
            camera["latency"].get("end_to_end", {}).get("p90", float("nan")),
        )
        for name, camera in block["cameras"].items()
    }
    stages = {
        stage: statistics.median(
            c["latency"].get(stage, {}).get("p50", float("nan")) for c in block["cameras"].values()
        )
        for stage in STAGES
    }
    return {
        "output_fps": block["throughput"]["output_fps"] or 0.0,
        "latency": latency,
        "stages_p50": stages,
        "batch": block.get("batch"),
        "dropped": block["frames"]["dropped"],
        "sent": block["frames"]["sent"],
        "rss_mb": rss,
        "nodes": block["nodes"],
    }


def spread(values: list[float], digits: int = 1) -> str:
    """``median (min-max)`` of ``values``."""
    fmt = f"{{:.{digits}f}}"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def summary(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """The Markdown table: one row per (size, configuration), medians (range) over its runs."""
    lines = [
        "| size | config | nodes | output fps | per-camera end-to-end p50 / p90 ms | dropped "
        "| sent | RSS MB |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for (size, config), runs in results.items():
        cameras = sorted(runs[0]["latency"])
        latency = "; ".join(
            f"{name} {spread([r['latency'][name][0] for r in runs], 0)} / "
            f"{spread([r['latency'][name][1] for r in runs], 0)}"
            for name in cameras
        )
        cells = [
            size,
            config,
            str(runs[0]["nodes"]),
            spread([r["output_fps"] for r in runs]),
            latency,
            spread([float(r["dropped"]) for r in runs], 0),
            spread([float(r["sent"]) for r in runs], 0),
            spread([r["rss_mb"] for r in runs], 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def batch_costs(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """The Markdown table of what batching costs and gives: per (size, configuration) the
    cameras' median p50 of each of STAGES and, for the batched node, its rounds (frames per
    round, the window's mean and largest wait, padded slots), medians (range) over the runs."""
    lines = [
        "| size | config | "
        + " | ".join(f"{stage} p50 ms" for stage in STAGES)
        + " | frames per round | window wait mean / max ms | padded slots |",
        "|---|---|" + "---:|" * (len(STAGES) + 3),
    ]
    for (size, config), runs in results.items():
        batches = [r["batch"] for r in runs if r.get("batch")]

        def of(key: str, digits: int = 1, batches: list[dict] = batches) -> str:
            values = [float(b[key]) for b in batches if b.get(key) is not None]
            return spread(values, digits) if values else "–"

        cells = [
            size,
            config,
            *(spread([r["stages_p50"][stage] for r in runs]) for stage in STAGES),
            of("frames_per_round_mean", 2),
            f"{of('window_wait_mean_ms', 2)} / {of('window_wait_max_ms')}",
            of("padded_slots", 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run every size x configuration ``--runs`` times, interleaved, and print the table."""
    args = parse_args(argv)
    print(
        f"{args.cameras} cameras at {args.fps:g} Hz each, {args.seconds:g} s per run, "
        f"{args.runs} runs, model {args.model}, ONNX Runtime threads per session: "
        + ", ".join(f"{c} {node_threads(args, c)}" for c in args.configs)
        + f", load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_multicamera_") as tmp:
        streams = {
            size: camera_streams(Path(tmp), size, args.cameras, args.fps, args.seconds)
            for size in args.sizes
        }
        try:
            for run in range(args.runs):
                for size, cameras in streams.items():
                    for config in args.configs:
                        row = measure(cameras, args, config)
                        results.setdefault((size, config), []).append(row)
                        print(f"run {run + 1} {size} {config}: {row}", file=sys.stderr, flush=True)
        finally:
            for cameras in streams.values():
                for camera in cameras:
                    camera.bag.close()
    print(f"medians (range) of {args.runs} runs; load average now {os.getloadavg()[0]:.1f}")
    print("\n".join(summary(results)))
    print()
    print("\n".join(batch_costs(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
