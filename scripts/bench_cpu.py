#!/usr/bin/env python3
"""The CPU paths at camera resolution: each stage, the frame around the model, and FPS.

Every CPU backend and precision (ONNX Runtime and OpenVINO, FP32 and INT8) runs as a
``Pipeline`` with tracking, as the node runs it, in one process, frame by frame in turn, so
that load from other processes hits all alike. A frame is a held-out demo scene (the
``make demo`` seed) rendered at the model's input size, resized to the camera size and given as
bgr8, a camera's usual encoding. Stages:

* ``preprocess``: colour, resize and letterbox into the encoder's tensor;
* ``encoder``, ``decoder``: the model;
* ``postprocess``: the three rasters at camera resolution (instance, panoptic, semantic), their
  tables and the tracker;
* ``messages``: the node's output messages of the frame (the three rasters as
  sensor_msgs/Image, the instance and segment tables), built as the node builds them.

*Around* is preprocess + postprocess + messages, the work a frame costs beside the model;
``around / model`` divides its median by the median of encoder + decoder. Before timing, every
frame's post-processing is checked bit-identical to the reference (``postprocess/reference.py``)
on the same decoder outputs, on every path. Ends with the targets at 1920x1080 (ONNX Runtime
FP32's ``around / model`` at most 0.35; at least 20 FPS with INT8), each marked met or not met.

    .venv/bin/python scripts/bench_cpu.py [--model models/default] [--frames 8] [--scenes 4] \
        [--sizes 1920x1080] [--paths onnxruntime:fp32 openvino:int8 ...] [--plot stages.png]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from std_msgs.msg import Header

from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.eval.plots import latency_breakdown
from compactinst_ros.jit import cpu_loops
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.postprocess.reference import postprocess
from compactinst_ros.preprocess import letterbox
from compactinst_ros.ros import convert
from compactinst_ros.structures import FrameMeta, FrameResult, OutputSet
from compactinst_ros.train.synthetic import render_scene

#: The stages of a frame, in order; together they are the frame.
STAGES = ("preprocess", "encoder", "decoder", "postprocess", "messages")
AROUND = ("preprocess", "postprocess", "messages")
MODEL = ("encoder", "decoder")
#: Seed of the demo's held-out scenes (``compactinst_ros/demo.py``).
DEMO_SEED = 1000
#: Every CPU backend and precision.
PATHS = ("onnxruntime:fp32", "onnxruntime:int8", "openvino:fp32", "openvino:int8")
#: The camera every target is measured at, the largest ``around / model`` of ONNX Runtime FP32
#: and the least frame rate of every INT8 path there.
TARGET_SIZE, AROUND_RATIO_TARGET, INT8_FPS_TARGET = "1920x1080", 0.35, 20.0
#: Outputs a frame computes: every raster and table (the node's heaviest load)
OUTPUTS = OutputSet(instance=True, panoptic=True, semantic=True)


def spread(values: list[float]) -> str:
    """``median (p10-p90)``."""
    deciles = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return f"{statistics.median(values):.1f} ({deciles[0]:.1f}-{deciles[-1]:.1f})"


def build_messages(result: FrameResult) -> int:
    """The node's messages of ``result`` (rasters as sensor_msgs/Image, both tables), as
    ``ros/publishers.py`` builds them; their payload bytes."""
    header = Header()
    sizes = [
        len(convert.image_msg(image, header).data)
        for image in convert.result_images(result).values()
        if image is not None
    ]
    sizes.append(len(convert.instance_table_msg(header, result.instances).data))
    sizes.append(len(convert.segment_table_msg(header, result.segments).data))
    return sum(sizes)


def check_frame(pipeline: Pipeline, image: np.ndarray) -> None:
    """Exit with a message unless the fast post-processing equals the reference on this path's
    decoder outputs for ``image`` (bgr8)."""
    bundle, backend = pipeline.bundle, pipeline.backend
    meta = FrameMeta.letterbox(*image.shape[:2], bundle.input_h, bundle.input_w)
    tensor = letterbox(image, "bgr8", meta, bundle.pad_value)
    raw = backend.run_decoder(backend.run_encoder(tensor))[0]
    args = (raw, meta, bundle.labels, pipeline.options, OUTPUTS)
    fast, reference = fast_postprocess(*args), postprocess(*args)
    for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
        if not np.array_equal(getattr(fast, name), getattr(reference, name)):
            sys.exit(
                f"{pipeline.backend_name}: post-processing differs from the reference in {name}"
            )
    for table in ("instances", "segments"):
        for field, value in vars(getattr(reference, table)).items():
            if not np.array_equal(getattr(getattr(fast, table), field), value):
                sys.exit(f"post-processing differs from the reference in {table}.{field}")


def time_size(pipelines: dict, frames: list[np.ndarray], rounds: int) -> dict:
    """Per path, stage -> ms per frame over ``rounds`` frames (after one untimed warm-up
    round), the paths taking turns in a rotating order; plus ``instances`` and ``bytes``."""
    times = {path: {k: [] for k in (*STAGES, "frame", "instances", "bytes")} for path in pipelines}
    names = list(pipelines)
    for i in range(rounds + 1):
        frame = frames[i % len(frames)]
        shift = i % len(names)
        for path in names[shift:] + names[:shift]:
            start = time.perf_counter()
            result = pipelines[path](frame, "bgr8", OUTPUTS)
            built = time.perf_counter()
            size = build_messages(result)
            done = time.perf_counter()
            if not i:
                continue
            row = times[path]
            for stage in STAGES[:-1]:
                row[stage].append(result.timings_ms[stage])
            row["messages"].append((done - built) * 1e3)
            row["frame"].append((done - start) * 1e3)
            row["instances"].append(len(result.instances))
            row["bytes"].append(size)
    return times


def median_sum(row: dict, stages: tuple[str, ...]) -> float:
    """Median over frames of the per-frame sum of ``stages``."""
    return statistics.median(map(sum, zip(*(row[s] for s in stages), strict=True)))


def print_table(rows: list) -> None:
    """The Markdown table: per size and path, each stage, around, model, their ratio and FPS."""
    columns = (*STAGES, "around", "model", "frame")
    print("\n| camera | path | " + " | ".join(columns) + " | around / model | FPS |")
    print("|---|---|" + "---:|" * (len(columns) + 2))
    for size, times in rows:
        for path, row in times.items():
            around = [sum(v) for v in zip(*(row[s] for s in AROUND), strict=True)]
            model = [sum(v) for v in zip(*(row[s] for s in MODEL), strict=True)]
            cells = [spread(row[s]) for s in STAGES] + [spread(around), spread(model)]
            cells.append(spread(row["frame"]))
            ratio = median_sum(row, AROUND) / median_sum(row, MODEL)
            fps = 1e3 / statistics.median(row["frame"])
            print(f"| {size} | {path} | " + " | ".join(cells) + f" | {ratio:.2f} | {fps:.1f} |")


def print_targets(rows: list) -> int:
    """One line per target measured (at TARGET_SIZE): the median, the target, met or not met;
    the number not met."""
    missed = 0
    print(f"\ntargets at {TARGET_SIZE} (medians of this run):")
    for size, times in rows:
        if size != TARGET_SIZE:
            continue
        for path, row in times.items():
            if path == "onnxruntime:fp32":
                ratio = median_sum(row, AROUND) / median_sum(row, MODEL)
                met = ratio <= AROUND_RATIO_TARGET
                missed += not met
                print(
                    f"  {path} around / model {ratio:.2f} <= {AROUND_RATIO_TARGET}: "
                    f"{'met' if met else 'not met'}"
                )
            if path.endswith(":int8"):
                fps = 1e3 / statistics.median(row["frame"])
                met = fps >= INT8_FPS_TARGET
                missed += not met
                verdict = "met" if met else "not met"
                print(f"  {path} {fps:.1f} FPS >= {INT8_FPS_TARGET:.0f}: {verdict}")
    return missed


def plot_stages(rows: list, path: Path) -> str:
    """Stacked per-stage bars (median and p90) of every path at every camera size."""
    modes = {}
    for size, times in rows:
        for name, row in times.items():
            latency = {}
            for stage in STAGES:
                deciles = statistics.quantiles(row[stage], n=10) if len(row[stage]) > 1 else None
                p90 = deciles[-1] if deciles else row[stage][0]
                latency[stage] = {"p50": statistics.median(row[stage]), "p90": p90}
            modes[f"{size} {name}"] = {"latency": latency}
    title = "CPU paths per stage (ms per frame)"
    return latency_breakdown(modes, path, stats=("p50", "p90"), title=title)


def main() -> int:
    """Time every path per camera size and print the table and the targets; exit 1 if a
    target measured was not met (0 with ``--report-only``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: models/default)")
    parser.add_argument("--sizes", nargs="+", default=[TARGET_SIZE], help="camera sizes WxH")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), help="backend:precision")
    parser.add_argument("--frames", type=int, default=8, help="timed frames per size and path")
    parser.add_argument("--scenes", type=int, default=4, help="demo scenes to cycle through")
    parser.add_argument("--threads", type=int, default=None, help="backend threads (default: all)")
    parser.add_argument("--plot", type=Path, help="also draw the per-stage medians to this PNG")
    parser.add_argument(
        "--report-only", action="store_true", help="exit 0 even where a target is not met"
    )
    args = parser.parse_args()

    bundle = ModelBundle.load(args.model or default_bundle_path())
    pipelines = {}
    for path in args.paths:
        backend, _, precision = path.partition(":")
        pipelines[path] = Pipeline(
            bundle, backend=backend, precision=precision or None, tracking=True,
            **({"threads": args.threads} if args.threads else {}),
        )  # fmt: skip
    scenes = [
        render_scene(DEMO_SEED, i, bundle.input_h, bundle.input_w).image[..., ::-1]
        for i in range(args.scenes)
    ]
    load_before = os.getloadavg()
    rows = []
    for size in args.sizes:
        width, height = (int(v) for v in size.split("x"))
        frames = [cv2.resize(s, (width, height), interpolation=cv2.INTER_LINEAR) for s in scenes]
        for pipeline in pipelines.values():
            for frame in frames:
                check_frame(pipeline, frame)
        rows.append((size, time_size(pipelines, frames, args.frames)))
        print(f"{size}: done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    print(
        f"\n{bundle.name} ({bundle.input_h}x{bundle.input_w} input), "
        f"{len(os.sched_getaffinity(0))} CPUs, per-pixel loops: {cpu_loops()}; "
        f"load average {load_before[0]:.1f} before / "
        f"{load_after[0]:.1f} after; {args.frames} bgr8 frames per size and path from "
        f"{args.scenes} demo scenes, paths in turn; ms median (p10-p90)"
    )
    for name, pipeline in pipelines.items():
        facts = pipeline.describe()
        version = next((f"{k} {v}" for k, v in facts.items() if k.endswith("_version")), "")
        threads = facts.get("threads") or "the runtime's default"
        print(f"  {name}: {version.split('-')[0]}, threads: {threads}")
    print_table(rows)
    for size, times in rows:
        row = next(iter(times.values()))
        print(
            f"{size}: {statistics.median(row['instances']):.0f} instances a frame (median), "
            f"{statistics.median(row['bytes']) / 1e6:.1f} MB of messages"
        )
    missed = print_targets(rows)
    if args.plot:
        print(f"\nplot: {plot_stages(rows, args.plot)}")
    print("\nall frames: post-processing bit-identical to the reference on every path")
    for pipeline in pipelines.values():
        pipeline.close()
    return 1 if missed and not args.report_only else 0


if __name__ == "__main__":
    sys.exit(main())
