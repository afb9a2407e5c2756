"""Lifting instances to 3-D: robust depth, centroid, extent and support from depth and clouds."""

import numpy as np
import pytest

from compactinst_ros import jit
from compactinst_ros.errors import ConfigError, InputError
from compactinst_ros.spatial import (
    Intrinsics,
    LiftOptions,
    erode_labels,
    interior,
    labels_on_grid,
    lift_cloud,
    lift_depth,
    lift_points,
)
from compactinst_ros.spatial.cloud import cloud_xyz, rigid_transform, transform_points
from compactinst_ros.spatial.lift import (
    _label_cloud,
    _label_cloud_numpy,
    _labelled_extent,
    _labelled_extent_numpy,
    _lift_points_jit,
    _lift_points_numpy,
    _rows_of,
    _window_of,
    _window_points,
    _window_points_numpy,
)

H, W = 240, 320
CAMERA = Intrinsics(fx=300.0, fy=300.0, cx=159.5, cy=119.5, width=W, height=H)
WALL_Z = 12.0


def _scene() -> tuple[np.ndarray, np.ndarray, dict]:
    """Two fronto-parallel boards in front of a wall; returns the raster (masks grown 2 px past
    each board, as a model's masks bleed), the depth and each board's true centroid."""
    depth = np.full((H, W), WALL_Z, np.float32)
    raster = np.zeros((H, W), np.uint16)
    truth = {}
    for inst, (v0, v1, u0, u1, z) in {
        1: (60, 140, 40, 120, 4.0),
        2: (100, 200, 180, 280, 7.5),
    }.items():
        depth[v0:v1, u0:u1] = z
        raster[max(v0 - 2, 0) : v1 + 2, max(u0 - 2, 0) : u1 + 2] = inst
        u, v = np.arange(u0, u1), np.arange(v0, v1)
        truth[inst] = np.array(
            [(u.mean() - CAMERA.cx) * z / CAMERA.fx, (v.mean() - CAMERA.cy) * z / CAMERA.fy, z]
        )
    return raster, depth, truth


def _reference(labels, xyz, ids, options):
    """Per-instance loop of the documented definition (the test's independent spelling)."""
    out = {}
    for inst in ids:
        z = xyz[labels == inst]
        z = z[
            np.isfinite(z[:, 2])
            & (z[:, 2] >= options.min_range_m)
            & (z[:, 2] <= options.max_range_m)
        ]
        zs = np.sort(z[:, 2])
        robust = zs[int(np.rint(options.percentile / 100 * (len(zs) - 1)))]
        inl = z[np.abs(z[:, 2] - robust) <= max(options.band_m, options.band_rel * robust)]
        out[int(inst)] = (robust, inl.mean(axis=0), inl.max(axis=0) - inl.min(axis=0), len(inl))
    return out


def test_boards_are_lifted_to_their_true_centroids_despite_bleeding_masks():
    raster, depth, truth = _scene()
    rng = np.random.default_rng(0)
    depth = depth + rng.normal(0, 0.02, depth.shape).astype(np.float32)
    lifted = lift_depth(raster, np.array([1, 2], np.uint16), depth, CAMERA)
    assert lifted.valid.all()
    for row, inst in enumerate((1, 2)):
        err = np.linalg.norm(lifted.centroid[row] - truth[inst])
        assert err < 0.01 * truth[inst][2], (inst, lifted.centroid[row], truth[inst])
        assert abs(lifted.distance[row] - np.linalg.norm(truth[inst])) < 0.05
    # board 1 is 80x80 px at 4 m: 80 / 300 * 4 = 1.07 m square
    assert lifted.extent[0, :2] == pytest.approx([80 * 4 / 300] * 2, abs=0.1)
    # eroded by 2 px: the 2-px bleed ring is gone, the board's own pixels remain
    assert lifted.support[0] == pytest.approx(80 * 80, rel=0.02)


def test_without_erosion_or_band_the_bleed_pulls_the_depth_back():
    """The erosion and the band are what keep the wall out: with neither, the mean moves."""
    raster, depth, truth = _scene()
    loose = LiftOptions(erode_px=0, band_m=100.0)
    lifted = lift_depth(raster, np.array([1], np.uint16), depth, CAMERA, options=loose)
    assert lifted.centroid[0, 2] > truth[1][2] + 0.1


