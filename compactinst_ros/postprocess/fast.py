"""Fast CPU post-processing: the reference's results, with per-pixel work only where it matters.

The camera frame is cut into 16x16 tiles (``tiles.py``). For each output, the exact per-tile
bounds decide most tiles outright (one query wins everywhere and is above or below T everywhere,
one class wins and clears the void floor or not); those tiles are filled with one value. Only the
remaining tiles are sampled per pixel, one tile row at a time, and only for the masks that can
change the answer there. The per-pixel arithmetic is the reference's (``Resampler.sample``,
``sigmoid``), so the rasters and tables are bit-identical to ``reference.postprocess``, which
stays the specification and the test oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..labels import LabelSet
from ..structures import (
    FrameMeta,
    FrameResult,
    Instances,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
    Segments,
)
from .frame import RuleInputs
from .instance import InstanceSelection, drop_empty, instances_table, select_instances
from .panoptic import PanopticSelection, finalize_panoptic, panoptic_selection
from .resample import sigmoid
from .semantic import SEMANTIC_VOID_FLOOR, semantic_dtype, semantic_lowres
from .tiles import TILE, TileBounds, TileGrid, panoptic_candidates, semantic_candidates

#: Call overhead of one batch, in samples of one map: a tile set joins another batch when that
#: adds fewer samples than this.
BATCH_OVERHEAD = 8192


@dataclass
class TiledRaster:
    """A camera raster of codes: one code per decided tile, per-pixel codes for the others.

    ``compose(lut)`` writes ``lut[code]`` at every pixel, so ids that are known only after all
    tiles were counted (renumbering, panoptic segment ids) cost no extra full-frame pass.
    """

    tiles: TileGrid
    codes: np.ndarray  # (R, C) code of each decided tile (undecided tiles are overwritten)
    pixels: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (flat, code)

    def compose(self, lut: np.ndarray) -> np.ndarray:
        """(H, W) raster of ``lut[code]``."""
        raster = self.tiles.expand(lut[self.codes])
        flat = raster.reshape(-1)
        for index, codes in self.pixels:
            flat[index] = lut[codes]
        return raster


@dataclass(frozen=True)
class TileBatch:
    """Undecided tiles sampled together at every pixel, for the maps any of them needs.

    Tiles are padded to the largest in the batch by repeating their last row/column; padded
    pixels repeat a real pixel's value, so writing them is harmless and ``valid`` drops them
    from counts.
    """

    members: np.ndarray  # (u,) map indices, ascending (rank, query or class order)
    tile_rows: np.ndarray  # (n,) tile row of each tile
    tile_cols: np.ndarray  # (n,) tile column of each tile
    ys: np.ndarray  # (n, a) camera rows of each tile (padded)
    xs: np.ndarray  # (n, b) camera columns of each tile (padded)
    valid: np.ndarray | None  # (n, a, b) bool, None when no tile is padded

    def sample(self, grids: np.ndarray, tiles: TileGrid) -> np.ndarray:
        """(u, n, a, b) samples of the member grids at the batch's pixels."""
        return tiles.sample(grids[self.members], self.tile_rows, self.tile_cols, self.ys, self.xs)

    def flat_index(self, width: int) -> np.ndarray:
        """(n, a, b) raster offsets of the batch's pixels."""
        return self.ys[:, :, None] * width + self.xs[:, None, :]

    def count(self, codes: np.ndarray, n: int) -> np.ndarray:
        """(n,) int64 pixels per code 0..n-1 (padding excluded)."""
        codes = codes if self.valid is None else codes[self.valid]
        return np.bincount(codes.ravel(), minlength=n)

    def code_lut(self) -> np.ndarray:
        """(u + 1,) local code (0, or member j + 1) -> global code (0, or map index + 1)."""
        return np.append(0, self.members + 1)


