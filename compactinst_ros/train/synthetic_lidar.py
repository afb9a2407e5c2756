"""A spinning LiDAR on a moving vehicle, for the synthetic scenes: drives that test motion.

The synthetic scenes are single frames with their depth (``synthetic_depth``). A drive puts them
on a vehicle moving at ``speed`` m/s along its ``base_link`` x axis through a static world, the
frame ``odom`` (``odom <- base_link`` on /tf every 10 ms), with two sensors on static mounts
(/tf_static):

* the camera, ``CAMERA_MOUNT`` (1.8 m up, 0.5 m ahead, pitched down by ``CAMERA_PITCH``): its
  frames and camera_info as ``synthetic.generate_bag`` writes them. The scenes draw their own
  horizon, so the nominal pitch only fixes how camera and vehicle relate; the truth and the
  cloud use it alike, so the geometry the replay sees is consistent;
* a LiDAR, ``LIDAR_MOUNT`` (2.2 m up), whose sweep takes ``SWEEP_NS`` and starts
  ``SWEEP_LEAD_NS`` before each frame (the cloud's stamp). Its points are the scene's depth
  (every ``STRIDE``-th pixel, the depth sensor's noise and holes) placed in the world at the
  frame's time; each is seen at its own time in the sweep, from where the vehicle was then, and
  carries that time as Ouster's ``t`` field (uint32 ns after the cloud's stamp).

So a replay that places each point with the vehicle's pose at its own time puts it back where
the camera saw it; one that ignores the motion misplaces it by ``speed`` x (frame - point time):
up to 1.2 m at 20 m/s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..spatial import Intrinsics
from ..spatial.tf_buffer import Transform, quat_from_matrix

#: the camera's nominal pitch down from base_link's x axis (radians)
CAMERA_PITCH = math.radians(10.0)
#: a sweep's duration and how long before its frame it starts (the cloud's stamp)
SWEEP_NS = 100_000_000
SWEEP_LEAD_NS = 40_000_000
#: every STRIDE-th row and column of the depth is a LiDAR return
STRIDE = 2
#: odom <- base_link on /tf this often
TF_PERIOD_NS = 10_000_000
LIDAR_FRAME = "lidar"
BASE_FRAME = "base_link"
FIXED_FRAME = "odom"
LIDAR_TOPIC = "/lidar/points"
POINT_FIELDS = (("x", 7), ("y", 7), ("z", 7), ("t", 6))  # FLOAT32 x3, UINT32


def optical_rotation(pitch: float) -> np.ndarray:
    """(x, y, z, w) of base_link <- camera optical frame (x right, y down, z forward) for a
    camera looking along base_link x (forward; y left, z up) pitched down by ``pitch``."""
    c, s = math.cos(pitch), math.sin(pitch)
    columns = np.array([[0.0, -1.0, 0.0], [-s, 0.0, -c], [c, 0.0, -s]]).T  # optical x, y, z
    return quat_from_matrix(columns)


CAMERA_MOUNT = Transform(np.array([0.5, 0.0, 1.8]), optical_rotation(CAMERA_PITCH))
LIDAR_MOUNT = Transform(np.array([0.0, 0.0, 2.2]))


def vehicle_pose(stamp_ns: int, speed: float) -> Transform:
    """odom <- base_link at ``stamp_ns``: the vehicle ``speed`` x t along odom's x."""
    return Transform(np.array([speed * stamp_ns / 1e9, 0.0, 0.0]))