def test_invalid_depth_is_ignored_and_support_counts_only_valid_points():
    raster, depth, truth = _scene()
    clean = lift_depth(raster, np.array([1], np.uint16), depth, CAMERA)
    spoiled = depth.copy()
    spoiled[70:90, 50:110] = np.nan
    spoiled[90:100, 50:110] = np.inf
    spoiled[100:105, 50:110] = 0.0
    spoiled[105:107, 50:110] = -np.inf
    lifted = lift_depth(raster, np.array([1], np.uint16), spoiled, CAMERA)
    assert lifted.support[0] == clean.support[0] - 37 * 60
    assert lifted.centroid[0, 2] == pytest.approx(truth[1][2], abs=1e-4)


def test_vectorised_lift_equals_a_per_instance_reference():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 6, 20000).astype(np.uint16)
    xyz = rng.normal(0, 1, (20000, 3)).astype(np.float32)
    xyz[:, 2] = rng.uniform(0.5, 30, 20000)
    xyz[rng.random(20000) < 0.05, 2] = np.nan
    options = LiftOptions(percentile=40, band_m=2.0, band_rel=0.05)
    ids = np.array([5, 2, 3, 1], np.uint16)  # not in id order, and id 4 is no instance
    lifted = lift_points(labels, xyz, ids, options)
    ref = _reference(labels, xyz, ids, options)
    for row, inst in enumerate(ids):
        robust, centroid, extent, support = ref[int(inst)]
        assert lifted.depth[row] == robust
        assert lifted.support[row] == support
        np.testing.assert_allclose(lifted.centroid[row], centroid, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lifted.extent[row], extent, rtol=1e-6)


def test_instances_without_enough_points_get_no_3d():
    labels = np.array([2] * 50 + [1] * 5 + [4] * 20, np.uint16)
    xyz = np.ones((75, 3), np.float32)
    xyz[:50, 0] = np.linspace(0, 1, 50)  # instance 2 is 1 m wide
    xyz[50:55, 0] = np.linspace(-5, 5, 5)  # too few points, and wide: must not leak
    xyz[55:, 0] = np.linspace(3, 3.5, 20)
    ids = np.array([2, 1, 3, 4], np.uint16)  # the small run lies between two lifted ones
    lifted = lift_points(labels, xyz, ids, LiftOptions(min_points=10))
    assert lifted.valid.tolist() == [True, False, False, True]
    assert np.isnan(lifted.centroid[1]).all() and np.isnan(lifted.distance[2])
    assert lifted.support.tolist() == [50, 0, 0, 20]
    assert lifted.extent[0, 0] == pytest.approx(1.0) and lifted.extent[3, 0] == pytest.approx(0.5)


def test_instances_outside_the_depth_image_get_no_3d():
    empty = np.zeros((H, W), np.uint16)  # the table lists an instance the grid never shows
    lifted = lift_depth(empty, np.array([1], np.uint16), np.ones((H, W), np.float32), CAMERA)
    assert lifted.valid.tolist() == [False]
    cloud = np.ones((5, 3), np.float32)
    assert lift_cloud(empty, np.array([1], np.uint16), cloud, CAMERA)[0].valid.tolist() == [False]


def test_a_mask_thinner_than_the_erosion_falls_back_to_the_whole_mask():
    raster = np.zeros((H, W), np.uint16)
    raster[50:150, 100:103] = 1  # a 3-px pole vanishes under a 2-px erosion
    depth = np.full((H, W), 5.0, np.float32)
    lifted = lift_depth(raster, np.array([1], np.uint16), depth, CAMERA)
    assert lifted.valid[0] and lifted.support[0] == 300
    assert lifted.centroid[0, 2] == pytest.approx(5.0)


def test_erosion_removes_pixels_near_any_other_label_per_instance():
    labels = np.zeros((20, 20), np.uint16)
    labels[2:18, 2:10] = 1
    labels[2:18, 10:18] = 2  # touching: each erodes away from the other
    eroded = erode_labels(labels, 2)
    assert np.array_equal(np.flatnonzero(eroded[10] == 1), np.arange(4, 8))
    assert np.array_equal(np.flatnonzero(eroded[10] == 2), np.arange(12, 16))
    assert erode_labels(labels, 0) is labels