def merge_tile_sets(members: list[int], pixels: list[int]) -> tuple[list[int], list[int]]:
    """Batch of each tile set, and each batch's maps (sets and batches as bitmasks of maps).

    Sets are taken by decreasing work (pixels x maps); each joins the batch where sampling the
    union of maps adds the fewest samples, if fewer than BATCH_OVERHEAD, else starts a batch.
    Extra maps in a batch never change an answer, they only cost time.
    """
    order = sorted(range(len(members)), key=lambda g: -pixels[g] * members[g].bit_count())
    batch_maps: list[int] = []
    batch_pixels: list[int] = []
    batch = [0] * len(members)
    for g in order:
        maps, size = members[g], members[g].bit_count()
        best, best_extra = len(batch_maps), BATCH_OVERHEAD
        for b, (other, other_pixels) in enumerate(zip(batch_maps, batch_pixels, strict=True)):
            union = (other | maps).bit_count()
            extra = (union - size) * pixels[g] + (union - other.bit_count()) * other_pixels
            if extra < best_extra:
                best, best_extra = b, extra
        if best == len(batch_maps):
            batch_maps.append(0)
            batch_pixels.append(0)
        batch[g] = best
        batch_maps[best] |= maps
        batch_pixels[best] += pixels[g]
    return batch, batch_maps


def tile_batches(tiles: TileGrid, undecided: np.ndarray, needed: np.ndarray) -> Iterator[TileBatch]:
    """Undecided tiles grouped by the set of maps they need (``needed``: (N, R, C) bool)."""
    tile_rows, tile_cols = np.nonzero(undecided)
    if len(tile_rows) == 0:
        return
    sets = needed[:, tile_rows, tile_cols].T
    packed = np.packbits(sets, axis=1, bitorder="little")
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    unique, group = np.unique(keys, return_inverse=True)
    pixels = np.bincount(group, tiles.pixel_counts()[tile_rows, tile_cols])
    batch, batch_maps = merge_tile_sets(
        [int.from_bytes(key.tobytes(), "little") for key in unique], pixels.astype(int).tolist()
    )
    group = np.asarray(batch)[group]
    order = np.argsort(group, kind="stable")
    stops = np.flatnonzero(np.diff(group[order])) + 1
    for index in np.split(order, stops):
        rows, cols = tile_rows[index], tile_cols[index]
        height, width = int(tiles.rows.size[rows].max()), int(tiles.cols.size[cols].max())
        full_rows = tiles.rows.size[rows, None] > np.arange(height)
        full_cols = tiles.cols.size[cols, None] > np.arange(width)
        valid = None
        if not (full_rows.all() and full_cols.all()):
            valid = full_rows[:, :, None] & full_cols[:, None, :]
        maps = batch_maps[group[index[0]]]
        yield TileBatch(
            np.array([k for k in range(maps.bit_length()) if maps >> k & 1], np.intp),
            rows,
            cols,
            tiles.rows.pixels(rows, height),
            tiles.cols.pixels(cols, width),
            valid,
        )


