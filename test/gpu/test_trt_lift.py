"""Pipeline.lift_depth and lift_cloud: on the TensorRT stand-in the lift kernels (gpu/lift.py, run
on the CPU emulator) read the instance raster where the post-processing left it on the device and
give spatial.lift_depth's and spatial.lift_cloud's tables of the host raster (and the cloud's point
labels), ids the track ids; a frame of an older batch (its arena reused since), a size mismatch
and the CPU backend lift on the host.

Exact: ids, validity, support, robust depth, extent. Within 1e-6 relative + 1e-6 m: centroid and
distance (float64 atomics add in the threads' order; kernels/lift.cu)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from compactinst_ros.backends.base import DeviceLiftBackend
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.errors import InputError
from compactinst_ros.gpu.frames import smooth_rgb
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.spatial.lift import (
    Instances3D,
    Intrinsics,
    LiftOptions,
    lift_cloud,
    lift_depth,
)
from compactinst_ros.structures import FrameResult, OutputSet

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
ASKED = OutputSet(instance=True, panoptic=False, semantic=False)
COLOUR = Intrinsics(110.0, 108.0, 83.5, 59.5, 168, 120)
HALF = COLOUR.scaled_to(84, 60)
OPTIONS = LiftOptions(min_points=5, percentile=40.0)


def frame(seed: int = 5) -> np.ndarray:
    return np.ascontiguousarray(smooth_rgb(120, 168, seed)[..., ::-1])


def depth_for(raster: np.ndarray, grid: Intrinsics, seed: int) -> np.ndarray:
    """A depth per instance (1 m + 0.4 m per id) with noise, NaN and zeros, background at 6 m,
    sampled at ``grid``'s size (nearest pixel of the raster)."""
    rng = np.random.default_rng(seed)
    rows = np.arange(grid.height) * raster.shape[0] // grid.height
    cols = np.arange(grid.width) * raster.shape[1] // grid.width
    ids = raster[rows][:, cols].astype(np.float32)
    depth = np.where(ids > 0, 1.0 + 0.4 * ids, 6.0).astype(np.float32)
    depth += rng.normal(0, 0.02, depth.shape).astype(np.float32)
    depth[rng.random(depth.shape) < 0.05] = np.nan
    depth[rng.random(depth.shape) < 0.03] = 0.0
    return depth


def cloud_for(raster: np.ndarray, seed: int, count: int = 4000) -> np.ndarray:
    """A LiDAR-like cloud in the camera's frame: points at sub-pixel positions (some beyond the
    image) at depth_for's depths, NaN and zeros included."""
    rng = np.random.default_rng(seed)
    depth = depth_for(raster, COLOUR, seed)
    u = rng.uniform(-2.0, COLOUR.width + 2.0, count)
    v = rng.uniform(-2.0, COLOUR.height + 2.0, count)
    rows = np.clip(np.rint(v), 0, COLOUR.height - 1).astype(int)
    z = depth[rows, np.clip(np.rint(u), 0, COLOUR.width - 1).astype(int)]
    x, y = (u - COLOUR.cx) * z / COLOUR.fx, (v - COLOUR.cy) * z / COLOUR.fy
    return np.stack([x, y, z], 1).astype(np.float32)


def host_lift(result: FrameResult, depth_m, grid) -> Instances3D:
    return lift_depth(result.instance_raster, result.instances.ids, depth_m, COLOUR, grid, OPTIONS)