@pytest.mark.parametrize("radius", [1, 2, 3, 4, 6])
def test_erosion_of_the_raster_and_at_single_pixels_agree(radius):
    rng = np.random.default_rng(radius)
    labels = np.kron(rng.integers(0, 4, (12, 16)), np.ones((3, 2), np.int64)).astype(np.uint16)
    v, u = np.nonzero(np.ones(labels.shape, bool))
    eroded = erode_labels(labels, radius)
    at_pixels = interior(labels, v, u, radius)
    np.testing.assert_array_equal(eroded[v, u] > 0, at_pixels & (labels[v, u] > 0))


def test_depth_at_half_resolution_is_scaled_by_the_two_camera_infos():
    raster, depth, truth = _scene()
    half = CAMERA.scaled_to(W // 2, H // 2)
    small = depth[::2, ::2].copy()
    grid = labels_on_grid(raster, CAMERA, half)
    assert grid.shape == (H // 2, W // 2)
    lifted = lift_depth(raster, np.array([1, 2], np.uint16), small, CAMERA, half)
    for row, inst in enumerate((1, 2)):
        assert np.linalg.norm(lifted.centroid[row] - truth[inst]) < 0.02 * truth[inst][2]


def test_depth_of_another_size_without_its_camera_info_is_refused_with_the_fix():
    raster, depth, _ = _scene()
    with pytest.raises(InputError, match="publish the depth camera_info"):
        lift_depth(raster, np.array([1], np.uint16), depth[::2, ::2], CAMERA)
    with pytest.raises(InputError, match="camera_info of the depth image"):
        lift_depth(raster, np.array([1], np.uint16), depth[::2], CAMERA, CAMERA)
    with pytest.raises(InputError, match="not calibrated"):
        Intrinsics.from_k([0.0] * 9, W, H)
    with pytest.raises(ConfigError, match="percentile"):
        LiftOptions(percentile=120)


def _board_cloud(z: float, u0: int, u1: int, v0: int, v1: int, step: int = 2) -> np.ndarray:
    u, v = np.meshgrid(np.arange(u0, u1, step), np.arange(v0, v1, step))
    x = (u.ravel() - CAMERA.cx) * z / CAMERA.fx
    y = (v.ravel() - CAMERA.cy) * z / CAMERA.fy
    return np.stack([x, y, np.full(x.size, z)], 1).astype(np.float32)


def test_lidar_points_in_a_mask_lift_the_instance_after_the_static_transform():
    raster, _, truth = _scene()
    camera_points = np.concatenate(
        [_board_cloud(4.0, 40, 120, 60, 140), _board_cloud(WALL_Z, 0, W, 0, H, 4)]
    )
    # LiDAR frame (x forward, y left, z up), 0.3 m above and 0.1 m behind the camera
    to_camera = rigid_transform([0.0, -0.3, -0.1], [0.5, -0.5, 0.5, 0.5])
    np.testing.assert_allclose(to_camera[:3, :3], [[0, -1, 0], [0, 0, -1], [1, 0, 0]], atol=1e-12)
    lidar_points = transform_points(camera_points, np.linalg.inv(to_camera))
    assert lidar_points[0, 0] == pytest.approx(camera_points[0, 2] + 0.1, abs=1e-4)  # forward
    assert lidar_points[0, 2] == pytest.approx(-camera_points[0, 1] - 0.3, abs=1e-4)  # up
    back = transform_points(lidar_points, to_camera)
    lifted, point_labels = lift_cloud(raster, np.array([1, 2], np.uint16), back, CAMERA)
    assert lifted.valid.tolist() == [True, True]
    assert np.linalg.norm(lifted.centroid[0] - truth[1]) < 0.02 * 4.0
    assert lifted.centroid[1, 2] == pytest.approx(WALL_Z)  # board 2 is not in this cloud
    assert set(np.unique(point_labels)) == {0, 1, 2}
    behind = camera_points * np.array([1, 1, -1], np.float32)  # mirrored behind the camera
    assert not lift_cloud(raster, np.array([1], np.uint16), behind, CAMERA)[0].valid[0]


def test_cloud_fields_are_read_in_place_with_padding_and_byte_order():
    rng = np.random.default_rng(1)
    xyz = rng.normal(0, 5, (6, 4, 3)).astype(np.float32)  # 4 rows of 6 points
    point_step, row_step = 20, 6 * 20 + 8  # x y z, an intensity, then row padding
    for big in (False, True):
        order = ">" if big else "<"
        data = np.zeros((4, row_step), np.uint8)
        rec = np.zeros(
            (4, 6),
            np.dtype(
                {
                    "names": ["x", "y", "z", "i"],
                    "formats": [order + "f4"] * 4,
                    "offsets": [0, 4, 8, 16],
                    "itemsize": 20,
                }
            ),
        )
        for a, axis in enumerate("xyz"):
            rec[axis] = xyz.transpose(1, 0, 2)[..., a]
        data[:, : 6 * 20] = rec.view(np.uint8).reshape(4, -1)
        fields = [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 16, 7)]
        out = cloud_xyz(data.tobytes(), 6, 4, point_step, row_step, fields, big)
        np.testing.assert_array_equal(out, xyz.transpose(1, 0, 2).reshape(-1, 3))
    with pytest.raises(InputError, match="no z field"):
        cloud_xyz(b"", 0, 1, 8, 0, [("x", 0, 7), ("y", 4, 7)])
    with pytest.raises(InputError, match="truncated"):
        cloud_xyz(bytes(50), 6, 4, 20, 120, [("x", 0, 7), ("y", 4, 7), ("z", 8, 7)])
    with pytest.raises(InputError, match="unit quaternion"):
        rigid_transform([0, 0, 0], [0, 0, 0, 2])


def test_large_masks_are_sampled_on_a_stride_within_max_points():
    raster, depth, truth = _scene()
    ids = np.array([1, 2], np.uint16)
    full = lift_depth(raster, ids, depth, CAMERA)
    sampled = lift_depth(raster, ids, depth, CAMERA, options=LiftOptions(max_points=1000))
    # 16.6k labelled pixels over 1000: every 5th row and column
    assert sampled.support.sum() <= 1000 < full.support.sum()
    for row, inst in enumerate((1, 2)):
        assert np.linalg.norm(sampled.centroid[row] - truth[inst]) < 0.01 * truth[inst][2]
        stride_m = 5 * truth[inst][2] / CAMERA.fx  # the box loses at most a stride per side
        np.testing.assert_allclose(sampled.extent[row], full.extent[row], atol=2 * stride_m)


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("radius", [0, 1, 2, 5])
def test_compiled_cloud_labelling_equals_the_numpy_one(radius):
    """The compiled pass over the points gives the numpy path's points, ids and interiors,
    edge cases included: points on the border, behind the camera, at z = 0, NaN and inf, out of
    range, and between pixels."""
    rng = np.random.default_rng(radius)
    labels = np.kron(rng.integers(0, 4, (12, 16)), np.ones((3, 2), np.int64)).astype(np.uint16)
    camera = Intrinsics(40.0, 38.0, 15.5, 17.3, labels.shape[1], labels.shape[0])
    points = 4000
    u = rng.uniform(-3, labels.shape[1] + 3, points)
    v = rng.uniform(-3, labels.shape[0] + 3, points)
    z = rng.uniform(-1, 30, points)
    xyz = np.stack([(u - camera.cx) * z / camera.fx, (v - camera.cy) * z / camera.fy, z], 1)
    xyz = xyz.astype(np.float32)
    xyz[:40, 2] = 0
    xyz[40:80, 0] = np.nan
    xyz[80:120, 2] = np.inf
    xyz[120:160, 1] = -np.inf
    options = LiftOptions(erode_px=radius, min_range_m=0.0, max_range_m=25.0)
    numpy_path = _label_cloud_numpy(labels, xyz, camera, options)
    compiled_path = _label_cloud(labels, xyz, camera, options)
    assert len(numpy_path[0]) > points // 4
    for a, b in zip(numpy_path, compiled_path, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(3))
def test_compiled_point_lifting_equals_the_numpy_one(seed):
    """The compiled selection, inlier band and sums give the numpy path's robust depths,
    supports, float64 sums and boxes bit for bit: NaN and out-of-range depths, an instance of
    one point, one with none, points exactly on the band's edges, several percentiles."""
    rng = np.random.default_rng(seed)
    points = 6000
    labels = rng.integers(0, 7, points).astype(np.uint16)
    labels[labels == 6] = 0
    labels[0], labels[1:][labels[1:] == 5] = 5, 4  # instance 5 has one point
    xyz = rng.normal(0, 2, (points, 3)).astype(np.float32)
    xyz[:, 2] = rng.choice(np.float32([2.0, 2.5, 3.0, 7.5, 6.75, 8.25]), points)
    xyz[rng.random(points) < 0.1, 2] = rng.uniform(0.1, 40, 1)[0]
    xyz[rng.random(points) < 0.05, 2] = np.nan
    xyz[rng.random(points) < 0.05, 2] = -1.0
    ids = np.array([3, 1, 5, 2, 9, 4], np.uint16)  # 9 has no points
    rows = _rows_of(ids)[labels]
    for percentile in (0.0, 37.5, 50.0, 100.0):
        options = LiftOptions(percentile=percentile, band_m=0.5, band_rel=0.1, max_range_m=30.0)
        want = _lift_points_numpy(rows, xyz, len(ids), options)
        got = _lift_points_jit(rows, xyz, len(ids), options)
        assert (want[1] > 0).sum() >= 4, want[1]
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not jit.AVAILABLE, reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(4))
def test_compiled_depth_window_pass_equals_the_numpy_one(seed):
    """The compiled extent of the labelled pixels and the compiled pass over the window
    (erosion test, back-projection) give numpy's window, labels, interiors and float32 x, y, z
    bit for bit, on strides 1-3, erosion radii 0-3, masks touching the image's edges, an empty
    raster."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(30, 90)), int(rng.integers(30, 120))
    labels = np.zeros((h, w), np.uint16)
    for label in rng.integers(1, 9, 7):
        y, x = rng.integers(0, h - 2), rng.integers(0, w - 2)
        labels[y : y + rng.integers(2, h // 2), x : x + rng.integers(2, w // 2)] = label
    if seed == 3:
        labels[:] = 0
    fx, fy, dx, dy = rng.uniform(30, 90, 2).tolist() + rng.normal(0, 3, 2).tolist()
    camera = Intrinsics(fx, fy, w / 2 + dx, h / 2 + dy, w, h)
    depth = rng.uniform(0.3, 9.0, (h, w)).astype(np.float32)
    depth[rng.random((h, w)) < 0.05] = np.nan
    count, *box = _labelled_extent(labels)
    assert (count, *box) == _labelled_extent_numpy(labels)
    assert count == np.count_nonzero(labels)
    for step in (1, 2, 3):
        window = _window_of(tuple(box), labels.shape, step, step)
        for radius in range(4):
            args = (labels[window], depth[window], camera, window, radius)
            want = _window_points_numpy(*args)
            got = _window_points(*args, count)
            assert len(want[0]) == np.count_nonzero(labels[window])
            for a, b in zip(want, got, strict=True):
                np.testing.assert_array_equal(a, b)


def test_covariance_is_the_inliers_spread_in_every_lift():
    """Instances3D.covariance: the population covariance of each instance's inliers (their
    spread about the centroid), NaN for an instance without 3-D; the same from the sums and
    second moments of the numpy path, the compiled one and the GPU tables' layout."""
    rng = np.random.default_rng(3)
    points = 3000
    labels = rng.integers(1, 3, points).astype(np.uint16)
    xyz = np.column_stack(
        [rng.normal(0, 0.5, points), rng.normal(0, 0.2, points), rng.uniform(9.8, 10.2, points)]
    ).astype(np.float32)
    xyz[:, 0] += np.where(labels == 2, 0.6 * (xyz[:, 2] - 10.0), 0.0)  # a tilted object
    ids = np.array([1, 2, 7], np.uint16)  # 7 has no points
    lifted = lift_points(labels, xyz, ids, LiftOptions(band_m=1.0))
    for row, label in enumerate((1, 2)):
        mine = xyz[labels == label].astype(np.float64)
        np.testing.assert_allclose(lifted.covariance[row], np.cov(mine.T, bias=True), atol=1e-6)
    assert np.isnan(lifted.covariance[2]).all() and not lifted.valid[2]
    assert lifted.covariance[1, 0, 2] > 0.005  # the tilt shows: 0.6 x var(z) = 0.008