def first_max(values: np.ndarray, carry: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """``argmax(values, axis=0)`` (first on ties) and the maximum, one pass per row; with
    ``carry`` (same shape as ``values``), also ``carry`` at the argmax.

    numpy's argmax over a leading axis is slow; a strict ``>`` keeps the earlier row on ties.
    """
    best = values[0].copy()
    index = np.zeros(best.shape, np.uint16)
    carried = None if carry is None else carry[0].copy()
    for j in range(1, len(values)):
        better = values[j] > best
        np.copyto(index, j, where=better)
        np.copyto(best, values[j], where=better)
        if carried is not None:
            np.copyto(carried, carry[j], where=better)
    return (index, best) if carried is None else (index, carried)


def tile_sums(codes: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    """(n,) int64 pixels per code 1..n over decided tiles (code 0 is dropped)."""
    return np.bincount(codes.ravel(), counts.ravel(), minlength=n + 1)[1:].astype(np.int64)


def paint_instances_tiled(
    grids: np.ndarray,
    bounds: TileBounds,
    tiles: TileGrid,
    width: int,
    height: int,
    threshold: np.float32,
) -> tuple[TiledRaster, np.ndarray, np.ndarray]:
    """``paint_instances`` by tiles: slot codes (first grid in order with sample > T), areas and
    inclusive boxes (x0, y0, x1, y1), (N, 4) int64 (meaningless where the area is 0).

    A tile is decided when the first grid that may exceed T exceeds it everywhere (or none may);
    otherwise its pixels sample the grids that may exceed T up to the first that surely does.
    """
    n = len(grids)
    box = np.tile(np.array([width, height, -1, -1], np.int64), (n, 1))
    if n == 0:
        return TiledRaster(tiles, np.zeros(tiles.shape, np.intp)), np.zeros(0, np.int64), box
    above, maybe = bounds.above(threshold), bounds.maybe_above(threshold)
    first = maybe.argmax(axis=0)
    any_maybe = maybe.any(axis=0)
    decided_on = any_maybe & np.take_along_axis(above, first[None], axis=0)[0]
    undecided = any_maybe & ~decided_on
    codes = np.where(decided_on, first + 1, 0)
    area = tile_sums(codes, tiles.pixel_counts(), n)
    tile_r, tile_c = np.nonzero(codes)
    slot = codes[tile_r, tile_c] - 1
    rows, cols = tiles.rows, tiles.cols
    np.minimum.at(box[:, 0], slot, cols.start[tile_c])
    np.minimum.at(box[:, 1], slot, rows.start[tile_r])
    np.maximum.at(box[:, 2], slot, cols.start[tile_c] + cols.size[tile_c] - 1)
    np.maximum.at(box[:, 3], slot, rows.start[tile_r] + rows.size[tile_r] - 1)
    first_above = np.where(above.any(axis=0), above.argmax(axis=0), n)
    needed = maybe & (np.arange(n)[:, None, None] <= first_above)
    tiled = TiledRaster(tiles, codes)
    for batch in tile_batches(tiles, undecided, needed):
        hit = batch.sample(grids, tiles) > threshold
        local = np.zeros(hit.shape[1:], np.uint16)
        for j in range(len(batch.members) - 1, -1, -1):
            np.copyto(local, j + 1, where=hit[j])
        tiled.pixels.append((batch.flat_index(width), batch.code_lut()[local]))
        if batch.valid is not None:
            local *= batch.valid
        area[batch.members] += np.bincount(local.ravel(), minlength=len(hit) + 1)[1:]
        for j, q in enumerate(batch.members):
            mine = local == j + 1
            ys = batch.ys[mine.any(axis=2)]
            if len(ys):
                xs = batch.xs[mine.any(axis=1)]
                box[q, :2] = np.minimum(box[q, :2], [xs.min(), ys.min()])
                box[q, 2:] = np.maximum(box[q, 2:], [xs.max(), ys.max()])
    return tiled, area, box


def panoptic_slots_tiled(
    grids: np.ndarray,
    bounds: TileBounds,
    scores: np.ndarray,
    tiles: TileGrid,
    width: int,
    threshold: np.float32,
) -> tuple[TiledRaster, np.ndarray, np.ndarray, np.ndarray]:
    """``panoptic_slots`` by tiles: slot codes and the (P,) int64 ``wins``, ``orig``, ``seg``.

    A tile is decided when one query can win it and every kept query is above or below T on
    all of it; otherwise its pixels sample the candidates and the queries that straddle T.
    """
    n = len(grids)
    zeros = np.zeros(n, np.int64)
    if n == 0:
        return TiledRaster(tiles, np.zeros(tiles.shape, np.intp)), zeros, zeros, zeros.copy()
    above = bounds.above(threshold)
    straddle = bounds.maybe_above(threshold) & ~above
    candidate = panoptic_candidates(bounds, scores)
    winner = candidate.argmax(axis=0)
    undecided = (candidate.sum(axis=0) > 1) | straddle.any(axis=0)
    needed = candidate | straddle
    counts = tiles.pixel_counts()
    decided = ~undecided
    winner_on = np.take_along_axis(above, winner[None], axis=0)[0]
    codes = np.where(decided & winner_on, winner + 1, 0)
    wins = np.bincount(winner[decided], counts[decided], minlength=n).astype(np.int64)
    seg = tile_sums(codes, counts, n)
    orig = (counts * above).sum(axis=(1, 2))  # plus per-pixel counts in straddled tiles
    weights = scores.astype(np.float32)[:, None, None, None]
    tiled = TiledRaster(tiles, codes)
    for batch in tile_batches(tiles, undecided, needed):
        up = batch.sample(grids, tiles)
        on = up > threshold
        u = len(batch.members)
        local, won = np.zeros(up.shape[1:], np.uint16), on[0]
        if u > 1:
            local, won = first_max(weights[batch.members] * sigmoid(up), on)
        slot = local + 1
        slot *= won
        tiled.pixels.append((batch.flat_index(width), batch.code_lut()[slot]))
        on &= straddle[batch.members][:, batch.tile_rows, batch.tile_cols, None, None]
        if batch.valid is not None:
            on &= batch.valid
            slot *= batch.valid
        orig[batch.members] += np.count_nonzero(on.reshape(u, -1), axis=1)
        wins[batch.members] += batch.count(local, u)
        seg[batch.members] += np.bincount(slot.ravel(), minlength=u + 1)[1:]
    return tiled, wins, orig, seg


def semantic_codes_tiled(maps: np.ndarray, tiles: TileGrid, width: int) -> TiledRaster:
    """Codes ``c* + 1`` of ``argmax_c S_up[c]`` (first on ties), 0 where ``S_up[c*] < 0.05``.

    A tile is decided when one class can win it and clears the floor everywhere or nowhere.
    """
    bounds = TileBounds.of(maps, tiles)
    candidate = semantic_candidates(bounds)
    best = candidate.argmax(axis=0)
    best_lower = np.take_along_axis(bounds.lower, best[None], axis=0)[0]
    solid = (candidate.sum(axis=0) == 1) & (best_lower >= SEMANTIC_VOID_FLOOR)
    void = bounds.upper.max(axis=0, initial=-np.inf) < SEMANTIC_VOID_FLOOR
    undecided = ~(solid | void)
    tiled = TiledRaster(tiles, np.where(solid, best + 1, 0))
    for batch in tile_batches(tiles, undecided, candidate):
        local, top = first_max(batch.sample(maps, tiles))
        local += 1
        local *= top >= SEMANTIC_VOID_FLOOR
        tiled.pixels.append((batch.flat_index(width), batch.code_lut()[local]))
    return tiled


def fast_instances(
    frame: RuleInputs, selection: InstanceSelection, tiles: TileGrid, bounds: TileBounds
) -> tuple[Instances, np.ndarray]:
    """Rule 3 (``instance_inference``) with tiled painting; ``bounds`` of the selected grids."""
    meta = frame.meta
    tiled, area, box = paint_instances_tiled(
        frame.mask_logits[selection.query], bounds, tiles, meta.src_w, meta.src_h, frame.threshold
    )
    lut, keep = drop_empty(area)
    return instances_table(selection, frame.labels, area, box, keep), tiled.compose(lut)


def fast_panoptic(
    frame: RuleInputs, selection: PanopticSelection, tiles: TileGrid, bounds: TileBounds
) -> tuple[Segments, np.ndarray]:
    """Rule 4 (``panoptic_inference``) with tiled winners; ``bounds`` of the selected grids."""
    tiled, wins, orig, seg = panoptic_slots_tiled(
        frame.mask_logits[selection.query],
        bounds,
        selection.score,
        tiles,
        frame.meta.src_w,
        frame.threshold,
    )
    lut, segments = finalize_panoptic(
        selection, frame.labels, wins, orig, seg, frame.options.overlap_threshold
    )
    return segments, tiled.compose(lut)


def fast_semantic(frame: RuleInputs, tiles: TileGrid) -> np.ndarray:
    """Rule 5 (``semantic_inference``) with tiled argmax."""
    maps = semantic_lowres(frame)
    lut = np.append(0, frame.labels.id_array).astype(semantic_dtype(frame.labels))
    return semantic_codes_tiled(maps, tiles, frame.meta.src_w).compose(lut)


def fast_postprocess(
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
    *,
    tile: int = TILE,
) -> FrameResult:
    """``reference.postprocess`` with tile culling: the same FrameResult, bit for bit, faster.

    ``tile`` bounds the tile side in camera pixels; results do not depend on it.
    """
    frame = RuleInputs.of(raw, meta, labels, options)
    tiles = TileGrid.cached(meta, frame.stride, *frame.grid_shape, tile)
    instance = select_instances(frame) if outputs.instance else None
    panoptic = panoptic_selection(frame) if outputs.panoptic else None
    no_queries = np.zeros(0, np.int64)
    queries = np.union1d(
        no_queries if instance is None else instance.query,
        no_queries if panoptic is None else panoptic.query,
    )
    bounds = TileBounds.of(frame.mask_logits[queries], tiles)  # once for the queries of both rules
    result = FrameResult(meta=meta)
    if instance is not None:
        result.instances, result.instance_raster = fast_instances(
            frame, instance, tiles, bounds.take(np.searchsorted(queries, instance.query))
        )
    if panoptic is not None:
        result.segments, result.panoptic_raster = fast_panoptic(
            frame, panoptic, tiles, bounds.take(np.searchsorted(queries, panoptic.query))
        )
    if outputs.semantic:
        result.semantic_raster = fast_semantic(frame, tiles)
    return result