def assert_same(got: Instances3D, want: Instances3D, exact: bool = False) -> None:
    for name in ("ids", "valid", "support", "depth", "extent"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), name)
    for name in ("centroid", "distance"):
        a, b = getattr(got, name), getattr(want, name)
        if exact:
            np.testing.assert_array_equal(a, b, name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def lift_launches(driver) -> list[str]:
    return [name for name in driver.launches if name.startswith("lift_")]


@needs_gxx
def test_tensorrt_lifts_on_the_device_as_the_host_does(emulated_gpu) -> None:
    """Both frames of a batch of two (slot 1's raster is not at the arena's start), the first
    with track ids that are not its raster's per-frame ids."""
    bundle = ModelBundle.load(default_bundle_path())
    with Pipeline(bundle, backend="tensorrt", tracking=True, batch_sizes=(2,)) as pipe:
        assert isinstance(pipe.backend, DeviceLiftBackend)
        older = pipe(frame(), "bgr8", ASKED)
        pipe.tracker.reset()  # the same objects get new track ids: not the raster's frame ids
        items = [pipe.prepare(frame(seed), "bgr8", ASKED) for seed in (5, 9)]
        pair = pipe.infer_batch(items, [pipe.tracker, pipe.make_tracker()])
        n = len(pair[0].instances)
        assert n > 1 and pair[0].instances.ids.min() > n
        assert len(pair[1].instances) > 1
        assert (pair[0].instance_raster != pair[1].instance_raster).mean() > 0.1
        for result in pair:
            for grid, seed in ((None, 0), (HALF, 1)):  # the colour camera's size; half, own K
                depth_m = depth_for(result.instance_raster, grid or COLOUR, seed)
                emulated_gpu.launches.clear()
                got = pipe.lift_depth(result, depth_m, COLOUR, grid, OPTIONS)
                assert "lift_accumulate" in lift_launches(emulated_gpu)
                want = host_lift(result, depth_m, grid)
                assert want.valid.sum() > 1, want.support
                assert_same(got, want)
            xyz = cloud_for(result.instance_raster, 4)
            emulated_gpu.launches.clear()
            got, labels = pipe.lift_cloud(result, xyz, COLOUR, OPTIONS)
            assert "lift_cloud_labels" in lift_launches(emulated_gpu)
            ids = result.instances.ids
            want, want_labels = lift_cloud(result.instance_raster, ids, xyz, COLOUR, OPTIONS)
            assert want.valid.sum() > 1, want.support
            assert_same(got, want)
            np.testing.assert_array_equal(labels, want_labels)
            assert set(np.unique(labels)) - {0} <= set(ids.tolist()) and labels.any()
        result = pair[0]
        # an older batch's frame: its arena holds the last frame now, so the host lifts it
        emulated_gpu.launches.clear()
        depth_m = depth_for(older.instance_raster, COLOUR, 2)
        got = pipe.lift_depth(older, depth_m, COLOUR, None, OPTIONS)
        assert lift_launches(emulated_gpu) == []
        assert_same(got, host_lift(older, depth_m, None), exact=True)
        xyz = cloud_for(older.instance_raster, 5)
        got, labels = pipe.lift_cloud(older, xyz, COLOUR, OPTIONS)
        want, want_labels = lift_cloud(
            older.instance_raster, older.instances.ids, xyz, COLOUR, OPTIONS
        )
        assert lift_launches(emulated_gpu) == []
        assert_same(got, want, exact=True)
        np.testing.assert_array_equal(labels, want_labels)
        # sizes the camera_info does not explain: the host's InputError, no kernel
        with pytest.raises(InputError, match="publish the depth camera_info"):
            pipe.lift_depth(result, depth_m[:-1], COLOUR)
        assert lift_launches(emulated_gpu) == []


def test_cpu_backend_lifts_on_the_host() -> None:
    """ONNX Runtime has no device raster: Pipeline.lift_depth is spatial.lift_depth, bit for
    bit."""
    with Pipeline(default_bundle_path(), backend="onnxruntime", tracking=True) as pipe:
        assert not isinstance(pipe.backend, DeviceLiftBackend)
        result = pipe(frame(), "bgr8", ASKED)
        depth_m = depth_for(result.instance_raster, HALF, 3)
        got = pipe.lift_depth(result, depth_m, COLOUR, HALF, OPTIONS)
        assert got.valid.sum() > 1
        assert_same(got, host_lift(result, depth_m, HALF), exact=True)
        xyz = cloud_for(result.instance_raster, 6)
        got, labels = pipe.lift_cloud(result, xyz, COLOUR, OPTIONS)
        want, want_labels = lift_cloud(
            result.instance_raster, result.instances.ids, xyz, COLOUR, OPTIONS
        )
        assert_same(got, want, exact=True)
        np.testing.assert_array_equal(labels, want_labels)
        blind = pipe(frame(), "bgr8", OutputSet(instance=False))
        with pytest.raises(ValueError, match="instance raster"):
            pipe.lift_depth(blind, depth_m, COLOUR)
        with pytest.raises(ValueError, match="instance raster"):
            pipe.lift_cloud(blind, xyz, COLOUR)
