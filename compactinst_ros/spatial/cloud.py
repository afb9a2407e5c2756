"""Point clouds as numpy: PointCloud2's x, y, z and per-point time fields read in place, rigid
transforms, and a sweep moved to one instant.

A LiDAR cloud arrives in the LiDAR's frame; the transforms (tf's translation and rotation
quaternion) bring it into the camera's optical frame, where ``lift.lift_cloud`` projects it
into the masks. A spinning LiDAR takes ~100 ms per sweep, 2 m at 20 m/s: where the driver
gives each point's time (``POINT_TIME_FIELDS``), ``to_one_instant`` moves every point with
the pose at its own time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import InputError
from .tf_buffer import Transform

#: sensor_msgs/PointField datatypes that x, y and z may have
POINT_FIELD_TYPES = {7: "f4", 8: "f8"}  # FLOAT32, FLOAT64
#: every sensor_msgs/PointField datatype (INT8 ... FLOAT64) as numpy
ANY_FIELD_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}
#: per-point time fields, the first found wins, and what their values are: "offset_ns" from the
#: cloud's stamp (Ouster's uint32 ``t``), "offset_s" (Velodyne's float32 ``time``), "absolute"
#: (Hesai's float64 ``timestamp`` in seconds, Livox's in nanoseconds: the reading nearer the
#: cloud's stamp is taken)
POINT_TIME_FIELDS = {"t": "offset_ns", "time": "offset_s", "timestamp": "absolute"}


def _records(
    data: bytes | np.ndarray,
    width: int,
    height: int,
    point_step: int,
    row_step: int,
    dtype: np.dtype,
) -> np.ndarray:
    """The cloud's points as a strided record view of ``dtype`` (no copy unless rows are
    padded); InputError for a truncated message."""
    raw = np.frombuffer(data, np.uint8)
    if row_step < width * point_step or raw.size < row_step * (height - 1) + width * point_step:
        raise InputError(
            f"point cloud holds {raw.size} bytes, too few for {height} rows of {width} points "
            f"of {point_step} bytes (row_step {row_step}); the message is truncated"
        )
    if row_step != width * point_step:  # padded rows: drop each row's tail
        rows = np.lib.stride_tricks.as_strided(
            raw, (height, width * point_step), (row_step, 1), writeable=False
        )
        raw = np.ascontiguousarray(rows).reshape(-1)
    return raw[: width * height * point_step].view(dtype)


def cloud_times(
    data: bytes | np.ndarray,
    width: int,
    height: int,
    point_step: int,
    row_step: int,
    fields: Sequence[tuple[str, int, int]],
    stamp_ns: int,
    is_bigendian: bool = False,
) -> np.ndarray | None:
    """(width * height,) int64 capture time of each point, ns, from the first field of
    ``POINT_TIME_FIELDS`` the cloud has (``stamp_ns``: the cloud's stamp, which offsets are
    from); None where it has none (the whole cloud then counts as taken at its stamp)."""
    found = {name: (offset, datatype) for name, offset, datatype in fields}
    name = next((n for n in POINT_TIME_FIELDS if n in found), None)
    if name is None or width * height == 0:
        return None
    offset, datatype = found[name]
    if datatype not in ANY_FIELD_TYPES:
        raise InputError(f"point cloud time field '{name}' has unknown datatype {datatype}")
    order = ">" if is_bigendian else "<"
    dtype = np.dtype({"names": [name], "formats": [order + ANY_FIELD_TYPES[datatype]],
                      "offsets": [offset], "itemsize": point_step})  # fmt: skip
    values = _records(data, width, height, point_step, row_step, dtype)[name]
    kind = POINT_TIME_FIELDS[name]
    if kind == "offset_ns":
        return stamp_ns + values.astype(np.int64)
    if kind == "offset_s":
        return stamp_ns + np.rint(values.astype(np.float64) * 1e9).astype(np.int64)
    absolute = values.astype(np.float64)
    # seconds or nanoseconds: whichever reading puts the sweep nearer the cloud's stamp
    middle = float(np.median(absolute))
    in_ns = abs(middle - stamp_ns) < abs(middle * 1e9 - stamp_ns)
    return np.rint(absolute if in_ns else absolute * 1e9).astype(np.int64)


def to_one_instant(
    xyz: np.ndarray,
    times_ns: np.ndarray,
    placement_at: Callable[[int], np.ndarray],
    bucket_ns: int = 1_000_000,
) -> np.ndarray:
    """(P, 3) float32 points each moved by the 4x4 ``placement_at(t)`` of its capture time,
    with times grouped into ``bucket_ns`` buckets (1 ms: 2 cm at 20 m/s) so that a 100 ms
    sweep needs about 100 lookups, not one per point; each bucket uses its middle time."""
    out = np.empty_like(xyz, dtype=np.float32)
    if not len(xyz):
        return out
    start = int(times_ns.min())
    buckets = (times_ns - start) // bucket_ns
    order = np.argsort(buckets, kind="stable")
    edges = np.flatnonzero(np.diff(buckets[order])) + 1
    for group in np.split(order, edges):
        middle = start + int(buckets[group[0]]) * bucket_ns + bucket_ns // 2
        out[group] = transform_points(xyz[group], placement_at(middle))
    return out


def cloud_xyz(
    data: bytes | np.ndarray,
    width: int,
    height: int,
    point_step: int,
    row_step: int,
    fields: Sequence[tuple[str, int, int]],
    is_bigendian: bool = False,
) -> np.ndarray:
    """(width * height, 3) float32 x, y, z of a PointCloud2's ``data``; ``fields`` are its
    PointFields as (name, offset, datatype). Other fields (intensity, ring, ...) are skipped
    by the strided view, without a copy of the whole cloud."""
    found = {name: (offset, datatype) for name, offset, datatype in fields}
    missing = [axis for axis in "xyz" if axis not in found]
    if missing:
        raise InputError(
            f"point cloud has no {', '.join(missing)} field (fields: {sorted(found) or 'none'}); "
            "publish a PointCloud2 with float32 x, y and z"
        )
    bad = {a: found[a][1] for a in "xyz" if found[a][1] not in POINT_FIELD_TYPES}
    if bad:
        raise InputError(
            f"point cloud field types {bad} are not float32 (7) or float64 (8); publish x, y "
            "and z as float32"
        )
    order = ">" if is_bigendian else "<"
    dtype = np.dtype(
        {
            "names": list("xyz"),
            "formats": [order + POINT_FIELD_TYPES[found[a][1]] for a in "xyz"],
            "offsets": [found[a][0] for a in "xyz"],
            "itemsize": point_step,
        }
    )
    if width * height == 0:
        return np.zeros((0, 3), np.float32)
    points = _records(data, width, height, point_step, row_step, dtype)
    xyz = np.empty((width * height, 3), np.float32)
    for a, axis in enumerate("xyz"):
        xyz[:, a] = points[axis]
    return xyz


def placed_points(
    cloud: object,
    stamp_ns: int,
    placement_at: Callable[[int], np.ndarray],
    per_point: bool,
) -> np.ndarray:
    """(P, 3) float32 points of a PointCloud2 ``cloud`` (an rclpy message or a bag's
    deserialised one) placed by the 4x4 ``placement_at(capture ns)``: with ``per_point`` and a
    time field (``cloud_times``) each point at its own time (``to_one_instant``), else all at
    the cloud's ``stamp_ns``. The node and the replay's 3-D scoring place clouds this one way."""
    layout = (cloud.data, cloud.width, cloud.height, cloud.point_step, cloud.row_step)
    fields = [(f.name, int(f.offset), int(f.datatype)) for f in cloud.fields]
    xyz = cloud_xyz(*layout, fields, bool(cloud.is_bigendian))
    times = cloud_times(*layout, fields, stamp_ns, bool(cloud.is_bigendian)) if per_point else None
    if times is not None:
        return to_one_instant(xyz, times, placement_at)
    return transform_points(xyz, placement_at(stamp_ns))


def rigid_transform(translation: Sequence[float], rotation_xyzw: Sequence[float]) -> np.ndarray:
    """4x4 matrix of tf's transform (translation, unit quaternion x, y, z, w): it maps points
    of the child frame into the parent frame."""
    q = np.asarray(rotation_xyzw, np.float64)
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or abs(norm - 1.0) > 1e-3:
        raise InputError(
            f"transform rotation {list(q)} is not a unit quaternion (norm {norm:.4g}); "
            "publish a normalised rotation"
        )
    return Transform(np.asarray(translation, np.float64), q / norm).matrix()


def transform_points(xyz: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(P, 3) float32 points mapped by the 4x4 rigid ``matrix``."""
    rotation = matrix[:3, :3].astype(np.float32)
    return (xyz @ rotation.T + matrix[:3, 3].astype(np.float32)).astype(np.float32, copy=False)
