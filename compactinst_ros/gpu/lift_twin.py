"""Numpy twin of the lift kernels (gpu/kernels/lift.cu), step for step: the oracle of the tests
and of the GPU check (``check_against_twin``, below), never imported by the runtime.

``lift_tables`` computes the kernels' ``LiftTables`` record of a depth image with the same
stages, the same integer arithmetic and the same float32/float64 roundings (``cloud_tables``:
a cloud's, whose first stage projects each point and tests the raster where it lands):

1. ``lift_bounds``: the raster sampled at every depth pixel through the host's index tables
   (``gpu.lift.source_indices``); labelled pixels, first row and column.
2. ``lift_plan``: stride, erosion radius, lattice origin (integers only).
3. ``lift_classify``: per lattice pixel its slot, the erosion test over the lattice neighbours
   inside the image, the depth test; the first radix level of each (variant, slot).
4. ``lift_select`` / ``lift_histogram``: three radix levels (float bits 30..20, 19..10, 9..0)
   down to the exact nearest-rank percentile.
5. ``lift_accumulate``: inliers' support, float64 sums, min and max (as ordered ints).

The atomics' order is the one thing left out: the twin adds in pixel order, the kernels in any.
``SCENES`` and ``CLOUD_SCENES`` are the synthetic frames the tests and the GPU check share;
``compare`` and ``compare_cloud`` judge a kernel result against the twin and spatial.lift_depth
or spatial.lift_cloud.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spatial.lift import (
    MOMENT_PAIRS,
    Instances3D,
    Intrinsics,
    LiftOptions,
    lift_cloud,
    lift_depth,
)
from .constants import LIFT_BINS, LIFT_TABLES_DTYPE
from .lift import GpuLift, slot_table, source_indices

INT_MAX = np.int32(0x7FFFFFFF)
#: (shift of the bits that must equal the prefix chosen so far, shift of the level's bits, bins)
LEVELS = ((31, 20, LIFT_BINS), (20, 10, LIFT_BINS // 2), (10, 0, LIFT_BINS // 2))
#: compare()'s tolerances: float64 sums in another order (kernels vs twin), and the centroid's
#: float32 rounding of sum / support (1 ulp; kernels or twin vs spatial.lift_depth).
SUM_RTOL = 1e-12
CENTROID_RTOL = CENTROID_ATOL_M = 1e-6


def float_to_ordered(values: np.ndarray) -> np.ndarray:
    """common.cuh's ``float_to_ordered``: int32 that order as the float32 values do."""
    bits = np.asarray(values, np.float32).view(np.int32)
    return np.where(bits >= 0, bits, bits ^ INT_MAX).astype(np.int32)


