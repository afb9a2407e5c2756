#!/usr/bin/env python3
"""The fast CPU post-processing: numpy vs compiled (numba) loops, one thread vs two.

All run ``fast_postprocess`` on the same decoder outputs (the default model on the demo's
held-out scenes, resized to each camera size), in turn call by call; every frame is first
checked bit for bit against the reference with each. Prints per camera size the median and
p10-p90 of each, and the ratios: compiled against numpy loops (both on two threads where the
host has two CPUs), and two threads (the semantic and instance rasters on the helper thread)
against one.

    .venv/bin/python scripts/bench_postprocess_loops.py [--sizes 384x256 1280x720 1920x1080] \
        [--scenes 3] [--rounds 20]
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

from compactinst_ros import jit
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.postprocess import compiled, helper
from compactinst_ros.postprocess.fast import fast_postprocess
from compactinst_ros.postprocess.reference import postprocess
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions
from compactinst_ros.train.synthetic import render_scene

#: Seed of the demo's held-out scenes (``compactinst_ros/demo.py``).
DEMO_SEED = 1000
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")


def same(a: FrameResult, b: FrameResult) -> bool:
    """Every raster and table field equal."""
    tables = all(
        np.array_equal(getattr(getattr(a, t), f), v)
        for t in ("instances", "segments")
        for f, v in vars(getattr(b, t)).items()
    )
    return tables and all(np.array_equal(getattr(a, r), getattr(b, r)) for r in RASTERS)


def spread(values: list[float]) -> str:
    """``median (p10-p90)`` in ms."""
    deciles = statistics.quantiles(values, n=10)
    return f"{statistics.median(values):.2f} ({deciles[0]:.2f}-{deciles[-1]:.2f})"


def main() -> int:
    """Time the three variants per camera size and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: models/default)")
    parser.add_argument(
        "--sizes", nargs="+", default=["384x256", "1280x720", "1920x1080"], help="camera sizes WxH"
    )
    parser.add_argument("--scenes", type=int, default=3, help="demo scenes to cycle through")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls per size and loops")
    args = parser.parse_args()
    if jit.numba is None:
        sys.exit("numba is not installed: pip install '.[fast]'")

    bundle = ModelBundle.load(args.model or default_bundle_path())
    pipe = Pipeline(bundle, backend="onnxruntime")
    backend, options, outputs = pipe.backend, PostprocessOptions(), OutputSet()
    scenes = [
        render_scene(DEMO_SEED, i, bundle.input_h, bundle.input_w).image for i in range(args.scenes)
    ]
    print(
        f"{bundle.name}, numba {jit.numba.__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.rounds} calls per "
        "size and loops, alternating; ms median (p10-p90)\n"
    )
    print(
        "| camera | numpy loops | compiled, one thread | compiled, two threads | compiled / numpy "
        "| two threads / one |\n|---|---:|---:|---:|---:|---:|"
    )
    #: (compiled loops, helper thread) of each column
    variants = {"numpy": (False, True), "one": (True, False), "two": (True, True)}
    for size in args.sizes:
        width, height = (int(v) for v in size.split("x"))
        meta = FrameMeta.letterbox(height, width, bundle.input_h, bundle.input_w)
        frames = []
        for scene in scenes:
            image = cv2.resize(scene, (width, height), interpolation=cv2.INTER_LINEAR)
            tensor = letterbox(image, "rgb8", meta, bundle.pad_value)
            raw = backend.run_decoder(backend.run_encoder(tensor))[0]
            reference = postprocess(raw, meta, bundle.labels, options, outputs)
            for name, (compiled.AVAILABLE, helper.HELPER_THREAD) in variants.items():
                result = fast_postprocess(raw, meta, bundle.labels, options, outputs)
                if not same(result, reference):
                    sys.exit(f"{size}: {name} differs from the reference")
            frames.append(raw)
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for i in range(args.rounds):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                compiled.AVAILABLE, helper.HELPER_THREAD = variants[name]
                start = time.perf_counter()
                fast_postprocess(frames[i % len(frames)], meta, bundle.labels, options, outputs)
                times[name].append((time.perf_counter() - start) * 1e3)
        median = {name: statistics.median(values) for name, values in times.items()}
        cells = " | ".join(spread(times[name]) for name in names)
        print(
            f"| {width}x{height} | {cells} | {median['numpy'] / median['two']:.2f}x "
            f"| {median['one'] / median['two']:.2f}x |"
        )
    print("\nevery frame: every variant bit-identical to the reference")
    pipe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
