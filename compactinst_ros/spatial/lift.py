"""Per-instance 3-D from the instance raster and a registered depth image or projected points.

Every instance of a frame is lifted in one vectorised pass over the pixels (or points) that
carry an instance id: no per-pixel Python and no per-instance mask at camera resolution. The
steps, each there for a reason:

1. The instance raster is sampled on the depth grid (:func:`labels_on_grid`): a depth image
   registered to the colour camera shares its optical centre, so a depth pixel maps to a colour
   pixel through the two camera_infos' K alone, whatever the two resolutions.
2. Each mask is eroded by ``erode_px`` (:func:`erode_labels`): the edge pixels of a mask straddle
   the depth discontinuity between the object and what lies behind it (mixed and flying pixels).
   An instance too small to survive the erosion falls back to its whole mask.
3. Invalid depth (NaN, inf, zero, outside ``[min_range_m, max_range_m]``) is dropped.
4. The robust depth is the ``percentile`` of the remaining depths of the instance (nearest rank).
5. The inliers are the points within ``max(band_m, band_rel * depth)`` of it: background seen
   through gaps of the mask and foreground occluders are left out of the centroid.
6. The centroid is the mean of the inliers in the camera's optical frame (x right, y down,
   z forward, metres), the extent the size of their axis-aligned box, the distance the centroid's
   norm, and ``support`` the number of inliers. Fewer than ``min_points``: no 3-D (NaN).

Where numba is installed (the ``fast`` extra) the passes over the raster, the depth window and
the points are compiled loops that give numpy's results bit for bit (the tests compare them);
they keep the lifting under a tenth of a 1080p frame on CPUs whose inference is fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import cv2
import numpy as np

from .. import jit
from ..errors import ConfigError, InputError

#: instance ids are uint16 raster values, so a lookup table over all of them is 65536 entries
_ID_RANGE = 1 << 16


@dataclass(frozen=True)
class Intrinsics:
    """A pinhole camera: camera_info's K (fx, fy, cx, cy in pixels) for a width x height image.

    ROS convention: pixel (u, v) has its centre at integer coordinates, and a point (x, y, z) of
    the optical frame projects to ``u = fx x / z + cx``, ``v = fy y / z + cy``.
    """

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    def __post_init__(self) -> None:
        values = (self.fx, self.fy, self.cx, self.cy)
        if not (np.all(np.isfinite(values)) and self.fx > 0 and self.fy > 0):
            raise InputError(
                f"camera_info K has fx={self.fx:g}, fy={self.fy:g}, cx={self.cx:g}, "
                f"cy={self.cy:g}: the camera is not calibrated; publish a calibrated "
                "camera_info (fx and fy positive) for 3-D"
            )
        if self.width < 1 or self.height < 1:
            raise InputError(
                f"camera_info is {self.width}x{self.height} pixels; publish one with the "
                "image's width and height for 3-D"
            )

    @classmethod
    def from_k(cls, k: Sequence[float], width: int, height: int) -> Intrinsics:
        """From camera_info's row-major 3x3 ``k`` and its image size."""
        if len(k) != 9:
            raise InputError(f"camera_info K has {len(k)} values, not 9; publish a 3x3 K")
        return cls(float(k[0]), float(k[4]), float(k[2]), float(k[5]), int(width), int(height))

    def scaled_to(self, width: int, height: int) -> Intrinsics:
        """The same camera at another resolution (an image resized as a whole)."""
        sx, sy = width / self.width, height / self.height
        return Intrinsics(
            self.fx * sx,
            self.fy * sy,
            (self.cx + 0.5) * sx - 0.5,
            (self.cy + 0.5) * sy - 0.5,
            width,
            height,
        )


