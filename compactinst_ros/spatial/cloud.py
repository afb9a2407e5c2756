"""Point clouds as numpy: PointCloud2's x, y, z fields read in place, and rigid transforms.

A LiDAR cloud arrives in the LiDAR's frame; a static LiDAR-to-camera transform (tf's
translation and rotation quaternion) brings it into the camera's optical frame, where
``lift.lift_cloud`` projects it into the masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from .tf_buffer import Transform

#: sensor_msgs/PointField datatypes that x, y and z may have
POINT_FIELD_TYPES = {7: "f4", 8: "f8"}  # FLOAT32, FLOAT64


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
    raw = np.frombuffer(data, np.uint8)
    if width * height == 0:
        return np.zeros((0, 3), np.float32)
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
    points = raw[: width * height * point_step].view(dtype)
    xyz = np.empty((width * height, 3), np.float32)
    for a, axis in enumerate("xyz"):
        xyz[:, a] = points[axis]
    return xyz


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