def lift_tables(
    raster: np.ndarray,
    ids: np.ndarray,
    depth_m: np.ndarray,
    colour: Intrinsics,
    depth: Intrinsics | None = None,
    options: LiftOptions | None = None,
) -> np.void:
    """The ``LiftTables`` record the kernels write for this frame (module docstring)."""
    options = options or LiftOptions()
    depth = depth or colour
    ids = np.asarray(ids, np.uint16)
    n = len(ids)
    tables = _cleared_tables()  # lift_clear
    t = tables[0]
    frame, slots = t["frame"], t["slot"]

    # 1. lift_bounds
    rows, cols = source_indices(colour, depth)
    inside = (rows[:, None] >= 0) & (cols[None, :] >= 0)
    grid = np.where(inside, raster[np.maximum(rows, 0)][:, np.maximum(cols, 0)], 0)
    ys, xs = np.nonzero(grid)
    frame["labelled"] = len(ys)
    if len(ys):
        frame["min_row"], frame["min_col"] = ys.min(), xs.min()

    # 2. lift_plan
    step = 1
    while step * step * options.max_points < int(frame["labelled"]):
        step += 1
    radius = (options.erode_px + step - 1) // step
    row0, col0 = max(int(frame["min_row"]) - step, 0), max(int(frame["min_col"]) - step, 0)
    frame["step"], frame["radius"], frame["row0"], frame["col0"] = step, radius, row0, col0

    # 3. lift_classify: the points (lattice pixels of a slot with valid depth), in pixel order
    h, w = grid.shape
    lattice = np.zeros((h, w), bool)
    lattice[row0::step, col0::step] = True
    lut = slot_table(ids)
    labels = np.where(grid < len(lut), grid, 0)
    slot_map = np.where(labels > 0, lut[labels], -1)
    z_all = np.asarray(depth_m, np.float32)
    with np.errstate(invalid="ignore"):
        valid = (z_all >= np.float32(options.min_range_m)) & (
            z_all <= np.float32(options.max_range_m)
        )
    py, px = np.nonzero(lattice & (slot_map >= 0) & valid)
    slot, label, z = slot_map[py, px], grid[py, px], z_all[py, px]
    interior = np.ones(len(py), bool)
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            yy, xx = py + dy * step, px + dx * step
            seen = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            other = grid[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)] != label
            interior &= ~(seen & other)
    # 4 and 5: the select, then lift_accumulate with x and y as _depth_points rounds them
    point = np.stack(
        [
            ((px - col0).astype(np.float64) + (col0 - depth.cx))
            * (z / np.float32(depth.fx)).astype(np.float64),
            ((py - row0).astype(np.float64) + (row0 - depth.cy))
            * (z / np.float32(depth.fy)).astype(np.float64),
            z,
        ],
        1,
    ).astype(np.float32)
    _select_and_accumulate(slots, n, slot, interior, point, options)
    return t


def _select_and_accumulate(
    slots: np.ndarray,
    n: int,
    slot: np.ndarray,
    interior: np.ndarray,
    point: np.ndarray,
    options: LiftOptions,
) -> None:
    """Stages 4 and 5 of the depth and the cloud kernels alike, into the first ``n`` slots of
    ``slots`` (2, MAX_QUERIES): the radix select of the percentile and the inliers' sums and
    box, from each point's ``slot``, whether it is ``interior`` to its eroded mask, and its
    float32 x, y, z (``point``)."""
    z = point[:, 2]
    key = z.view(np.int32) & INT_MAX
    members = [interior, np.ones(len(z), bool)]  # variant 0: eroded mask, 1: whole mask

    # 4. three radix levels per (variant, slot); lift_select takes the nearest rank first
    fraction = options.percentile / 100.0
    for level, (prefix_shift, shift, bins) in enumerate(LEVELS):
        for variant in range(2):
            for s in range(n):
                record = slots[variant, s]
                chosen = members[variant] & (slot == s)
                if level:
                    chosen &= (key >> prefix_shift) == record["prefix"]
                hist = np.bincount((key[chosen] >> shift) & (bins - 1), minlength=bins)
                if level == 0:
                    record["count"] = hist.sum()
                    record["rank"] = np.rint(fraction * max(int(hist.sum()) - 1, 0))
                if record["count"] == 0:
                    continue
                before = np.cumsum(hist) - hist
                b = int(np.flatnonzero(before + hist > record["rank"])[0])
                record["rank"] -= before[b]
                record["prefix"] = b if level == 0 else (int(record["prefix"]) << 10) | b
                if level == 2:
                    record["depth"] = np.int32(record["prefix"]).view(np.float32)

    # 5. lift_accumulate / lift_cloud_accumulate
    for variant in range(2):
        robust = slots["depth"][variant][np.maximum(slot, 0)]
        half = np.maximum(np.float32(options.band_m), np.float32(options.band_rel) * robust)
        inlier = members[variant] & (np.abs(z - robust) <= half)
        for s in range(n):
            mine = point[inlier & (slot == s)]
            record = slots[variant, s]
            record["support"] = len(mine)
            record["sum"] = mine.astype(np.float64).sum(0)
            wide = mine.astype(np.float64)
            record["moment"] = [(wide[:, a] * wide[:, b]).sum() for a, b in MOMENT_PAIRS]
            if len(mine):
                record["lo"] = float_to_ordered(mine.min(0))
                record["hi"] = float_to_ordered(mine.max(0))


