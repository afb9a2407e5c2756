"""Per-point capture times of a LiDAR sweep (the fields of Ouster, Velodyne, Hesai and Livox
drivers) and ``to_one_instant``: a synthetic drive at 20 m/s past a wall, its poses in the
tf2-algorithm buffer, each point moved with the pose of its own time, against the whole sweep
moved with the pose at the cloud's stamp."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.errors import InputError
from compactinst_ros.spatial.cloud import cloud_times, cloud_xyz, to_one_instant
from compactinst_ros.spatial.tf_buffer import BufferCore, Transform

S = 1_000_000_000
STAMP = 100 * S
SPEED = 20.0  # m/s along odom's x


def packed(xyz: np.ndarray, name: str, fmt: str, values: np.ndarray) -> tuple[bytes, list]:
    """A PointCloud2 body: float32 x, y, z, then one time field ``name`` of numpy ``fmt``."""
    dtype = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), (name, "<" + fmt)])
    records = np.zeros(len(xyz), dtype)
    records["x"], records["y"], records["z"] = xyz.T
    records[name] = values
    datatype = {"u4": 6, "f4": 7, "f8": 8}[fmt]
    fields = [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), (name, 12, datatype)]
    return records.tobytes(), fields


@pytest.mark.parametrize(
    ("name", "fmt", "encode"),
    [
        ("t", "u4", lambda ns: ns - STAMP),  # Ouster: ns after the stamp
        ("time", "f4", lambda ns: (ns - STAMP) / 1e9),  # Velodyne: s after the stamp
        ("timestamp", "f8", lambda ns: ns / 1e9),  # Hesai: absolute s
        ("timestamp", "f8", lambda ns: ns.astype(np.float64)),  # Livox: absolute ns
    ],
    ids=["ouster-t", "velodyne-time", "hesai-timestamp", "livox-timestamp"],
)
def test_each_drivers_time_field_gives_absolute_nanoseconds(name, fmt, encode) -> None:
    truth = STAMP + np.arange(0, 100_000_000, 10_000_000, dtype=np.int64)
    data, fields = packed(np.zeros((len(truth), 3), np.float32), name, fmt, encode(truth))
    size = 12 + np.dtype(fmt).itemsize
    got = cloud_times(data, len(truth), 1, size, size * len(truth), fields, STAMP)
    tolerance = 2_000 if fmt == "f4" else 1_000  # float32 seconds: ~1 us over 0.1 s
    np.testing.assert_allclose(got, truth, atol=tolerance, rtol=0)


def test_a_cloud_without_a_time_field_has_no_times() -> None:
    xyz = np.zeros((4, 3), np.float32)
    fields = [("x", 0, 7), ("y", 4, 7), ("z", 8, 7)]
    assert cloud_times(xyz.tobytes(), 4, 1, 12, 48, fields, STAMP) is None
    with pytest.raises(InputError, match="unknown datatype 9"):
        cloud_times(xyz.tobytes(), 4, 1, 12, 48, [*fields[:2], ("t", 8, 9)], STAMP)


def drive() -> BufferCore:
    """odom <- base_link at 20 m/s along x, a pose every 10 ms; the LiDAR on base_link."""
    core = BufferCore()
    for ms in range(-200, 201, 10):
        at = STAMP + ms * 1_000_000
        core.set_transform("odom", "base_link", at, Transform(np.array([SPEED * at / S, 0, 0])))
    core.set_transform("base_link", "lidar", 0, Transform(), is_static=True)
    return core


def test_a_sweep_on_a_moving_vehicle_lands_on_the_wall_with_per_point_times() -> None:
    """A wall 10 m ahead of where base_link is at the stamp; the sweep takes 100 ms before the
    stamp, each point seeing the wall from where the vehicle was then. Moved with the pose at
    its own time the points lie on the wall within 1 cm (1 ms buckets); moved all with the pose
    at the stamp they spread over 2 m."""
    core = drive()
    rng = np.random.default_rng(0)
    taken = STAMP - rng.integers(0, 100_000_000, 5000)
    where_then = SPEED * taken / S  # base_link's x in odom at each point's time
    wall_x = SPEED * STAMP / S + 10.0
    seen = np.stack([wall_x - where_then, rng.uniform(-5, 5, 5000), rng.uniform(0, 3, 5000)], 1)
    data, fields = packed(seen.astype(np.float32), "t", "u4", (taken - (STAMP - S // 10)))
    # Ouster's offsets are from the stamp: this cloud is stamped at the sweep's start
    start = STAMP - S // 10
    xyz = cloud_xyz(data, 5000, 1, 16, 16 * 5000, fields)
    times = cloud_times(data, 5000, 1, 16, 16 * 5000, fields, start)
    np.testing.assert_array_equal(times, taken)

    def at(t: int) -> np.ndarray:  # base_link at the stamp <- lidar at t, through odom
        return core.lookup_transform_full("base_link", STAMP, "lidar", t, "odom")[0].matrix()

    moved = to_one_instant(xyz, times, at)
    error = np.abs(moved[:, 0] - 10.0)
    assert np.median(error) < 0.01 and error.max() < 0.011  # half a 1 ms bucket: 1 cm
    one_pose = to_one_instant(xyz, np.full_like(times, start), at)  # the cloud's stamp only
    spread = one_pose[:, 0].max() - one_pose[:, 0].min()
    assert spread > 1.9  # 100 ms at 20 m/s
    np.testing.assert_allclose(moved[:, 1:], xyz[:, 1:], atol=1e-5)  # y, z untouched