@dataclass(frozen=True)
class LiftOptions:
    """How instances are lifted (the steps in the module docstring)."""

    erode_px: int = 2  # mask erosion in pixels of the depth grid (camera pixels for clouds)
    percentile: float = 50.0  # robust depth: this percentile of the instance's depths
    band_m: float = 0.3  # inliers lie within max(band_m, band_rel * depth) of the robust depth
    band_rel: float = 0.1
    min_range_m: float = 0.1  # depths outside [min_range_m, max_range_m] are invalid
    max_range_m: float = 200.0
    min_points: int = 10  # fewer inliers: the instance gets no 3-D
    # Depth pixels per frame at most: masks covering more are sampled on every s-th row and
    # column (s the smallest stride that fits). A median needs no 300k points, and the cost of
    # a frame stays bounded whatever its masks cover.
    max_points: int = 30_000

    def __post_init__(self) -> None:
        checks = {
            "erode_px": 0 <= self.erode_px <= 64,
            "percentile": 0.0 <= self.percentile <= 100.0,
            "band_m": self.band_m > 0,
            "band_rel": self.band_rel >= 0,
            "min_range_m": 0 <= self.min_range_m < self.max_range_m,
            "min_points": self.min_points >= 1,
            "max_points": self.max_points >= 1000,
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(
                    f"{name}={getattr(self, name)} is out of range: erode_px 0..64, percentile "
                    "0..100, band_m > 0, band_rel >= 0, 0 <= min_range_m < max_range_m, "
                    "min_points >= 1, max_points >= 1000"
                )


@dataclass
class Instances3D:
    """Per-instance 3-D table; row i belongs to the instance ``ids[i]`` (the 2-D table's ids).

    Camera optical frame, metres. Rows with ``valid`` False (too few supporting points) hold NaN.
    """

    ids: np.ndarray  # (N,) uint16, the instance ids of the 2-D table, in its order
    centroid: np.ndarray  # (N, 3) float32 x, y, z
    extent: np.ndarray  # (N, 3) float32 size along x, y, z of the inliers' box
    depth: np.ndarray  # (N,) float32 robust depth (z)
    distance: np.ndarray  # (N,) float32 norm of the centroid
    support: np.ndarray  # (N,) int32 inlier points
    valid: np.ndarray  # (N,) bool
    #: (N, 3, 3) float32 covariance of the inliers (their spread about the centroid), m^2
    covariance: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def row(self, i: int) -> dict:
        """Row ``i`` as plain Python values (reports, JSON)."""
        return {
            "id": int(self.ids[i]),
            "centroid": [round(float(c), 4) for c in self.centroid[i]],
            "extent": [round(float(c), 4) for c in self.extent[i]],
            "depth": round(float(self.depth[i]), 4),
            "distance": round(float(self.distance[i]), 4),
            "support": int(self.support[i]),
            "valid": bool(self.valid[i]),
            "covariance": [round(float(c), 6) for c in self.covariance[i].ravel()],
        }

    @classmethod
    def unsupported(cls, ids: np.ndarray) -> Instances3D:
        """A table for ``ids`` with no 3-D for any of them."""
        n = len(ids)
        nan3, nan = np.full((n, 3), np.nan, np.float32), np.full(n, np.nan, np.float32)
        return cls(
            ids=np.asarray(ids, np.uint16),
            centroid=nan3,
            extent=nan3.copy(),
            depth=nan,
            distance=nan.copy(),
            support=np.zeros(n, np.int32),
            valid=np.zeros(n, bool),
            covariance=np.full((n, 3, 3), np.nan, np.float32),
        )

    def merged(self, rows: np.ndarray, other: Instances3D) -> Instances3D:
        """This table with its rows ``rows`` replaced by ``other``'s rows (in that order)."""
        out = {}
        for f in fields(self):
            column = getattr(self, f.name).copy()
            column[rows] = getattr(other, f.name)
            out[f.name] = column
        return Instances3D(**out)


def labels_on_grid(raster: np.ndarray, colour: Intrinsics, grid: Intrinsics) -> np.ndarray:
    """The instance raster (at the colour camera's resolution) sampled at the pixels of a
    registered image with intrinsics ``grid`` (nearest pixel; 0 outside the colour image)."""
    if raster.shape != (colour.height, colour.width):
        raise InputError(
            f"instance raster is {raster.shape[1]}x{raster.shape[0]} but the camera_info says "
            f"{colour.width}x{colour.height}; publish the camera_info of the image the node "
            "segments"
        )
    if grid == colour:
        return raster
    u = np.rint(colour.fx * (np.arange(grid.width) - grid.cx) / grid.fx + colour.cx)
    v = np.rint(colour.fy * (np.arange(grid.height) - grid.cy) / grid.fy + colour.cy)
    u_in, v_in = (u >= 0) & (u < colour.width), (v >= 0) & (v < colour.height)
    u_idx = np.clip(u, 0, colour.width - 1).astype(np.intp)
    v_idx = np.clip(v, 0, colour.height - 1).astype(np.intp)
    out = raster.take(v_idx, axis=0).take(u_idx, axis=1)
    out[~v_in] = 0
    out[:, ~u_in] = 0
    return out


def erode_labels(labels: np.ndarray, radius: int) -> np.ndarray:
    """``labels`` with every pixel within ``radius`` pixels (Chebyshev) of a different label,
    background included, set to 0; each instance is eroded on its own, in one pass for all."""
    if radius <= 0 or labels.size == 0:
        return labels
    edge = np.zeros(labels.shape, np.uint8)  # pixels with an 8-neighbour of another label
    across = labels[:, 1:] != labels[:, :-1]
    edge[:, 1:] |= across
    edge[:, :-1] |= across
    down = labels[1:] != labels[:-1]
    edge[1:] |= down
    edge[:-1] |= down
    falling = labels[1:, 1:] != labels[:-1, :-1]
    edge[1:, 1:] |= falling
    edge[:-1, :-1] |= falling
    rising = labels[1:, :-1] != labels[:-1, 1:]
    edge[1:, :-1] |= rising
    edge[:-1, 1:] |= rising
    if radius > 1:  # an edge pixel is 1 from the other label; grow by the remaining radius - 1
        edge = cv2.dilate(edge, np.ones((2 * radius - 1, 2 * radius - 1), np.uint8))
    return np.where(edge.astype(bool), np.uint16(0), labels).astype(labels.dtype, copy=False)


#: the second moments each lift accumulates per instance, as (axis, axis): xx, yy, zz, xy, xz, yz
MOMENT_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


def covariance_of(
    sums: np.ndarray, moments: np.ndarray, support: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """(N, 3, 3) float32 covariance of each instance's inliers from their float64 sums (N, 3)
    and second moments (N, 6, ``MOMENT_PAIRS``): E[p p^T] - E[p] E[p]^T, NaN where not
    ``valid``. One place for every lift (numpy, compiled, GPU), so they agree."""
    n = np.maximum(support, 1).astype(np.float64)[:, None]
    mean = sums / n
    out = np.full((len(sums), 3, 3), np.nan, np.float32)
    for k, (a, b) in enumerate(MOMENT_PAIRS):
        value = (moments[:, k : k + 1] / n - mean[:, a : a + 1] * mean[:, b : b + 1])[:, 0]
        out[valid, a, b] = out[valid, b, a] = value[valid]
    return out


def _rows_of(ids: np.ndarray) -> np.ndarray:
    """Lookup table: instance id -> row of ``ids`` (-1: not an instance of the table)."""
    lut = np.full(_ID_RANGE, -1, np.int32)
    lut[np.asarray(ids, np.int64)] = np.arange(len(ids), dtype=np.int32)
    lut[0] = -1
    return lut


def lift_points(
    labels: np.ndarray, xyz: np.ndarray, ids: np.ndarray, options: LiftOptions
) -> Instances3D:
    """Lift instances from points: ``labels`` (P,) instance id of each point (0: none),
    ``xyz`` (P, 3) the points in the camera optical frame; one row per ``ids`` entry.

    Compiled passes over the points where numba is installed, else numpy: the same results,
    bit for bit."""
    ids = np.asarray(ids, np.uint16)
    n = len(ids)
    if n == 0:
        return Instances3D.unsupported(ids)
    rows = _rows_of(ids)[labels]
    if _accumulate_compiled is None:
        robust, support, sums, moments, box = _lift_points_numpy(rows, xyz, n, options)
    else:
        robust, support, sums, moments, box = _lift_points_jit(rows, xyz, n, options)
    valid = support >= options.min_points
    centroid = np.full((n, 3), np.nan, np.float32)
    extent = np.full((n, 3), np.nan, np.float32)
    centroid[valid] = (sums / np.maximum(support, 1)[:, None])[valid]
    extent[valid] = box[valid]
    robust[~valid] = np.nan
    return Instances3D(
        ids=ids,
        centroid=centroid,
        extent=extent,
        depth=robust,
        distance=np.linalg.norm(centroid, axis=1).astype(np.float32),
        support=np.where(valid, support, 0).astype(np.int32),
        valid=valid,
        covariance=covariance_of(sums, moments, support, valid),
    )


def _lift_points_numpy(
    rows: np.ndarray, xyz: np.ndarray, n: int, options: LiftOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(robust depth, inlier support, float64 inlier sums and second moments
    (``MOMENT_PAIRS``), inlier box size; NaN where no inliers) per row 0..n-1 of the points
    whose ``rows`` entry is that row (-1: none)."""
    z = xyz[:, 2]
    with np.errstate(invalid="ignore"):  # NaN depths compare False: dropped
        keep = (rows >= 0) & (z >= options.min_range_m) & (z <= options.max_range_m)
    keep = np.flatnonzero(keep)
    # Grouped by instance with a radix sort (16-bit keys: linear time), so that each
    # instance's points are one contiguous run; its percentile is a linear-time selection.
    order = np.argsort(rows[keep].astype(np.uint16), kind="stable")
    keep = keep[order]
    rows, pts = rows[keep], np.take(xyz, keep, axis=0)
    counts = np.bincount(rows, minlength=n)
    starts = np.cumsum(counts) - counts
    rank = np.rint(options.percentile / 100.0 * np.maximum(counts - 1, 0)).astype(np.int64)
    robust = np.full(n, np.nan, np.float32)
    depths = pts[:, 2]
    for r in np.flatnonzero(counts):  # one selection per instance, not per point
        robust[r] = np.partition(depths[starts[r] : starts[r] + counts[r]], rank[r])[rank[r]]
    half = np.maximum(options.band_m, options.band_rel * robust)
    inlier = np.flatnonzero(np.abs(depths - robust[rows]) <= half[rows])
    # The inliers keep the grouping: each instance's inliers are again one contiguous run.
    inside, inside_rows = np.take(pts, inlier, axis=0), rows[inlier]
    support = np.bincount(inside_rows, minlength=n).astype(np.int32)
    sums = np.stack(
        [np.bincount(inside_rows, weights=inside[:, a], minlength=n) for a in range(3)], 1
    )
    wide = inside.astype(np.float64)
    moments = np.stack(
        [np.bincount(inside_rows, weights=wide[:, a] * wide[:, b], minlength=n)
         for a, b in MOMENT_PAIRS], 1,
    )  # fmt: skip
    box = np.full((n, 3), np.nan, np.float32)
    runs = np.flatnonzero(support)  # reduceat needs the start of every non-empty run
    first = (np.cumsum(support) - support)[runs]
    if len(runs):
        box[runs] = np.maximum.reduceat(inside, first) - np.minimum.reduceat(inside, first)
    return robust, support, sums, moments, box


def _group_depths_loop(rows, xyz, min_z, max_z, starts, depths):
    """Each row's valid depths, gathered in point order into ``depths`` (a counting sort;
    ``starts``: n + 1 zeros on entry, each row's first index and the end on return)."""
    n = starts.shape[0] - 1
    for p in range(rows.shape[0]):
        z = xyz[p, 2]
        if rows[p] >= 0 and z >= min_z and z <= max_z:
            starts[rows[p] + 1] += 1
    for r in range(n):
        starts[r + 1] += starts[r]
    fill = starts[:n].copy()
    for p in range(rows.shape[0]):
        z = xyz[p, 2]
        if rows[p] >= 0 and z >= min_z and z <= max_z:
            depths[fill[rows[p]]] = z
            fill[rows[p]] += 1


def _accumulate_loop(
    rows, xyz, min_z, max_z, band_m, band_rel, robust, support, sums, moments, lo, hi
):
    """The inliers of each row's robust depth: support, float64 sums and second moments
    (``MOMENT_PAIRS``) added in point order (as numpy's bincount adds them), float32 box; the
    band in numpy's float32 arithmetic."""
    for p in range(rows.shape[0]):
        r = rows[p]
        z = xyz[p, 2]
        if r < 0 or not (z >= min_z and z <= max_z):
            continue
        depth = robust[r]
        if abs(z - depth) <= max(band_m, band_rel * depth):
            support[r] += 1
            for a in range(3):
                value = xyz[p, a]
                sums[r, a] += np.float64(value)
                lo[r, a] = min(lo[r, a], value)
                hi[r, a] = max(hi[r, a], value)
            x, y, z64 = np.float64(xyz[p, 0]), np.float64(xyz[p, 1]), np.float64(z)
            moments[r, 0] += x * x
            moments[r, 1] += y * y
            moments[r, 2] += z64 * z64
            moments[r, 3] += x * y
            moments[r, 4] += x * z64
            moments[r, 5] += y * z64


_group_depths_compiled = jit.njit_cached(_group_depths_loop)
_accumulate_compiled = jit.njit_cached(_accumulate_loop)


def _lift_points_jit(
    rows: np.ndarray, xyz: np.ndarray, n: int, options: LiftOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_lift_points_numpy`'s result by two compiled passes over the points (the
    grouping, then the inliers) and numpy's selection of each instance's percentile between
    them."""
    f32 = np.float32
    rows = np.ascontiguousarray(rows, np.int32)
    xyz = np.ascontiguousarray(xyz, np.float32)
    min_z, max_z = f32(options.min_range_m), f32(options.max_range_m)
    starts = np.zeros(n + 1, np.int64)
    depths = np.empty(len(rows), np.float32)
    robust = np.full(n, np.nan, np.float32)
    support = np.zeros(n, np.int32)
    sums = np.zeros((n, 3), np.float64)
    moments = np.zeros((n, len(MOMENT_PAIRS)), np.float64)
    lo = np.full((n, 3), np.inf, np.float32)
    hi = np.full((n, 3), -np.inf, np.float32)
    with jit.compile_lock():  # the first call compiles (or loads numba's cache)
        _group_depths_compiled(rows, xyz, min_z, max_z, starts, depths)
        for r in np.flatnonzero(np.diff(starts)):  # one selection per instance
            group = depths[starts[r] : starts[r + 1]]
            rank = int(np.rint(options.percentile / 100.0 * (len(group) - 1)))
            robust[r] = np.partition(group, rank)[rank]
        _accumulate_compiled(
            rows, xyz, min_z, max_z, f32(options.band_m), f32(options.band_rel), robust,
            support, sums, moments, lo, hi,
        )  # fmt: skip
    box = np.where(support[:, None] > 0, hi - lo, np.float32(np.nan)).astype(np.float32)
    return robust, support, sums, moments, box


def _window_of(
    box: tuple[int, int, int, int], shape: tuple[int, ...], margin: int, step: int
) -> tuple[slice, slice]:
    """Rows and columns of the labelled ``box`` (first row, last row, first column, last
    column; first row -1: nothing labelled) grown by ``margin`` (clipped to the image), every
    ``step``-th: the instance window, where the work of a frame scales with the area its
    instances span."""
    first_row, last_row, first_col, last_col = box
    if first_row < 0:
        return slice(0, 0, step), slice(0, 0, step)
    h, w = shape[:2]
    return (
        slice(max(first_row - margin, 0), min(last_row + 1 + margin, h), step),
        slice(max(first_col - margin, 0), min(last_col + 1 + margin, w), step),
    )


def _labelled_extent_numpy(labels: np.ndarray) -> tuple[int, int, int, int, int]:
    """(labelled pixels, first row, last row, first column, last column; -1 each where none)."""
    rows, cols = np.flatnonzero(labels.any(axis=1)), np.flatnonzero(labels.any(axis=0))
    if not len(rows):
        return 0, -1, -1, -1, -1
    count = int(np.count_nonzero(labels))
    return count, int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def _labelled_extent_loop(labels):
    """The compiled twin of :func:`_labelled_extent_numpy`, one pass: each row's count (a loop
    the compiler vectorises), and where it has labels, its first and last labelled column."""
    h, w = labels.shape
    count, first_row, last_row, first_col, last_col = 0, -1, -1, w, -1
    for y in range(h):
        row = labels[y]
        in_row = 0
        for x in range(w):
            in_row += row[x] != 0
        if in_row == 0:
            continue
        count += in_row
        if first_row < 0:
            first_row = y
        last_row = y
        x = 0
        while row[x] == 0:
            x += 1
        first_col = min(first_col, x)
        x = w - 1
        while row[x] == 0:
            x -= 1
        last_col = max(last_col, x)
    if count == 0:
        return 0, -1, -1, -1, -1
    return count, first_row, last_row, first_col, last_col


_labelled_extent_compiled = jit.njit_cached(_labelled_extent_loop)


def _labelled_extent(labels: np.ndarray) -> tuple[int, int, int, int, int]:
    """:func:`_labelled_extent_numpy`'s result, compiled where numba is installed (one pass
    over a 1080p raster instead of three)."""
    if _labelled_extent_compiled is None or labels.ndim != 2 or labels.size == 0:
        return _labelled_extent_numpy(labels)
    with jit.compile_lock():
        extent = _labelled_extent_compiled(np.ascontiguousarray(labels))
    return tuple(int(v) for v in extent)  # type: ignore[return-value]


def _depth_points(
    labels: np.ndarray, depth_m: np.ndarray, grid: Intrinsics, window: tuple[slice, slice]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, xyz, flat index in the window) of the depth pixels in ``window`` that carry an
    instance id, back-projected (``labels`` and ``depth_m`` are the window's)."""
    rows, cols = window
    flat = np.flatnonzero(labels)
    z = depth_m.reshape(-1)[flat].astype(np.float32, copy=False)
    v, u = np.divmod(flat, labels.shape[1])
    xyz = np.empty((len(flat), 3), np.float32)
    xyz[:, 0] = (u * cols.step + (cols.start - grid.cx)) * (z / grid.fx)
    xyz[:, 1] = (v * rows.step + (rows.start - grid.cy)) * (z / grid.fy)
    xyz[:, 2] = z
    return labels.reshape(-1)[flat], xyz, flat


def _window_points_numpy(
    labels: np.ndarray, depth_m: np.ndarray, grid: Intrinsics, window: tuple[slice, slice],
    radius: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(label, label where the pixel survives the erosion by ``radius`` else 0, xyz) of the
    window's labelled pixels in row-major order (``labels`` and ``depth_m`` are the window's):
    :func:`erode_labels` and :func:`_depth_points`."""
    eroded = erode_labels(labels, radius)
    whole, xyz, flat = _depth_points(labels, depth_m, grid, window)
    return whole, np.where(eroded.reshape(-1)[flat] != 0, whole, np.uint16(0)), xyz


def _window_points_loop(labels, depth_m, row_start, row_step, col_start, col_step, cx, cy, fx,
                        fy, radius, whole, interior, xyz):  # fmt: skip
    """The compiled twin of :func:`_window_points_numpy`: fills the first n entries and
    returns n. A pixel survives the erosion where every window pixel within ``radius``
    (Chebyshev) carries its label (erode_labels' answer); x and y are rounded as
    _depth_points rounds them (float64 pixel offset times the float32 z / f)."""
    h, w = labels.shape
    n = 0
    for i in range(h):
        for j in range(w):
            label = labels[i, j]
            if label == 0:
                continue
            alone = True
            for di in range(max(i - radius, 0), min(i + radius + 1, h)):
                for dj in range(max(j - radius, 0), min(j + radius + 1, w)):
                    if labels[di, dj] != label:
                        alone = False
                        break
                if not alone:
                    break
            z = depth_m[i, j]
            whole[n] = label
            interior[n] = label if alone else 0
            xyz[n, 0] = np.float32((j * col_step + (col_start - cx)) * np.float64(z / fx))
            xyz[n, 1] = np.float32((i * row_step + (row_start - cy)) * np.float64(z / fy))
            xyz[n, 2] = z
            n += 1
    return n


_window_points_compiled = jit.njit_cached(_window_points_loop)


def _window_points(
    labels: np.ndarray, depth_m: np.ndarray, grid: Intrinsics, window: tuple[slice, slice],
    radius: int, count: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`_window_points_numpy`'s result, by one compiled pass where numba is installed;
    ``count`` bounds the window's labelled pixels (the frame's)."""
    if _window_points_compiled is None:
        return _window_points_numpy(labels, depth_m, grid, window, radius)
    whole = np.empty(count, labels.dtype)
    interior = np.empty(count, labels.dtype)
    xyz = np.empty((count, 3), np.float32)
    rows, cols = window
    f32 = np.float32
    with jit.compile_lock():
        n = _window_points_compiled(
            labels, np.asarray(depth_m, np.float32), rows.start, rows.step, cols.start,
            cols.step, float(grid.cx), float(grid.cy), f32(grid.fx), f32(grid.fy), radius,
            whole, interior, xyz,
        )  # fmt: skip
    return whole[:n], interior[:n], xyz[:n]


def lift_depth(
    raster: np.ndarray,
    ids: np.ndarray,
    depth_m: np.ndarray,
    colour: Intrinsics,
    depth: Intrinsics | None = None,
    options: LiftOptions | None = None,
) -> Instances3D:
    """Lift the instances ``ids`` of ``raster`` (H, W uint16 at the colour camera's resolution)
    with ``depth_m`` (float32 metres, NaN/0 invalid) registered to the colour camera.

    ``depth`` is the depth image's camera_info; None: the depth has the colour image's size and
    K. A depth image of another size needs its own camera_info, else InputError says so.
    """
    options = options or LiftOptions()
    ids = np.asarray(ids, np.uint16)
    if depth is None:
        if depth_m.shape != (colour.height, colour.width):
            raise InputError(
                f"depth image is {depth_m.shape[1]}x{depth_m.shape[0]} and the frame "
                f"{colour.width}x{colour.height}; publish the depth camera_info so that the "
                "depth can be scaled to the frame, or register depth at the frame's resolution"
            )
        depth = colour
    if depth_m.shape != (depth.height, depth.width):
        raise InputError(
            f"depth image is {depth_m.shape[1]}x{depth_m.shape[0]} but its camera_info says "
            f"{depth.width}x{depth.height}; publish the camera_info of the depth image"
        )
    grid = labels_on_grid(raster, colour, depth)
    count, *box = _labelled_extent(grid)
    step = max(1, math.ceil(math.sqrt(count / options.max_points)))
    # The margin keeps the background around the instances inside the window, so that the
    # erosion sees their outer edges.
    window = _window_of(tuple(box), grid.shape, step, step)
    radius = math.ceil(options.erode_px / step)
    whole, interior, xyz = _window_points(
        grid[window], depth_m[window], depth, window, radius, count
    )
    lifted = lift_points(interior, xyz, ids, options)
    retry = np.flatnonzero(~lifted.valid)
    if options.erode_px > 0 and len(retry):
        # Instances the erosion left with too few points: from their whole masks. (On a
        # stride, an instance of fewer than min_points * step^2 pixels stays without 3-D: at
        # 1080p that is an object too far for a depth camera anyway.)
        lifted = lifted.merged(retry, lift_points(whole, xyz, ids[retry], options))
    return lifted


def interior(raster: np.ndarray, v: np.ndarray, u: np.ndarray, radius: int) -> np.ndarray:
    """Whether each pixel (v, u) of ``raster`` has no other label within ``radius`` pixels
    (Chebyshev): :func:`erode_labels` evaluated at a few pixels only (a LiDAR's points).

    Pixels at least ``radius`` from the border read their neighbours at fixed flat offsets;
    only the few nearer the border clamp their neighbours to the image (the outside is no
    other label, as in erode_labels), which keeps the per-offset clipping off the bulk."""
    h, w = raster.shape
    flat = raster.reshape(-1)
    centre = v * w + u
    label = flat[centre]
    keep = np.ones(len(v), bool)
    inner = (v >= radius) & (v < h - radius) & (u >= radius) & (u < w - radius)
    bulk, edge = np.flatnonzero(inner), np.flatnonzero(~inner)
    bulk_centre, bulk_label = centre[bulk], label[bulk]
    bulk_keep = np.ones(len(bulk), bool)
    edge_v, edge_u, edge_label = v[edge], u[edge], label[edge]
    edge_keep = np.ones(len(edge), bool)
    for dy in range(-radius, radius + 1):
        edge_rows = np.clip(edge_v + dy, 0, h - 1) * w
        for dx in range(-radius, radius + 1):
            if dy or dx:
                bulk_keep &= np.take(flat, bulk_centre + (dy * w + dx)) == bulk_label
                edge_keep &= flat[edge_rows + np.clip(edge_u + dx, 0, w - 1)] == edge_label
    keep[bulk], keep[edge] = bulk_keep, edge_keep
    return keep


def project_points(
    xyz: np.ndarray, camera: Intrinsics, min_z: float, max_z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(which points, their rows, their columns) of the camera-frame points that land in an
    image of ``camera`` with a depth in [min_z, max_z] (NaN and inf land nowhere)."""
    z = xyz[:, 2]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        front = (z >= min_z) & (z <= max_z)
        u = np.rint(camera.fx * xyz[:, 0] / z + camera.cx)
        v = np.rint(camera.fy * xyz[:, 1] / z + camera.cy)
        inside = np.flatnonzero(
            front & (u >= 0) & (u < camera.width) & (v >= 0) & (v < camera.height)
        )
    return inside, v[inside].astype(np.intp), u[inside].astype(np.intp)


def _label_cloud_numpy(
    raster: np.ndarray, xyz: np.ndarray, camera: Intrinsics, options: LiftOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the points that land in a mask, their instance ids, whether each lies in its mask's
    interior) with numpy: :func:`project_points`, a gather, :func:`interior`."""
    inside, v, u = project_points(xyz, camera, options.min_range_m, options.max_range_m)
    whole = raster.reshape(-1)[v * raster.shape[1] + u]
    masked = np.flatnonzero(whole)  # only points in a mask are looked up in the erosion
    v, u = v[masked], u[masked]
    return inside[masked], whole[masked], interior(raster, v, u, options.erode_px)


def _label_cloud_loop(raster, xyz, fx, fy, cx, cy, min_z, max_z, radius, on, whole, inner):
    """The compiled twin of :func:`_label_cloud_numpy`, one pass over the points: fills the
    first n entries of ``on``, ``whole`` and ``inner`` and returns n. Its float32 arithmetic
    is numpy's, in numpy's order, so the two give the same pixels."""
    h, w = raster.shape
    n = 0
    for p in range(xyz.shape[0]):
        z = xyz[p, 2]
        if not (z >= min_z and z <= max_z) or z == 0:  # numpy's x / 0 lands nowhere either
            continue
        u = np.rint(fx * xyz[p, 0] / z + cx)
        v = np.rint(fy * xyz[p, 1] / z + cy)
        if not (u >= 0 and u < w and v >= 0 and v < h):
            continue
        iu, iv = int(u), int(v)
        label = raster[iv, iu]
        if label == 0:
            continue
        alone = True
        for dy in range(-radius, radius + 1):
            y = min(max(iv + dy, 0), h - 1)
            for dx in range(-radius, radius + 1):
                if raster[y, min(max(iu + dx, 0), w - 1)] != label:
                    alone = False
                    break
            if not alone:
                break
        on[n], whole[n], inner[n] = p, label, alone
        n += 1
    return n


_label_cloud_compiled = jit.njit_cached(_label_cloud_loop)


def _label_cloud(
    raster: np.ndarray, xyz: np.ndarray, camera: Intrinsics, options: LiftOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_label_cloud_numpy`'s result, by the compiled loop where numba is installed
    (a 100k-point cloud at 1080p in a LiDAR's scan order: 0.84 ms against 1.77 on the
    Intel Xeon of docs/benchmarks.md)."""
    if _label_cloud_compiled is None:
        return _label_cloud_numpy(raster, xyz, camera, options)
    xyz = np.ascontiguousarray(xyz, np.float32)
    on = np.empty(len(xyz), np.int64)
    whole = np.empty(len(xyz), raster.dtype)
    inner = np.empty(len(xyz), bool)
    f32 = np.float32
    with jit.compile_lock():  # the first call compiles (or loads numba's cache)
        n = _label_cloud_compiled(
            np.ascontiguousarray(raster), xyz, f32(camera.fx), f32(camera.fy), f32(camera.cx),
            f32(camera.cy), f32(options.min_range_m), f32(options.max_range_m),
            options.erode_px, on, whole, inner,
        )  # fmt: skip
    return on[:n], whole[:n], inner[:n]


def prepare_lifting() -> None:
    """Compile the lifting loops now (or load them from numba's cache: about 1 s, several the
    first time on a machine), so that the first depth image or cloud does not wait for them;
    nothing without numba. Both raster layouts are compiled: a window inside the frame and the
    whole frame."""
    camera = Intrinsics(4.0, 4.0, 3.5, 3.5, 8, 8)
    depth = np.ones((8, 8), np.float32)
    point = np.array([[0.0, 0.0, 1.0]], np.float32)
    inner = np.zeros((8, 8), np.uint16)
    inner[2:6, 2:6] = 1
    for raster in (inner, np.ones((8, 8), np.uint16)):
        lift_depth(raster, np.ones(1, np.uint16), depth, camera)
        lift_cloud(raster, np.ones(1, np.uint16), point, camera)


def lift_cloud(
    raster: np.ndarray,
    ids: np.ndarray,
    xyz_camera: np.ndarray,
    colour: Intrinsics,
    options: LiftOptions | None = None,
) -> tuple[Instances3D, np.ndarray]:
    """Lift the instances ``ids`` of ``raster`` with points already in the camera's optical
    frame (a LiDAR cloud transformed by the LiDAR-to-camera transform).

    Returns the table and each point's instance id (0: in no mask of ``ids``), for a labelled
    cloud: the points its eroded mask holds, or all its mask holds where the instance is lifted
    from its whole mask.
    """
    options = options or LiftOptions()
    ids = np.asarray(ids, np.uint16)
    labels_on_grid(raster, colour, colour)  # the size check
    on, whole, inner = _label_cloud(raster, xyz_camera, colour, options)
    listed = _rows_of(ids)[whole] >= 0  # a raster label the table does not lift labels nothing
    on, whole, inner = on[listed], whole[listed], inner[listed]
    point_labels = np.zeros(len(xyz_camera), np.uint16)
    point_labels[on] = np.where(inner, whole, 0)
    points = np.take(xyz_camera, on, axis=0)
    lifted = lift_points(point_labels[on], points, ids, options)
    retry = np.flatnonzero(~lifted.valid)
    if options.erode_px > 0 and len(retry):
        # Instances the erosion left too thin are lifted from their whole mask.
        lifted = lifted.merged(retry, lift_points(whole, points, ids[retry], options))
        thin = np.isin(whole, ids[retry])
        point_labels[on[thin]] = whole[thin]
    return lifted, point_labels