def _cleared_tables() -> np.ndarray:
    """A ``LiftTables`` record (array of one) as lift_clear leaves it."""
    tables = np.zeros(1, LIFT_TABLES_DTYPE)
    slots, frame = tables[0]["slot"], tables[0]["frame"]
    slots["lo"], slots["hi"], slots["depth"] = INT_MAX, -INT_MAX - 1, np.nan
    frame["min_row"] = frame["min_col"] = INT_MAX
    return tables


def cloud_tables(
    raster: np.ndarray,
    ids: np.ndarray,
    xyz: np.ndarray,
    colour: Intrinsics,
    options: LiftOptions | None = None,
    point_ids: np.ndarray | None = None,
) -> tuple[np.void, np.ndarray]:
    """The ``LiftTables`` record and the point labels the cloud kernels write for this cloud
    (float32 x, y, z in the camera's optical frame): lift_cloud_classify, the same select and
    accumulate stages, lift_cloud_labels (``point_ids``: each row's point label, None: ``ids``)."""
    options = options or LiftOptions()
    ids = np.asarray(ids, np.uint16)
    xyz = np.asarray(xyz, np.float32).reshape(-1, 3)
    tables = _cleared_tables()
    t = tables[0]
    h, w = raster.shape
    f32 = np.float32

    # lift_cloud_classify: project in float32, each operation rounded, then rint
    z = xyz[:, 2]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        front = (z >= f32(options.min_range_m)) & (z <= f32(options.max_range_m))
        u = np.rint((f32(colour.fx) * xyz[:, 0]) / z + f32(colour.cx))
        v = np.rint((f32(colour.fy) * xyz[:, 1]) / z + f32(colour.cy))
        lands = front & (u >= 0) & (u < w) & (v >= 0) & (v < h)
    p = np.flatnonzero(lands)
    iu, iv = u[p].astype(np.int64), v[p].astype(np.int64)
    label = raster[iv, iu]
    lut = slot_table(ids)
    slot_of = np.where((label > 0) & (label < len(lut)), lut[np.minimum(label, len(lut) - 1)], -1)
    mine = slot_of >= 0
    p, iu, iv, label, slot = p[mine], iu[mine], iv[mine], label[mine], slot_of[mine]
    interior = np.ones(len(p), bool)
    radius = options.erode_px
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            yy, xx = np.clip(iv + dy, 0, h - 1), np.clip(iu + dx, 0, w - 1)
            interior &= raster[yy, xx] == label
    _select_and_accumulate(t["slot"], len(ids), slot, interior, xyz[p], options)

    # lift_cloud_labels
    labels = np.zeros(len(xyz), np.uint16)
    whole = t["slot"][0]["support"] < options.min_points
    shown = interior | whole[slot]
    names = ids if point_ids is None else np.asarray(point_ids, np.uint16)
    labels[p[shown]] = names[slot[shown]]
    return t, labels


@dataclass(frozen=True)
class Scene:
    """One synthetic frame: lift_depth's arguments."""

    raster: np.ndarray  # (H, W) uint16 at the colour camera's resolution
    ids: np.ndarray  # uint16 ids to lift
    depth_m: np.ndarray  # float32 metres at the depth camera's resolution
    colour: Intrinsics
    depth: Intrinsics | None
    options: LiftOptions

    def cpu(self) -> Instances3D:
        """spatial.lift_depth's table of this scene."""
        return lift_depth(
            self.raster, self.ids, self.depth_m, self.colour, self.depth, self.options
        )

    def twin(self) -> np.void:
        """The twin's tables of this scene."""
        return lift_tables(
            self.raster, self.ids, self.depth_m, self.colour, self.depth, self.options
        )

    def lift_on(self, lifter: GpuLift, stream: Any) -> tuple[np.void, Instances3D]:
        """The kernels' tables and table of this scene (``lifter`` on pycuda's ``stream``)."""
        import pycuda.driver as cuda

        d_raster = cuda.to_device(np.ascontiguousarray(self.raster))
        d_depth = cuda.to_device(np.ascontiguousarray(self.depth_m, np.float32))
        lifter.enqueue(
            stream, raster_ptr=int(d_raster), ids=self.ids, depth_ptr=int(d_depth),
            colour=self.colour, depth=self.depth, options=self.options,
        )  # fmt: skip
        stream.synchronize()
        return lifter.raw_tables(), lifter.collect()

    def judge(self, lifter: GpuLift, stream: Any) -> Difference:
        """How the kernels' result of this scene differs from the twin and lift_depth."""
        return compare(*self.lift_on(lifter, stream), self)


