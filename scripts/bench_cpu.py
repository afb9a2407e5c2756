#!/usr/bin/env python3
"""The CPU path at camera resolution, old vs new side by side in one run, per stage.

old: ONNX Runtime sessions as before (full optimisation, default threads, spinning pool) and
the numpy reference post-processing (``postprocess/reference.py``). new: ``Pipeline`` on the
onnxruntime backend (non-spinning sessions, tiled post-processing ``postprocess/fast.py``).
Frames are held-out demo scenes (the ``make demo`` seed) rendered at the model's input size and
resized to each camera size. Old and new alternate frame by frame so that load from other
processes hits both alike; every frame is also checked: new post-processing bit-identical to
the reference on the same decoder outputs, and new decoder outputs within 1e-4 of old. Ends with
the targets (post-processing at 384x256 and 1920x1080, end-to-end frame rate at 1920x1080), each
marked met or not met.

    .venv/bin/python scripts/bench_cpu.py [--model models/default] [--frames 6] \
        [--sizes 384x256 1280x720 1920x1080] [--scenes 3]
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
import onnxruntime

from compactinst_ros.bundle import DECODER_OUTPUTS, ModelBundle, default_bundle_path
from compactinst_ros.eval.plots import latency_breakdown
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.postprocess.reference import postprocess
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import (
    INFERENCE,
    FrameMeta,
    FrameResult,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)
from compactinst_ros.train.synthetic import render_scene

STAGES = ("preprocess", "encoder", "decoder", "postprocess", INFERENCE)
#: Seed of the demo's held-out scenes (``compactinst_ros/demo.py``).
DEMO_SEED = 1000
#: Largest allowed |new - old| decoder output (FP32).
DECODER_TOLERANCE = 1e-4
#: Camera size -> (post-processing ms at most, speed-up over the reference at least) targets.
POSTPROCESS_TARGETS = {"384x256": (5.0, None), "1920x1080": (41.0, 10.0)}
#: End-to-end target through Pipeline: frames per second at 1920x1080.
PIPELINE_FPS_TARGET = ("1920x1080", 10.0)


class OldPath:
    """The CPU path before the tiled post-processing and session tuning, stage-timed."""

    def __init__(self, bundle: ModelBundle) -> None:
        self.bundle = bundle
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.encoder, self.decoder = (
            onnxruntime.InferenceSession(
                str(bundle.stage(name).path), options, providers=["CPUExecutionProvider"]
            )
            for name in ("encoder", "decoder")
        )
        self.features = [o.name for o in self.encoder.get_outputs()]
        self.image_input = self.encoder.get_inputs()[0].name

    def __call__(self, image: np.ndarray) -> tuple[FrameResult, RawOutputs]:
        """Segment one rgb8 frame; the result carries the same stage timings as the backend."""
        start = time.perf_counter()
        meta = FrameMeta.letterbox(*image.shape[:2], self.bundle.input_h, self.bundle.input_w)
        tensor = letterbox(image, "rgb8", meta, self.bundle.pad_value)
        t1 = time.perf_counter()
        features = self.encoder.run(self.features, {self.image_input: tensor})
        t2 = time.perf_counter()
        logits, masks = self.decoder.run(
            list(DECODER_OUTPUTS), dict(zip(self.features, features, strict=True))
        )
        raw = RawOutputs(logits[0], masks[0], self.bundle.mask_stride)
        t3 = time.perf_counter()
        result = postprocess(raw, meta, self.bundle.labels, PostprocessOptions(), OutputSet())
        t4 = time.perf_counter()
        result.timings_ms.update(
            preprocess=(t1 - start) * 1e3,
            encoder=(t2 - t1) * 1e3,
            decoder=(t3 - t2) * 1e3,
            postprocess=(t4 - t3) * 1e3,
            **{INFERENCE: (t4 - start) * 1e3},
        )
        return result, raw


def decoder_outputs(new: Pipeline, image: np.ndarray, meta: FrameMeta) -> RawOutputs:
    """The new path's decoder outputs for one rgb8 frame, before post-processing."""
    backend = new.backend
    tensor = letterbox(image, "rgb8", meta, new.bundle.pad_value)
    return backend.run_decoder(backend.run_encoder(tensor))[0]