def sweep(
    depth_m: np.ndarray, k: Intrinsics, frame_ns: int, speed: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """One LiDAR sweep for the frame at ``frame_ns`` whose camera saw ``depth_m`` (metres, NaN
    or 0 where no return): (N, 3) float32 points in the LiDAR's frame, (N,) uint32 ns after the
    cloud's stamp, and that stamp."""
    v, u = np.mgrid[0 : depth_m.shape[0] : STRIDE, 0 : depth_m.shape[1] : STRIDE]
    z = depth_m[v, u].astype(np.float64)
    ok = np.isfinite(z) & (z > 0)
    u, v, z = u[ok], v[ok], z[ok]
    camera = np.stack([(u - k.cx) * z / k.fx, (v - k.cy) * z / k.fy, z], 1)
    at_frame = (LIDAR_MOUNT.inverse() * CAMERA_MOUNT).apply(camera)  # in the LiDAR, at the frame
    stamp = frame_ns - SWEEP_LEAD_NS
    offsets = rng.integers(0, SWEEP_NS, len(camera), dtype=np.int64)
    # the world is still; at time t the vehicle is speed x (frame - t) behind where it is at the
    # frame, so a point is that much farther ahead along base_link x (the LiDAR's x)
    at_frame[:, 0] += speed * (frame_ns - (stamp + offsets)) / 1e9
    return at_frame.astype(np.float32), offsets.astype(np.uint32), stamp


def cloud_message(points: np.ndarray, offsets: np.ndarray, stamp_ns: int) -> object:
    """sensor_msgs/PointCloud2 (rosbags dataclass) of float32 x, y, z and uint32 t."""
    from ..eval.bags import POINTCLOUD2, _header, typestore

    store = typestore()
    field = store.types["sensor_msgs/msg/PointField"]
    records = np.zeros(len(points), [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("t", "<u4")])
    records["x"], records["y"], records["z"] = points.T
    records["t"] = offsets
    fields = [
        field(name=name, offset=4 * i, datatype=datatype, count=1)
        for i, (name, datatype) in enumerate(POINT_FIELDS)
    ]
    return store.types[POINTCLOUD2](
        header=_header(stamp_ns, LIDAR_FRAME), height=1, width=len(points), fields=fields,
        is_bigendian=False, point_step=16, row_step=16 * len(points),
        data=records.view(np.uint8).reshape(-1), is_dense=True,
    )  # fmt: skip


def tf_message(transforms: Iterable[tuple[str, str, int, Transform]]) -> object:
    """tf2_msgs/TFMessage (rosbags dataclass) of (parent, child, stamp ns, transform)."""
    from ..eval.bags import _header, typestore

    store = typestore()
    types = store.types
    out = []
    for parent, child, stamp, transform in transforms:
        t, q = transform.translation, transform.rotation
        out.append(types["geometry_msgs/msg/TransformStamped"](
            header=_header(stamp, parent), child_frame_id=child,
            transform=types["geometry_msgs/msg/Transform"](
                translation=types["geometry_msgs/msg/Vector3"](x=t[0], y=t[1], z=t[2]),
                rotation=types["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
            ),
        ))  # fmt: skip
    return types["tf2_msgs/msg/TFMessage"](transforms=out)


def write_lidar_drive(
    path: str | Path,
    frames: Iterable[tuple[int, np.ndarray, np.ndarray]],
    k: Intrinsics,
    camera: str,
    speed: float,
    seed: int,
) -> Path:
    """A drive bag: per (stamp_ns, bgr8, depth mm) frame its image and camera_info on
    ``/<camera>/...``, its LiDAR sweep on LIDAR_TOPIC; odom <- base_link on /tf every
    TF_PERIOD_NS from before the first sweep to after the last; the two mounts on /tf_static
    (the camera's child frame: the frames' frame_id ``camera``). Log time = the stamp."""
    from ..eval.bags import CAMERA_INFO, IMAGE, POINTCLOUD2, BagWriter, image_message
    from .scene import camera_topic
    from .synthetic_depth import camera_info_message

    rng = np.random.default_rng([seed, 4])
    frames = list(frames)
    stamps = [stamp for stamp, _, _ in frames]
    first, last = stamps[0] - SWEEP_LEAD_NS - 2 * TF_PERIOD_NS, stamps[-1] + SWEEP_NS
    tf_type = "tf2_msgs/msg/TFMessage"
    messages: list[tuple[int, str, str, object]] = [(first, "/tf_static", tf_type, tf_message([
        (BASE_FRAME, camera, 0, CAMERA_MOUNT), (BASE_FRAME, LIDAR_FRAME, 0, LIDAR_MOUNT),
    ]))]  # fmt: skip
    for t in range(first, last + TF_PERIOD_NS, TF_PERIOD_NS):
        pose = [(FIXED_FRAME, BASE_FRAME, t, vehicle_pose(t, speed))]
        messages.append((t, "/tf", tf_type, tf_message(pose)))
    for stamp, bgr, depth_mm in frames:
        depth_m = np.where(depth_mm > 0, depth_mm / 1000.0, np.nan)
        points, offsets, cloud_stamp = sweep(depth_m, k, stamp, speed, rng)
        messages.append((cloud_stamp, LIDAR_TOPIC, POINTCLOUD2,
                         cloud_message(points, offsets, cloud_stamp)))  # fmt: skip
        messages.append((stamp, camera_topic(camera), IMAGE,
                         image_message(bgr, "bgr8", stamp, camera)))  # fmt: skip
        messages.append((stamp, f"/{camera}/camera_info", CAMERA_INFO,
                         camera_info_message(k, stamp, camera)))  # fmt: skip
    messages.sort(key=lambda m: m[0])
    with BagWriter(path) as writer:
        for stamp, topic, msgtype, msg in messages:
            writer.write(topic, msgtype, stamp, msg)
    return Path(path)