def _planes() -> Scene:
    """Two planes (one slanted across 1.0 m, one at 1.5 m with NaN, 0 and background seen
    through the mask), a 3x3 instance the erosion removes (lifted from its whole mask), a 2x2 one
    too small even then, a labelled neighbour that is not lifted, an id absent from the raster."""
    rng = np.random.default_rng(0)
    h, w = 40, 56
    colour = Intrinsics(50.0, 50.0, 27.5, 19.5, w, h)
    raster = np.zeros((h, w), np.uint16)
    depth = np.full((h, w), 6.0, np.float32)
    raster[5:20, 5:22] = 1
    depth[5:20, 5:22] = 1.5 + rng.normal(0, 0.01, (15, 17))
    depth[8, 8:12] = np.nan
    depth[12, 10:13] = 0.0
    depth[15:17, 15:17] = 6.0  # background through a gap of the mask
    raster[22:36, 28:50] = 2
    depth[22:36, 28:50] = np.linspace(0.9, 1.2, 22, dtype=np.float32)[None, :]
    raster[22:36, 50:54] = 7  # labelled but not lifted: still erodes instance 2
    raster[2:5, 40:43] = 3
    depth[2:5, 40:43] = 2.25
    raster[30:32, 5:7] = 4
    depth[30:32, 5:7] = 2.0
    options = LiftOptions(min_points=5, percentile=40.0)
    ids = np.array([1, 2, 3, 4, 9], np.uint16)
    return Scene(raster, ids, depth, colour, None, options)


def _half_resolution_depth() -> Scene:
    """Depth at half the colour resolution (its K scaled), the highest percentile."""
    rng = np.random.default_rng(1)
    h, w = 48, 64
    colour = Intrinsics(60.0, 58.0, 31.5, 23.5, w, h)
    grid = colour.scaled_to(32, 24)
    raster = np.zeros((h, w), np.uint16)
    raster[6:30, 8:34] = 2
    raster[26:46, 36:60] = 1
    depth = (2.5 + rng.normal(0, 0.2, (24, 32))).astype(np.float32)
    options = LiftOptions(min_points=5, percentile=100.0, band_rel=0.05)
    return Scene(raster, np.array([1, 2], np.uint16), depth, colour, grid, options)


def _offset_depth() -> Scene:
    """A larger depth image with its own K: parts of it fall outside the colour image; the
    lowest percentile."""
    rng = np.random.default_rng(2)
    h, w = 30, 40
    colour = Intrinsics(40.0, 40.0, 19.5, 14.5, w, h)
    grid = Intrinsics(75.0, 70.0, 35.0, 24.0, 60, 45)
    raster = np.zeros((h, w), np.uint16)
    raster[0:18, 0:16] = 1  # reaches the image's corner
    raster[10:28, 22:40] = 2
    depth = rng.uniform(0.5, 9.0, (45, 60)).astype(np.float32)
    options = LiftOptions(min_points=5, percentile=0.0, erode_px=1, band_m=1.0)
    return Scene(raster, np.array([2, 1], np.uint16), depth, colour, grid, options)


