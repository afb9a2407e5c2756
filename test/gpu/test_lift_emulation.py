"""The 3-D lifting kernels (gpu/kernels/lift.cu) run on the CPU emulator through their real host
launcher (gpu/lift.py on the pycuda stand-in): equal to the numpy twin (gpu/lift_twin.py) and to
spatial.lift_depth or spatial.lift_cloud on the synthetic scenes, under several block and thread
schedules.

Exact: the frame values, counts, ranks, robust depths, support, boxes and extents, validity.
Within a tolerance, because float64 atomics add in the threads' order: the sums (1e-12 relative
to the twin's) and the centroid and distance (1e-6 relative + 1e-6 m to lift_depth's: sum /
support rounded to float32 can land 1 ulp apart)."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pycuda_emu  # test/gpu/emu, put on sys.path by conftest.py
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.gpu import lift_twin
from compactinst_ros.gpu.lift import KERNELS, GpuLift, instances_from_tables
from compactinst_ros.spatial.lift import (
    Intrinsics,
    LiftOptions,
    lift_cloud,
    lift_depth,
    project_points,
)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


def run_scene(driver, lifter: GpuLift, scene: lift_twin.Scene):
    """The kernels' tables and Instances3D of ``scene``."""
    return scene.lift_on(lifter, driver.Stream())


@needs_gxx
def test_kernels_equal_twin_and_cpu_on_every_scene(emu_lib, monkeypatch) -> None:
    """One launcher for all scenes (buffers reused and grown, index tables rebuilt per camera
    pair): planes with NaN, 0 and see-through depth, an instance eroded away, half- and
    other-resolution depth, stride 2, no instances."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    lifter = GpuLift()
    for name, scene in lift_twin.SCENES.items():
        tables, lifted = run_scene(driver, lifter, scene)
        diff = lift_twin.compare(tables, lifted, scene)
        assert diff.exact, (name, diff.mismatch)
        assert diff.sum_rel <= lift_twin.SUM_RTOL, (name, diff.sum_rel)
        assert diff.centroid_ok, (name, diff.centroid_m)
    assert set(driver.launches) == set(KERNELS) - {
        "lift_cloud_classify", "lift_cloud_accumulate", "lift_cloud_labels"
    }  # fmt: skip
    planes = lift_twin.SCENES["planes"].cpu()  # what the scene is there to show
    assert planes.valid.tolist() == [True, True, True, False, False]
    assert planes.support[2] == 9  # the 3x3 instance, from its whole mask
    assert lift_twin.SCENES["strided"].twin()["frame"]["step"] == 2


def run_cloud(driver, lifter: GpuLift, scene: lift_twin.CloudScene, point_ids=None):
    """The cloud kernels' tables, Instances3D and point labels of ``scene``."""
    return scene.lift_on(lifter, driver.Stream(), point_ids)


