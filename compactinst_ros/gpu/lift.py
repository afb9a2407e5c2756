"""3-D lifting launcher: spatial.lift_depth and spatial.lift_cloud on the device
(kernels/lift.cu; numpy twins: ``lift_twin.lift_tables`` and ``lift_twin.cloud_tables``), for an
instance raster and a registered depth image or a cloud in the camera's frame that are already in
device memory.

Everything is enqueued on the caller's stream; ``collect`` reads the tables after the caller's
wait. The host's part: the depth-pixel -> colour-pixel index tables (labels_on_grid's float64
nearest pixel, per camera pair), the id -> slot table, and turning the tables into
``Instances3D`` (the division of the sums and the choice between the eroded and the whole mask).
``TensorRTBackend.lift_depth`` and ``lift_cloud`` run it on the frame's arena;
The GPU check's comparison with the twin is ``lift_twin.check_against_twin``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from ..spatial.lift import Instances3D, Intrinsics, LiftOptions, covariance_of
from .constants import (
    LIFT_BINS,
    LIFT_CLOUD_ROW,
    LIFT_SELECT_THREADS,
    LIFT_TABLES_DTYPE,
    MAX_QUERIES,
)
from .launch import load_kernels, pixel_grid

KERNELS = (
    "lift_clear", "lift_bounds", "lift_plan", "lift_classify", "lift_select", "lift_histogram",
    "lift_accumulate", "lift_cloud_classify", "lift_cloud_accumulate", "lift_cloud_labels",
)  # fmt: skip


def cloud_rows(n_points: int) -> int:
    """Rows of the kernels' layout of a cloud (``LIFT_CLOUD_ROW`` points each), at least one."""
    return max(1, -(-n_points // LIFT_CLOUD_ROW))


def source_indices(colour: Intrinsics, grid: Intrinsics) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the colour pixel nearest to each row and column of a registered image
    with intrinsics ``grid``, -1 outside the colour image: spatial.labels_on_grid's sampling as
    int32 tables."""
    if grid == colour:
        return np.arange(grid.height, dtype=np.int32), np.arange(grid.width, dtype=np.int32)
    u = np.rint(colour.fx * (np.arange(grid.width) - grid.cx) / grid.fx + colour.cx)
    v = np.rint(colour.fy * (np.arange(grid.height) - grid.cy) / grid.fy + colour.cy)
    u = np.where((u >= 0) & (u < colour.width), u, -1).astype(np.int32)
    v = np.where((v >= 0) & (v < colour.height), v, -1).astype(np.int32)
    return v, u


def slot_table(ids: np.ndarray) -> np.ndarray:
    """int32 id -> slot (the row of ``ids``; -1: none) for ids 0..max(ids), as spatial.lift's
    ``_rows_of`` (a repeated id takes its last row, id 0 none)."""
    ids = np.asarray(ids, np.int64)
    lut = np.full(int(ids.max(initial=0)) + 1, -1, np.int32)
    lut[ids] = np.arange(len(ids), dtype=np.int32)
    lut[0] = -1
    return lut


def check_capacity(ids: np.ndarray) -> None:
    """InputError when a frame has more instances than the kernels' tables hold."""
    if len(ids) > MAX_QUERIES:
        raise InputError(
            f"the GPU lifting takes up to {MAX_QUERIES} instances per frame, this frame has "
            f"{len(ids)}; lift on the CPU (spatial.lift_depth)"
        )


def ordered_to_float(values: np.ndarray) -> np.ndarray:
    """Inverse of common.cuh's ``float_to_ordered`` (int32 -> float32)."""
    values = np.asarray(values, np.int32)
    return np.where(values >= 0, values, values ^ np.int32(0x7FFFFFFF)).view(np.float32)


def instances_from_tables(tables: np.void, ids: np.ndarray, options: LiftOptions) -> Instances3D:
    """Instances3D of one frame's ``LiftTables`` record: per slot the eroded mask's result where
    it has ``min_points`` inliers, else the whole mask's (lift_depth's retry; with erode_px 0 the
    two are the same), the centroid as lift_points divides the float64 sums."""
    ids = np.asarray(ids, np.uint16)
    n = len(ids)
    slots = tables["slot"][:, :n]
    whole = slots[0]["support"] < options.min_points
    chosen = np.where(whole, slots[1], slots[0])
    support = chosen["support"].astype(np.int32)
    valid = support >= options.min_points
    centroid = np.full((n, 3), np.nan, np.float32)
    extent = np.full((n, 3), np.nan, np.float32)
    centroid[valid] = (chosen["sum"] / np.maximum(support, 1)[:, None])[valid]
    extent[valid] = (ordered_to_float(chosen["hi"]) - ordered_to_float(chosen["lo"]))[valid]
    return Instances3D(
        ids=ids,
        centroid=centroid,
        extent=extent,
        depth=np.where(valid, chosen["depth"], np.nan).astype(np.float32),
        distance=np.linalg.norm(centroid, axis=1).astype(np.float32),
        support=np.where(valid, support, 0).astype(np.int32),
        valid=valid,
        covariance=covariance_of(chosen["sum"], chosen["moment"], support, valid),
    )


class GpuLift:
    """Lift kernels for device-resident instance rasters and depth images or clouds, one frame at
    a time.

    Buffers (the tables and their pinned mirror, per-pixel or per-point codes, histograms, index
    tables, a cloud's depths and point labels) are allocated once and grown or rebuilt when the
    frame needs it."""

    def __init__(self) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        (
            self.k_clear, self.k_bounds, self.k_plan, self.k_classify, self.k_select,
            self.k_histogram, self.k_accumulate, self.k_cloud_classify, self.k_cloud_accumulate,
            self.k_cloud_labels,
        ) = load_kernels("lift", *KERNELS)  # fmt: skip
        self.tables = cuda.mem_alloc(LIFT_TABLES_DTYPE.itemsize)
        self.host = cuda.pagelocked_empty(LIFT_TABLES_DTYPE.itemsize, np.uint8)
        self._cameras: tuple[Intrinsics, Intrinsics] | None = None
        self._sources: list[Any] = []
        self._code: Any = None
        self._code_pixels = 0
        self._hist: Any = None
        self._hist_slots = 0
        self._lut: Any = None
        self._lut_size = 0
        self._ids = np.zeros(0, np.uint16)
        self._options = LiftOptions()
        self._cloud_z: Any = None  # a cloud's depths in the kernels' layout
        self._cloud_labels: Any = None  # each point's instance id, and its pinned mirror
        self._cloud_host: Any = None
        self._cloud_ids: Any = None  # the id each row's points are labelled with
        self._cloud_points = 0
        self._cloud_size = 0

    def _prepare(self, items: int, ids: np.ndarray) -> None:
        """Codes for ``items`` pixels or points and histograms for ``ids``, big enough; the slot
        table."""
        cuda = self.cuda
        if items > self._code_pixels:
            self._code_pixels = items
            self._code = cuda.mem_alloc(4 * self._code_pixels)
        if len(ids) > self._hist_slots:
            self._hist_slots = len(ids)
            self._hist = cuda.mem_alloc(4 * 2 * self._hist_slots * LIFT_BINS)
        lut = slot_table(ids)
        self._lut = cuda.to_device(lut)  # synchronous: kept until the next frame
        self._lut_size = len(lut)

    def _clear(self, stream: Any, n: int) -> None:
        """lift_clear: the tables and the histograms of ``n`` slots to their start values."""
        n_hist = 2 * n * LIFT_BINS
        clear = max(n_hist, 2 * MAX_QUERIES)
        self.k_clear.prepared_async_call(
            (-(-clear // 256), 1), (256, 1, 1), stream, n_hist, int(self.tables), int(self._hist)
        )

    def _select(
        self, stream: Any, n: int, depth_ptr: int, h: int, w: int, options: LiftOptions
    ) -> None:
        """The three radix levels of the percentile, over the codes and depths of an h x w
        layout (a depth image, or a cloud's rows)."""
        grid, block = pixel_grid(w, h)
        tables, code, hist = int(self.tables), int(self._code), int(self._hist)
        fraction = options.percentile / 100.0
        for level in range(3):
            if level:
                self.k_histogram.prepared_async_call(
                    grid, block, stream, level, code, depth_ptr, h, w, n, tables, hist
                )
            self.k_select.prepared_async_call(
                (n, 2), (LIFT_SELECT_THREADS, 1, 1), stream, level, n, fraction, tables, hist
            )

    def enqueue(
        self,
        stream: Any,
        *,
        raster_ptr: int,
        ids: np.ndarray,
        depth_ptr: int,
        colour: Intrinsics,
        depth: Intrinsics | None = None,
        options: LiftOptions | None = None,
    ) -> None:
        """Lift ``ids`` of the uint16 instance raster at ``raster_ptr`` (colour resolution) with
        the float32 depth image at ``depth_ptr`` (metres, ``depth``'s size, contiguous rows; None:
        the colour camera's) and
        one device-to-host copy of the tables; ``collect`` after the stream's wait. Keyword
        arguments: two of them are device pointers, easy to swap."""
        options = options or LiftOptions()
        ids = np.asarray(ids, np.uint16)
        check_capacity(ids)
        depth = depth or colour
        self._ids, self._options, self._cloud_points = ids, options, 0
        n = len(ids)
        if n == 0:
            return
        if self._cameras != (colour, depth):
            self._sources = [self.cuda.to_device(a) for a in source_indices(colour, depth)]
            self._cameras = (colour, depth)
        self._prepare(depth.width * depth.height, ids)
        h, w = depth.height, depth.width
        rows, cols = (int(a) for a in self._sources)
        tables, code, hist = int(self.tables), int(self._code), int(self._hist)
        self._clear(stream, n)
        grid, block = pixel_grid(w, h)
        self.k_bounds.prepared_async_call(
            grid, block, stream, raster_ptr, colour.width, rows, cols, h, w, tables
        )
        self.k_plan.prepared_async_call(
            (1, 1), (1, 1, 1), stream, options.erode_px, options.max_points, tables
        )
        self.k_classify.prepared_async_call(
            grid, block, stream, raster_ptr, colour.width, rows, cols, depth_ptr, h, w,
            int(self._lut), self._lut_size, np.float32(options.min_range_m),
            np.float32(options.max_range_m), n, tables, code, hist,
        )  # fmt: skip
        self._select(stream, n, depth_ptr, h, w, options)
        self.k_accumulate.prepared_async_call(
            grid, block, stream, code, depth_ptr, h, w, float(depth.cx), float(depth.cy),
            np.float32(depth.fx), np.float32(depth.fy), np.float32(options.band_m),
            np.float32(options.band_rel), tables,
        )  # fmt: skip
        self.cuda.memcpy_dtoh_async(self.host, self.tables, stream)

    def enqueue_cloud(
        self,
        stream: Any,
        *,
        raster_ptr: int,
        ids: np.ndarray,
        points_ptr: int,
        n_points: int,
        colour: Intrinsics,
        point_ids: np.ndarray | None = None,
        options: LiftOptions | None = None,
    ) -> None:
        """Lift ``ids`` of the uint16 instance raster at ``raster_ptr`` (``colour``'s size) with
        the ``n_points`` float32 x, y, z points at ``points_ptr`` (the camera's optical frame,
        contiguous), then copy the tables and each point's instance id to the host;
        ``collect_cloud`` after the stream's wait. ``point_ids``: the id a point in row i's
        mask gets (the table's ids where the raster holds per-frame ids; None: ``ids``)."""
        options = options or LiftOptions()
        ids = np.asarray(ids, np.uint16)
        check_capacity(ids)
        self._ids, self._options, self._cloud_points = ids, options, n_points
        n = len(ids)
        if n == 0:
            return
        cuda = self.cuda
        rows = cloud_rows(n_points)
        size = rows * LIFT_CLOUD_ROW
        self._prepare(size, ids)
        if size > self._cloud_size:
            self._cloud_size = size
            self._cloud_z = cuda.mem_alloc(4 * size)
            self._cloud_labels = cuda.mem_alloc(2 * size)
            self._cloud_host = cuda.pagelocked_empty(size, np.uint16)
        labels = ids if point_ids is None else np.asarray(point_ids, np.uint16)
        self._cloud_ids = cuda.to_device(labels)  # synchronous, as the slot table
        tables, code, hist = int(self.tables), int(self._code), int(self._hist)
        z = int(self._cloud_z)
        self._clear(stream, n)
        grid, block = pixel_grid(LIFT_CLOUD_ROW, rows)
        f32 = np.float32
        self.k_cloud_classify.prepared_async_call(
            grid, block, stream, raster_ptr, colour.width, colour.height, points_ptr, n_points,
            rows, f32(colour.fx), f32(colour.fy), f32(colour.cx), f32(colour.cy), int(self._lut),
            self._lut_size, f32(options.min_range_m), f32(options.max_range_m),
            options.erode_px, n, code, z, hist,
        )  # fmt: skip
        self._select(stream, n, z, rows, LIFT_CLOUD_ROW, options)
        self.k_cloud_accumulate.prepared_async_call(
            grid, block, stream, code, points_ptr, rows, f32(options.band_m),
            f32(options.band_rel), tables,
        )  # fmt: skip
        self.k_cloud_labels.prepared_async_call(
            grid, block, stream, code, n_points, rows, int(self._cloud_ids), options.min_points,
            tables, int(self._cloud_labels),
        )  # fmt: skip
        cuda.memcpy_dtoh_async(self.host, self.tables, stream)
        cuda.memcpy_dtoh_async(self._cloud_host[:n_points], self._cloud_labels, stream)

    def collect(self) -> Instances3D:
        """The last enqueued frame's table (call after the stream's wait)."""
        if len(self._ids) == 0:
            return Instances3D.unsupported(self._ids)
        return instances_from_tables(self.raw_tables(), self._ids, self._options)

    def collect_cloud(self) -> tuple[Instances3D, np.ndarray]:
        """The last enqueued cloud's table and each point's instance id (0: in no mask), as
        spatial.lift_cloud returns them (call after the stream's wait)."""
        if len(self._ids) == 0:
            return self.collect(), np.zeros(self._cloud_points, np.uint16)
        return self.collect(), self._cloud_host[: self._cloud_points].copy()

    def raw_tables(self) -> np.void:
        """A copy of the last frame's ``LiftTables`` record (call after the stream's wait)."""
        return self.host.view(LIFT_TABLES_DTYPE)[0].copy()