def _strided() -> Scene:
    """More labelled pixels than max_points: every second row and column (stride 2), erosion
    radius ceil(3 / 2) = 2 lattice pixels; inliers exactly at the band's edges."""
    rng = np.random.default_rng(3)
    h, w = 44, 60
    colour = Intrinsics(55.0, 55.0, 29.5, 21.5, w, h)
    raster = np.zeros((h, w), np.uint16)
    raster[3:40, 4:34] = 1
    raster[10:42, 34:57] = 2
    raster[20:24, 20:26] = 3
    depth = (4.0 + rng.normal(0, 0.3, (h, w))).astype(np.float32)
    depth[raster == 2] = 7.5
    depth[20:22, 34:57] = 6.75  # exactly on the inlier band's edges (0.75 = 0.1 * 7.5 in float32)
    depth[30:32, 34:57] = 8.25
    options = LiftOptions(min_points=5, erode_px=3, max_points=1000)
    return Scene(raster, np.array([1, 2, 3], np.uint16), depth, colour, None, options)


def _no_instances() -> Scene:
    """An empty raster: every id without 3-D."""
    colour = Intrinsics(30.0, 30.0, 15.5, 11.5, 32, 24)
    depth = np.full((24, 32), 2.0, np.float32)
    raster = np.zeros((24, 32), np.uint16)
    return Scene(raster, np.array([1, 2], np.uint16), depth, colour, None, LiftOptions())


SCENES: dict[str, Scene] = {
    "planes": _planes(),
    "half_resolution_depth": _half_resolution_depth(),
    "offset_depth": _offset_depth(),
    "strided": _strided(),
    "no_instances": _no_instances(),
}


@dataclass(frozen=True)
class CloudScene:
    """One synthetic cloud: lift_cloud's arguments."""

    raster: np.ndarray  # (H, W) uint16 at the camera's resolution
    ids: np.ndarray  # uint16 ids to lift
    xyz: np.ndarray  # (P, 3) float32 points in the camera's optical frame
    colour: Intrinsics
    options: LiftOptions

    def cpu(self) -> tuple[Instances3D, np.ndarray]:
        """spatial.lift_cloud's table and point labels of this cloud."""
        return lift_cloud(self.raster, self.ids, self.xyz, self.colour, self.options)

    def twin(self) -> tuple[np.void, np.ndarray]:
        """The twin's tables and point labels of this cloud."""
        return cloud_tables(self.raster, self.ids, self.xyz, self.colour, self.options)

    def lift_on(
        self, lifter: GpuLift, stream: Any, point_ids: np.ndarray | None = None
    ) -> tuple[np.void, Instances3D, np.ndarray]:
        """The kernels' tables, table and point labels of this cloud (``point_ids``: as
        ``GpuLift.enqueue_cloud`` takes them)."""
        import pycuda.driver as cuda

        d_raster = cuda.to_device(np.ascontiguousarray(self.raster))
        d_points = cuda.to_device(np.ascontiguousarray(self.xyz, np.float32))
        lifter.enqueue_cloud(
            stream, raster_ptr=int(d_raster), ids=self.ids, points_ptr=int(d_points),
            n_points=len(self.xyz), colour=self.colour, point_ids=point_ids,
            options=self.options,
        )  # fmt: skip
        stream.synchronize()
        lifted, labels = lifter.collect_cloud()
        return lifter.raw_tables(), lifted, labels

    def judge(self, lifter: GpuLift, stream: Any) -> Difference:
        """How the kernels' result of this cloud differs from the twin and lift_cloud."""
        return compare_cloud(*self.lift_on(lifter, stream), self)