@needs_gxx
def test_cloud_kernels_equal_twin_and_cpu_on_every_scene(emu_lib, monkeypatch) -> None:
    """One launcher for the clouds and a depth frame between them (buffers shared and grown):
    points through NaN, 0 and see-through depths, beyond the image, behind the camera, at the
    range limits; instances at the image's edges; no erosion."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    lifter = GpuLift()
    for name, scene in lift_twin.CLOUD_SCENES.items():
        tables, lifted, labels = run_cloud(driver, lifter, scene)
        diff = lift_twin.compare_cloud(tables, lifted, labels, scene)
        assert diff.exact, (name, diff.mismatch)
        assert diff.sum_rel <= lift_twin.SUM_RTOL, (name, diff.sum_rel)
        assert diff.centroid_ok, (name, diff.centroid_m)
        run_scene(driver, lifter, lift_twin.SCENES["planes"])  # the depth path in between
    assert {"lift_cloud_classify", "lift_cloud_accumulate", "lift_cloud_labels"} <= set(
        driver.launches
    )
    planes, labels = lift_twin.CLOUD_SCENES["cloud_planes"].cpu()  # what the scene shows
    assert planes.valid[:2].tolist() == [True, True] and not planes.valid[4]
    # 3 and 4 fall back to their whole masks, whose points they label; 7 is in the raster
    # but not lifted, so its points are labelled 0
    assert set(np.unique(labels)) == {0, 1, 2, 3, 4}
    cloud = lift_twin.CLOUD_SCENES["cloud_planes"]
    inside, v, u = project_points(cloud.xyz, cloud.colour, 0.1, 200.0)
    on_seven = inside[cloud.raster[v, u] == 7]
    assert len(on_seven) > 5 and not labels[on_seven].any()


@needs_gxx
def test_cloud_labels_carry_the_given_ids_and_an_empty_cloud_lifts_nothing(
    emu_lib, monkeypatch
) -> None:
    """Per-row point ids (a tracker's, where the raster holds per-frame ids) label the points;
    a cloud of no points gives every instance no 3-D."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    lifter = GpuLift()
    scene = lift_twin.CLOUD_SCENES["cloud_planes"]
    tracks = np.array([41, 42, 43, 44, 45], np.uint16)
    _, lifted, labels = run_cloud(driver, lifter, scene, point_ids=tracks)
    _, want = scene.cpu()
    as_tracks = np.where(want > 0, tracks[np.searchsorted(scene.ids, want)], 0)
    np.testing.assert_array_equal(labels, as_tracks)
    empty = lift_twin.CloudScene(
        scene.raster, scene.ids, np.zeros((0, 3), np.float32), scene.colour, scene.options
    )
    _, lifted, labels = run_cloud(driver, lifter, empty)
    assert len(labels) == 0 and not lifted.valid.any() and len(lifted) == len(scene.ids)


@needs_gxx
def test_kernels_give_the_same_tables_under_every_schedule(emu_lib, monkeypatch) -> None:
    """Blocks and threads reversed and shuffled: the atomics and barriers leave every exact
    field unchanged; only the float64 sums may move in their last bits."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    lifter = GpuLift()
    scene = lift_twin.SCENES["strided"]
    cloud = lift_twin.CLOUD_SCENES["cloud_at_the_border"]
    base, _ = run_scene(driver, lifter, scene)
    base_cloud, _, base_labels = run_cloud(driver, lifter, cloud)
    emu_lib.emu_set_schedule.argtypes = [ctypes.c_int, ctypes.c_uint]
    try:
        for mode, seed in ((1, 0), (2, 1)):
            emu_lib.emu_set_schedule(mode, seed)
            got, _ = run_scene(driver, lifter, scene)
            got_cloud, _, labels = run_cloud(driver, lifter, cloud)
            np.testing.assert_array_equal(labels, base_labels)
            assert got["frame"] == base["frame"]
            for a, b in ((got, base), (got_cloud, base_cloud)):
                for field in lift_twin.EXACT_SLOT_FIELDS:
                    np.testing.assert_array_equal(a["slot"][field], b["slot"][field], field)
                np.testing.assert_allclose(a["slot"]["sum"], b["slot"]["sum"], rtol=1e-12)
    finally:
        emu_lib.emu_set_schedule(0, 1)


@needs_gxx
def test_no_ids_launches_nothing_and_too_many_are_refused(emu_lib, monkeypatch) -> None:
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    lifter = GpuLift()
    scene = lift_twin.SCENES["planes"]
    empty = lift_twin.Scene(
        scene.raster, np.zeros(0, np.uint16), scene.depth_m, scene.colour, None, scene.options
    )
    _, lifted = run_scene(driver, lifter, empty)
    assert len(lifted) == 0 and driver.launches == []
    with pytest.raises(InputError, match="up to 256 instances"):
        lifter.enqueue(
            driver.Stream(), raster_ptr=0, ids=np.arange(1, 258), depth_ptr=0,
            colour=scene.colour,
        )  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_twin_equals_lift_depth_on_random_scenes(seed: int) -> None:
    """Numpy only: random rectangles of random ids, depth resolutions and K's, noise, NaN and
    zeros, options across their ranges (erosion, percentile, stride)."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(20, 50)), int(rng.integers(20, 60))
    colour = Intrinsics(float(rng.uniform(30, 80)), float(rng.uniform(30, 80)),
                        (w - 1) / 2 + float(rng.normal(0, 2)),
                        (h - 1) / 2 + float(rng.normal(0, 2)), w, h)  # fmt: skip
    gh, gw = int(rng.integers(15, 70)), int(rng.integers(15, 70))
    grid = colour.scaled_to(gw, gh) if seed % 2 else None
    raster = np.zeros((h, w), np.uint16)
    for label in rng.integers(1, 8, 6):
        y, x = rng.integers(0, h - 3), rng.integers(0, w - 3)
        raster[y : y + rng.integers(2, h // 2), x : x + rng.integers(2, w // 2)] = label
    shape = (gh, gw) if grid else (h, w)
    depth = rng.uniform(0.3, 8.0, shape).astype(np.float32)
    depth[rng.random(shape) < 0.05] = np.nan
    depth[rng.random(shape) < 0.05] = 0.0
    options = LiftOptions(
        erode_px=int(rng.integers(0, 4)), percentile=float(rng.uniform(0, 100)),
        min_points=int(rng.integers(1, 12)), max_points=1000 if seed == 2 else 30_000,
    )  # fmt: skip
    ids = np.array([3, 1, 5, 2, 12], np.uint16)
    got = instances_from_tables(
        lift_twin.lift_tables(raster, ids, depth, colour, grid, options), ids, options
    )
    cpu = lift_depth(raster, ids, depth, colour, grid, options)
    for field in lift_twin.EXACT_INSTANCE_FIELDS:
        np.testing.assert_array_equal(getattr(got, field), getattr(cpu, field), field)
    np.testing.assert_allclose(got.centroid, cpu.centroid, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_cloud_twin_equals_lift_cloud_on_random_clouds(seed: int) -> None:
    """Numpy only: random rectangles of random ids, K's, clouds with NaN, zeros, negative
    depths and points beyond the image; options across their ranges."""
    rng = np.random.default_rng(100 + seed)
    h, w = int(rng.integers(20, 50)), int(rng.integers(20, 60))
    colour = Intrinsics(float(rng.uniform(30, 80)), float(rng.uniform(30, 80)),
                        (w - 1) / 2 + float(rng.normal(0, 2)),
                        (h - 1) / 2 + float(rng.normal(0, 2)), w, h)  # fmt: skip
    raster = np.zeros((h, w), np.uint16)
    for label in rng.integers(1, 8, 6):
        y, x = rng.integers(0, h - 3), rng.integers(0, w - 3)
        raster[y : y + rng.integers(2, h // 2), x : x + rng.integers(2, w // 2)] = label
    xyz = rng.normal(0, 2.0, (3000, 3)).astype(np.float32)
    xyz[:, 2] = rng.uniform(-1.0, 9.0, 3000)
    xyz[rng.random(3000) < 0.03, 2] = np.nan
    xyz[rng.random(3000) < 0.03, 2] = 0.0
    options = LiftOptions(
        erode_px=int(rng.integers(0, 4)), percentile=float(rng.uniform(0, 100)),
        min_points=int(rng.integers(1, 12)), min_range_m=0.0 if seed == 1 else 0.1,
    )  # fmt: skip
    ids = np.array([3, 1, 5, 2, 12], np.uint16)
    tables, labels = lift_twin.cloud_tables(raster, ids, xyz, colour, options)
    got = instances_from_tables(tables, ids, options)
    cpu, cpu_labels = lift_cloud(raster, ids, xyz, colour, options)
    np.testing.assert_array_equal(labels, cpu_labels)
    for field in lift_twin.EXACT_INSTANCE_FIELDS:
        np.testing.assert_array_equal(getattr(got, field), getattr(cpu, field), field)
    np.testing.assert_allclose(got.centroid, cpu.centroid, rtol=1e-6, atol=1e-6)
