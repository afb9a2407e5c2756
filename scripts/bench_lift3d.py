#!/usr/bin/env python3
"""What lifting the instances to 3-D adds to a 1080p CPU frame, measured side by side.

The synthetic RGB-D scenes at 1080x1920 (``synth --depth``'s camera and sensor) whose things
cover the most pixels, segmented by the default model on the CPU (ONNX Runtime, the instance
outputs only: the smallest frame, so the largest ratio); then, in every round,
the frame through the Pipeline and the lifting of its instances with the depth at the frame's
resolution and at 480x640 (a depth camera's usual size, scaled by the two camera_infos), and
the LiDAR path with 100k points in the camera's view twice: in a spinning LiDAR's scan order
and in random order (a voxel-filtered or merged cloud). With the ``fast`` extra (numba) the
passes over the depth window and over the cloud's points are compiled. Prints the medians and
spreads over the rounds and the ratio lift / frame per round (its median and range).

    .venv/bin/python scripts/bench_lift3d.py [--rounds 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import cv2
import numpy as np

from compactinst_ros.pipeline import Pipeline
from compactinst_ros.resources import default_model
from compactinst_ros.spatial import lift_cloud, lift_depth, prepare_lifting
from compactinst_ros.structures import OutputSet
from compactinst_ros.train import synthetic_depth
from compactinst_ros.train.synthetic import render_scene

H, W = 1080, 1920


def _cloud(depth: np.ndarray, camera: object, points: int, rng: np.random.Generator) -> np.ndarray:
    """``points`` camera-frame points sampled from the scene's depth at random pixels and in
    random order: a cloud as a voxel filter or a merge of several LiDARs leaves it (the
    raster is then read all over for every point: the heavy end)."""
    v = rng.integers(0, H, points)
    u = rng.integers(0, W, points)
    return _points(depth, camera, v, u)


def _scan(depth: np.ndarray, camera: object, points: int, beams: int = 64) -> np.ndarray:
    """About ``points`` camera-frame points in a spinning LiDAR's order: ``beams`` lasers fire
    together at each azimuth step, step after step (a Velodyne driver's cloud), the beams
    spread over the image's rows and the steps over its columns."""
    steps = -(-points // beams)
    v = np.repeat(np.linspace(0, H - 1, beams).round().astype(int)[None], steps, 0).reshape(-1)
    u = np.repeat(np.linspace(0, W - 1, steps).round().astype(int), beams)
    return _points(depth, camera, v, u)


def _points(depth: np.ndarray, camera: object, v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The points that pixels (v, u) of ``depth`` see, in the camera's optical frame."""
    z = depth[v, u]
    xyz = np.stack([(u - camera.cx) * z / camera.fx, (v - camera.cy) * z / camera.fy, z], 1)
    return xyz.astype(np.float32)


def _busiest_scenes(count: int) -> list:
    """The ``count`` scenes of the first 16 of seed 1000 whose things cover the most pixels at
    1080p (lifting's cost grows with the masked area: the heavy end of the field scenes)."""
    scenes = [render_scene(1000, i, H, W) for i in range(16)]
    return sorted(scenes, key=lambda s: -(s.panoptic >= 1000).mean())[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scenes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    outputs = OutputSet(instance=True, panoptic=False, semantic=False)
    header = f"{'step':<14}{'median ms':>10}{'min':>9}{'max':>9}{'ratio (median, range)':>28}"
    prepare_lifting()  # numba's compilation (or cache load) is not a frame's cost
    with Pipeline(default_model(), "onnxruntime", threads=args.threads) as pipeline:
        for scene in _busiest_scenes(args.scenes):
            truth, cam = synthetic_depth.scene_depth(scene)
            depth_mm = synthetic_depth.sensor_depth_mm(truth, np.random.default_rng(0))
            depth = synthetic_depth.depth_image(depth_mm, "32FC1")
            small_k = cam.k.scaled_to(640, 480)
            small = cv2.resize(depth, (640, 480), interpolation=cv2.INTER_NEAREST)
            scan = _scan(truth, cam.k, 100_000)
            cloud = _cloud(truth, cam.k, 100_000, np.random.default_rng(1))
            bgr = np.ascontiguousarray(scene.image[..., ::-1])
            times: dict[str, list[float]] = {
                "frame": [],
                "depth 1080p": [],
                "depth 480p": [],
                "scan 100k": [],
                "cloud 100k": [],
            }
            result = pipeline(bgr, "bgr8", outputs)  # warm-up
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                result = pipeline(bgr, "bgr8", outputs)
                t1 = time.perf_counter()
                raster, ids = result.instance_raster, result.instances.ids
                lifted = lift_depth(raster, ids, depth, cam.k)
                t2 = time.perf_counter()
                lift_depth(raster, ids, small, cam.k, small_k)
                t3 = time.perf_counter()
                lift_cloud(raster, ids, scan, cam.k)
                t4 = time.perf_counter()
                lift_cloud(raster, ids, cloud, cam.k)
                t5 = time.perf_counter()
                steps = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
                for name, dt in zip(times, steps, strict=True):
                    times[name].append(dt * 1e3)
            area = (raster > 0).mean() * 100
            print(
                f"\n{len(ids)} instances covering {area:.1f} % of {H}x{W}, "
                f"{int(lifted.valid.sum())} lifted; {args.rounds} rounds"
            )
            print(header)
            frame = times["frame"]
            for name, values in times.items():
                ratios = [v / f * 100 for v, f in zip(values, frame, strict=True)]
                spread = f"({min(ratios):.2f}-{max(ratios):.2f} %)"
                ratio = "" if name == "frame" else f"{statistics.median(ratios):6.2f} % {spread}"
                print(
                    f"{name:<14}{statistics.median(values):>10.1f}{min(values):>9.1f}"
                    f"{max(values):>9.1f}{ratio:>28}"
                )


if __name__ == "__main__":
    main()