def _points_through(scene: Scene, count: int, seed: int) -> np.ndarray:
    """``count`` points seen through a depth scene (its depth where a point lands, at
    sub-pixel positions a little beyond the image), then the cases a LiDAR sends: NaN, inf,
    zero and negative depths, points exactly at the range limits."""
    rng = np.random.default_rng(seed)
    c, h, w = scene.colour, *scene.raster.shape
    u = rng.uniform(-3.0, w + 3.0, count)
    v = rng.uniform(-3.0, h + 3.0, count)
    rows = np.clip(np.rint(v), 0, h - 1).astype(int)
    depth = scene.depth_m[rows, np.clip(np.rint(u), 0, w - 1).astype(int)]
    z = (depth + rng.normal(0.0, 0.005, count)).astype(np.float32)
    xyz = np.stack([(u - c.cx) * z / c.fx, (v - c.cy) * z / c.fy, z], 1).astype(np.float32)
    odd = np.array(
        [
            [0.1, 0.1, np.nan], [np.nan, 0.0, 1.5], [0.0, 0.0, np.inf], [0.0, 0.0, 0.0],
            [0.2, 0.1, -1.5], [0.0, 0.0, scene.options.min_range_m],
            [0.0, 0.0, scene.options.max_range_m],
        ],
        np.float32,
    )  # fmt: skip
    return np.concatenate([xyz, odd])


def _cloud_planes() -> CloudScene:
    """The planes scene seen by a LiDAR: NaN, 0 and see-through depths, an instance the
    erosion removes, one too small, a labelled neighbour that is not lifted, an absent id."""
    scene = _planes()
    xyz = _points_through(scene, 3000, 10)
    return CloudScene(scene.raster, scene.ids, xyz, scene.colour, scene.options)


def _cloud_at_the_border() -> CloudScene:
    """Instances that touch the image's edges (the erosion's neighbourhood clamped to the
    image), a wide erosion, the highest percentile."""
    scene = _strided()
    options = LiftOptions(min_points=5, erode_px=3, percentile=100.0, band_rel=0.05)
    raster = scene.raster.copy()
    raster[0:12, 0:20] = 4
    raster[30:, 50:] = 5
    xyz = _points_through(scene, 2500, 11)
    ids = np.array([5, 1, 2, 3, 4], np.uint16)
    return CloudScene(raster, ids, xyz, scene.colour, options)


def _cloud_unexpanded() -> CloudScene:
    """No erosion, the lowest percentile and a wide band, ids in another order."""
    scene = _half_resolution_depth()
    colour = scene.depth or scene.colour
    raster = scene.raster[::2, ::2].copy()
    depth_scene = Scene(raster, scene.ids, scene.depth_m, colour, None, scene.options)
    options = LiftOptions(min_points=3, erode_px=0, percentile=0.0, band_m=1.0)
    xyz = _points_through(depth_scene, 800, 12)
    return CloudScene(raster, np.array([2, 1], np.uint16), xyz, colour, options)


CLOUD_SCENES: dict[str, CloudScene] = {
    "cloud_planes": _cloud_planes(),
    "cloud_at_the_border": _cloud_at_the_border(),
    "cloud_unexpanded": _cloud_unexpanded(),
}


@dataclass(frozen=True)
class Difference:
    """How a kernel result differs from the twin and from spatial.lift_depth."""

    exact: bool  # every exact field equal (tables vs twin, table vs lift_depth)
    mismatch: str  # which fields differ, empty when none
    sum_rel: float  # largest relative difference of a sum, kernels vs twin
    centroid_m: float  # largest centroid, distance or covariance difference vs lift_depth
    centroid_ok: bool  # within CENTROID_RTOL and CENTROID_ATOL_M


EXACT_SLOT_FIELDS = ("count", "rank", "prefix", "support", "depth", "lo", "hi")
EXACT_INSTANCE_FIELDS = ("ids", "valid", "support", "depth", "extent")


def compare(tables: np.void, lifted: Instances3D, scene: Scene) -> Difference:
    """The kernels' ``tables`` and their ``lifted`` table against the twin and lift_depth."""
    return _difference(tables, scene.twin(), lifted, scene.cpu(), len(scene.ids), [])