def check_frame(new: Pipeline, old_raw: RawOutputs, image: np.ndarray) -> None:
    """Exit with a message unless the new path reproduces the old one on this frame."""
    bundle = new.bundle
    meta = FrameMeta.letterbox(*image.shape[:2], bundle.input_h, bundle.input_w)
    raw = decoder_outputs(new, image, meta)
    error = max(
        float(np.abs(raw.class_logits - old_raw.class_logits).max()),
        float(np.abs(raw.mask_logits - old_raw.mask_logits).max()),
    )
    if error > DECODER_TOLERANCE:
        sys.exit(f"decoder outputs differ by {error:.2e} > {DECODER_TOLERANCE} from the old path")
    args = (raw, meta, bundle.labels, new.options, OutputSet())
    fast, reference = fast_postprocess(*args), postprocess(*args)
    for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
        if not np.array_equal(getattr(fast, name), getattr(reference, name)):
            sys.exit(f"fast post-processing differs from the reference in {name}")
    for table in ("instances", "segments"):
        for field, value in vars(getattr(reference, table)).items():
            if not np.array_equal(getattr(getattr(fast, table), field), value):
                sys.exit(f"fast post-processing differs from the reference in {table}.{field}")


def spread(values: list[float]) -> str:
    """``median (p10-p90)`` in ms."""
    deciles = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return f"{statistics.median(values):.1f} ({deciles[0]:.1f}-{deciles[-1]:.1f})"