def compare_cloud(
    tables: np.void, lifted: Instances3D, labels: np.ndarray, scene: CloudScene
) -> Difference:
    """The cloud kernels' ``tables``, ``lifted`` table and point ``labels`` against the twin
    and spatial.lift_cloud."""
    twin, twin_labels = scene.twin()
    cpu, cpu_labels = scene.cpu()
    bad = [
        name
        for name, want in (("labels vs twin", twin_labels), ("labels vs lift_cloud", cpu_labels))
        if not np.array_equal(labels, want)
    ]
    return _difference(tables, twin, lifted, cpu, len(scene.ids), bad)


def _difference(
    tables: np.void, twin: np.void, lifted: Instances3D, cpu: Instances3D, n: int, bad: list[str]
) -> Difference:
    """compare's judgement of kernel ``tables`` and ``lifted`` against the ``twin``'s tables
    and the host's ``cpu`` table, adding to the mismatches already found (``bad``)."""
    frame, twin_frame = tables["frame"], twin["frame"]
    bad = bad + [f"frame.{f}" for f in frame.dtype.names if frame[f] != twin_frame[f]]
    for f in EXACT_SLOT_FIELDS:
        if not np.array_equal(tables["slot"][f][:, :n], twin["slot"][f][:, :n], equal_nan=True):
            bad.append(f"slot.{f}")
    for f in EXACT_INSTANCE_FIELDS:
        if not np.array_equal(getattr(lifted, f), getattr(cpu, f), equal_nan=f != "ids"):
            bad.append(f"instances.{f}")
    sum_rel = 0.0
    for f in ("sum", "moment"):  # float64 atomics: the order of the additions differs
        a, b = tables["slot"][f][:, :n], twin["slot"][f][:, :n]
        rel = (np.abs(a - b) / np.maximum(np.abs(b), 1e-300)).max(initial=0.0)
        sum_rel = max(sum_rel, float(rel))
    got = np.column_stack([lifted.centroid, lifted.distance, lifted.covariance.reshape(n, 9)])
    want = np.column_stack([cpu.centroid, cpu.distance, cpu.covariance.reshape(n, 9)])
    same_nan = np.array_equal(np.isnan(got), np.isnan(want))
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
        centroid_m = float(np.nan_to_num(diff, nan=0.0).max(initial=0.0))
        close = np.isnan(want) | (diff <= CENTROID_ATOL_M + CENTROID_RTOL * np.abs(want))
    return Difference(
        exact=not bad,
        mismatch=", ".join(bad),
        sum_rel=sum_rel,
        centroid_m=centroid_m,
        centroid_ok=same_nan and bool(close.all()),
    )


def check_against_twin(stream: Any) -> tuple[bool, str, dict[str, float]]:
    """The GPU check's row "lift kernels vs twin": every scene of ``SCENES`` and
    ``CLOUD_SCENES`` lifted by the kernels, compared with the twin's tables (integers,
    depths and point labels exact, sums to 1e-12 relative) and with spatial.lift_depth or
    lift_cloud (centroid and distance to 1e-6 relative or 1e-6 m, everything else exact).
    Returns (ok, detail, measured values)."""
    lifter = GpuLift()
    worst = {"sum_rel": 0.0, "centroid_m": 0.0}
    exact = True
    scenes = {**SCENES, **CLOUD_SCENES}
    for name, scene in scenes.items():
        diff = scene.judge(lifter, stream)
        exact &= diff.exact
        worst["sum_rel"] = max(worst["sum_rel"], diff.sum_rel)
        worst["centroid_m"] = max(worst["centroid_m"], diff.centroid_m)
        if not diff.exact:
            print(f"    lift scene {name}: {diff.mismatch}", flush=True)
    ok = exact and worst["sum_rel"] <= 1e-12 and worst["centroid_m"] <= 1e-6
    detail = (
        f"{len(scenes)} scenes ({len(CLOUD_SCENES)} clouds), exact fields "
        f"{'equal' if exact else 'DIFFER'}, sums {worst['sum_rel']:.1e} rel, centroid "
        f"{worst['centroid_m']:.1e} m"
    )
    return ok, detail, worst