def postprocess_only(new: Pipeline, frames: list[np.ndarray], repeats: int) -> dict:
    """Reference vs fast on the same decoder outputs, alternating: wall and process CPU ms.

    Post-processing is single-threaded numpy, so its CPU time is what it takes on an idle core;
    on a loaded machine it is the steadier number.
    """
    bundle = new.bundle
    times: dict = {(impl, clock): [] for impl in ("old", "new") for clock in ("wall", "cpu")}
    for i in range(repeats):
        image = frames[i % len(frames)]
        meta = FrameMeta.letterbox(*image.shape[:2], bundle.input_h, bundle.input_w)
        args = (decoder_outputs(new, image, meta), meta, bundle.labels, new.options)
        runs = (("old", postprocess), ("new", fast_postprocess))
        for impl, run in runs if i % 2 else runs[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            run(*args, OutputSet())
            times[impl, "wall"].append((time.perf_counter() - wall) * 1e3)
            times[impl, "cpu"].append((time.process_time() - cpu) * 1e3)
    return times


def plot_stages(rows: list, path: Path) -> str:
    """Stacked per-stage bars (median and p90) of old and new at every camera size."""
    modes = {}
    for size, times, _, _ in rows:
        for path_name in ("old", "new"):
            latency = {}
            for stage in STAGES[:-1]:  # the stages add up to the whole call
                values = times[path_name][stage]
                deciles = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
                latency[stage] = {"p50": statistics.median(values), "p90": deciles[-1]}
            modes[f"{size} {path_name}"] = {"latency": latency}
    title = "CPU path per stage, old vs new (ms per frame)"
    return latency_breakdown(modes, path, stats=("p50", "p90"), title=title)


def print_targets(rows: list) -> None:
    """One line per target whose camera size was measured: the median, the target, met or not.

    Post-processing is judged on the medians of the post-processing-alone runs (same decoder
    outputs, wall time), the frame rate on the new path's median ``inference`` time.
    """
    print("\ntargets (medians of this run):")
    for size, times, _, alone in rows:
        ms = statistics.median(alone["new", "wall"])
        speedup = statistics.median(alone["old", "wall"]) / ms
        limit, factor = POSTPROCESS_TARGETS.get(size, (None, None))
        if limit is not None:
            print(
                f"  {size} post-processing {ms:.1f} ms <= {limit:.0f} ms: "
                f"{'met' if ms <= limit else 'not met'}"
            )
        if factor is not None:
            print(
                f"  {size} post-processing {speedup:.1f}x the reference >= {factor:.0f}x: "
                f"{'met' if speedup >= factor else 'not met'}"
            )
        if size == PIPELINE_FPS_TARGET[0]:
            fps = 1e3 / statistics.median(times["new"][INFERENCE])
            target = PIPELINE_FPS_TARGET[1]
            print(
                f"  {size} end to end {fps:.1f} FPS >= {target:.0f} FPS: "
                f"{'met' if fps >= target else 'not met'}"
            )


def main() -> int:
    """Time old and new alternately per camera size and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: models/default)")
    parser.add_argument(
        "--sizes", nargs="+", default=["384x256", "1280x720", "1920x1080"], help="camera sizes WxH"
    )
    parser.add_argument("--frames", type=int, default=6, help="timed frames per size and path")
    parser.add_argument("--scenes", type=int, default=3, help="demo scenes to cycle through")
    parser.add_argument("--plot", type=Path, help="also draw the per-stage medians to this PNG")
    args = parser.parse_args()

    bundle = ModelBundle.load(args.model or default_bundle_path())
    new = Pipeline(bundle, backend="onnxruntime", options=PostprocessOptions())
    old = OldPath(bundle)
    scenes = [
        render_scene(DEMO_SEED, i, bundle.input_h, bundle.input_w).image for i in range(args.scenes)
    ]
    load_before = os.getloadavg()
    rows = []
    for size in args.sizes:
        width, height = (int(v) for v in size.split("x"))
        frames = [cv2.resize(s, (width, height), interpolation=cv2.INTER_LINEAR) for s in scenes]
        for frame in frames:
            check_frame(new, old(frame)[1], frame)
        times = {path: {stage: [] for stage in STAGES} for path in ("old", "new")}
        instances = []
        for i in range(args.frames + 1):  # frame 0 of each size warms up caches
            frame = frames[i % len(frames)]
            runs = (("old", lambda f=frame: old(f)[0]), ("new", lambda f=frame: new(f, "rgb8")))
            for path, run in runs if i % 2 else runs[::-1]:
                result = run()
                if i:
                    for stage in STAGES:
                        times[path][stage].append(result.timings_ms[stage])
            instances.append(len(result.instances))
        rows.append((size, times, statistics.median(instances), postprocess_only(new, frames, 12)))
        print(f"{size}: done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    print(
        f"\n{bundle.name} ({bundle.input_h}x{bundle.input_w} input), ONNX Runtime "
        f"{onnxruntime.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} before / {load_after[0]:.1f} after; {args.frames} frames per size "
        f"and path from {args.scenes} demo scenes, old and new alternating; ms median (p10-p90)"
    )
    print("\n| camera | instances | path | " + " | ".join(STAGES) + " | post speed-up |")
    print("|---|---:|---|" + "---:|" * len(STAGES) + "---:|")
    for size, times, instances, _ in rows:
        speedup = statistics.median(times["old"]["postprocess"]) / statistics.median(
            times["new"]["postprocess"]
        )
        for path in ("old", "new"):
            cells = " | ".join(spread(times[path][s]) for s in STAGES)
            tail = f"{speedup:.1f}x" if path == "new" else ""
            print(f"| {size} | {instances:.0f} | {path} | {cells} | {tail} |")
    print("\npost-processing alone, same decoder outputs, 12 runs alternating: ms median (p10-p90)")
    print("\n| camera | reference wall | fast wall | reference CPU | fast CPU | speed-up (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    for size, _, _, alone in rows:
        speedup = statistics.median(alone["old", "cpu"]) / statistics.median(alone["new", "cpu"])
        cells = " | ".join(
            spread(alone[impl, clock]) for clock in ("wall", "cpu") for impl in ("old", "new")
        )
        print(f"| {size} | {cells} | {speedup:.1f}x |")
    print_targets(rows)
    if args.plot:
        print(f"\nplot: {plot_stages(rows, args.plot)}")
    print("\nall frames: new post-processing bit-identical to the reference, decoder within 1e-4")
    new.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
