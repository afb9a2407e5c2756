"""Fast CPU post-processing: the reference's results, with per-pixel work only where it matters.

The camera frame is cut into 16x16 tiles (``tiles.py``). For each output, the exact per-tile
bounds decide most tiles outright (one query wins everywhere and is above or below T everywhere,
one class wins and clears the void floor or not); those tiles are filled with one value. Only the
remaining tiles are sampled per pixel, and only for the masks that can change the answer there:
each (map, tile) pair once (``TileSamples``). The per-pixel arithmetic is the reference's
(``Resampler.sample``, ``sigmoid``), so the rasters and tables are bit-identical to
``reference.postprocess``, which stays the specification and the test oracle.

On a host with more than one CPU the semantic and instance rasters are made on the helper
thread (``helper.py``) while this one makes the panoptic raster, whose per-pixel work the two
threads then share by tile rows; the results do not depend on it.
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
from . import compiled
from .frame import RuleInputs
from .helper import beside
from .instance import InstanceSelection, drop_small, instances_table, select_instances
from .panoptic import PanopticSelection, finalize_panoptic, panoptic_selection
from .resample import sigmoid, softmax
from .semantic import SEMANTIC_VOID_FLOOR, semantic_dtype, semantic_lowres
from .tiles import TILE, TileBounds, TileGrid, panoptic_candidates, semantic_candidates

#: Most float32 samples in one block of sampled tiles (1 MiB): bounds memory at any camera size
#: and keeps a block's temporaries in cache; results do not depend on it.
BLOCK_SAMPLES = 1 << 18

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
        # One extra camera row takes the writes of tile padding (offset H * W, flat_index).
        padded = self.tiles.expand(lut[self.codes], extra_row=True)
        flat = padded.reshape(-1)
        for index, codes in self.pixels:
            flat[index] = lut[codes]
        return padded[:-1]

    def add_pixels(self, block: TileSamples, codes: np.ndarray) -> None:
        """Per-pixel codes (t, a, b) of a block's tiles (padding goes past the raster)."""
        self.pixels.append((self.tiles.flat_index(block.tile_rows, block.tile_cols), codes))


@dataclass(frozen=True)
class TileSamples:
    """Samples of the maps each of some tiles needs, as (map, tile) pairs in *slots*.

    Tiles are ordered by how many maps they need, most first; slot j holds the j-th map
    (ascending) of every tile that needs more than j maps, and those tiles come first in that
    order. A per-pixel rule is then one numpy pass per slot over a prefix of the tiles, with no
    padding pairs. Tiles are padded to the largest with NaN samples, which are never above a
    threshold nor better than anything, so padding pixels drop out of every rule.
    """

    tile_rows: np.ndarray  # (t,) tile row of each tile
    tile_cols: np.ndarray  # (t,) tile column of each tile
    pair_tile: np.ndarray  # (p,) position of each pair's tile in tile_rows/tile_cols
    maps: np.ndarray  # (p,) map index of each pair
    stops: list[int]  # slot j is pairs stops[j]..stops[j + 1]
    values: np.ndarray  # (p, a, b) float32 samples, NaN at padding

    def slot(self, array: np.ndarray, j: int) -> np.ndarray:
        """Slot j's rows of a (p, ...) per-pair array."""
        return array[self.stops[j] : self.stops[j + 1]]

    def first(self, mask: np.ndarray, none: int) -> np.ndarray:
        """(t, a, b) lowest map whose pair is true at the pixel, ``none`` where none is.

        Unsigned, the smallest type that holds ``none + 1`` (less memory traffic per pass).
        """
        maps = self.maps.astype(np.min_scalar_type(none + 1))
        out = np.full((len(self.tile_rows), *mask.shape[1:]), none, maps.dtype)
        for j in range(len(self.stops) - 2, -1, -1):
            hit = self.slot(mask, j)
            np.copyto(out[: len(hit)], self.slot(maps, j)[:, None, None], where=hit)
        return out

    def first_max(
        self, values: np.ndarray, none: int, carry: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(t, a, b) map of the first pair at the tile's maximum at the pixel (``none`` where
        all are NaN or -inf; type as in ``first``) and the maximum, or with ``carry``
        ((p, a, b) bool) its value there (False at ``none``).

        Slots are visited in map order and a later one takes over only when strictly greater,
        so ties keep the lower map, like ``argmax``.
        """
        maps = self.maps.astype(np.min_scalar_type(none + 1))
        shape = (len(self.tile_rows), *values.shape[1:])
        best = np.full(shape, -np.inf, np.float32)
        index = np.full(shape, none, maps.dtype)
        carried = None if carry is None else np.zeros(shape, bool)
        for j in range(len(self.stops) - 1):
            value = self.slot(values, j)
            n = len(value)
            better = value > best[:n]
            np.copyto(index[:n], self.slot(maps, j)[:, None, None], where=better)
            np.copyto(best[:n], value, where=better)
            if carried is not None:
                np.copyto(carried[:n], self.slot(carry, j), where=better)
        return index, (best if carried is None else carried)


def sample_needed(grids: np.ndarray, tiles: TileGrid, needed: np.ndarray) -> Iterator[TileSamples]:
    """The (map, tile) pairs of ``needed`` ((N, R, C) bool) sampled at every tile pixel, in
    blocks of whole tiles of at most BLOCK_SAMPLES samples (a larger tile is a block alone)."""
    count = needed.sum(axis=0, dtype=np.intp).ravel()  # maps per tile
    tile = np.flatnonzero(count)
    if len(tile) == 0:
        return
    count = count[tile]
    # 1-D nonzero of the tile-major copy: multi-dimensional nonzero is ~10x slower.
    maps = np.flatnonzero(needed.reshape(len(needed), -1)[:, tile].T) % len(needed)
    bounds = np.zeros(len(tile) + 1, np.intp)  # pairs of tile i: bounds[i]..bounds[i + 1]
    np.cumsum(count, out=bounds[1:])
    tile_rows, tile_cols = np.divmod(tile, needed.shape[2])
    block_pairs = max(1, BLOCK_SAMPLES // tiles.padded_samples)
    first = 0
    while first < len(tile):
        stop = int(np.searchsorted(bounds, bounds[first] + block_pairs, side="right")) - 1
        stop = max(stop, first + 1)
        block_count = count[first:stop]
        order = np.argsort(-block_count, kind="stable")
        # per_slot[j]: tiles needing more than j maps (the first per_slot[j] in ``order``)
        per_slot = len(order) - np.cumsum(np.bincount(block_count))[:-1]
        offsets = np.cumsum(per_slot) - per_slot
        pair_tile = np.arange(int(bounds[stop] - bounds[first])) - np.repeat(offsets, per_slot)
        # the j-th map of a tile is pair bounds[tile] + j of the tile-major list
        pairs = bounds[first:stop][order][pair_tile] + np.repeat(np.arange(len(per_slot)), per_slot)
        block_rows, block_cols = tile_rows[first:stop][order], tile_cols[first:stop][order]
        slot_maps = maps[pairs]
        yield TileSamples(
            block_rows,
            block_cols,
            pair_tile,
            slot_maps,
            [*offsets.tolist(), len(pairs)],
            tiles.sample_pairs(grids, slot_maps, block_rows[pair_tile], block_cols[pair_tile]),
        )
        first = stop


def tile_bounds(grids: np.ndarray, tiles: TileGrid) -> TileBounds:
    """``TileBounds.of``, by the compiled loop where numba is installed (the same bounds)."""
    if compiled.AVAILABLE:
        return compiled.tile_bounds_compiled(grids, tiles)
    return TileBounds.of(grids, tiles)


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
    box = np.empty((n, 4), np.int64)
    box[:] = (width, height, -1, -1)
    if n == 0:
        return TiledRaster(tiles, np.zeros(tiles.shape, np.intp)), np.zeros(0, np.int64), box
    above, maybe = bounds.above(threshold), bounds.maybe_above(threshold)
    first = maybe.argmax(axis=0)
    any_maybe = maybe.any(axis=0)
    first_above = np.where(above.any(axis=0), above.argmax(axis=0), n)
    decided_on = first_above == first  # the first grid that may exceed T surely does (n: none)
    undecided = any_maybe & ~decided_on
    codes = np.where(decided_on, first + 1, 0)
    area = tile_sums(codes, tiles.pixel_counts, n)
    tile_r, tile_c = np.nonzero(codes)
    slot = codes[tile_r, tile_c] - 1
    rows, cols = tiles.rows, tiles.cols
    np.minimum.at(box[:, 0], slot, cols.start[tile_c])
    np.minimum.at(box[:, 1], slot, rows.start[tile_r])
    np.maximum.at(box[:, 2], slot, cols.start[tile_c] + cols.size[tile_c] - 1)
    np.maximum.at(box[:, 3], slot, rows.start[tile_r] + rows.size[tile_r] - 1)
    needed = maybe & (np.arange(n)[:, None, None] <= first_above) & undecided
    tiled = TiledRaster(tiles, codes)
    code_of = np.append(np.arange(1, n + 1), 0)  # slot n (no grid above T) -> code 0
    for block in sample_needed(grids, tiles, needed):
        slot = block.first(block.values > threshold, n)
        tiled.add_pixels(block, code_of[slot])
        area += np.bincount(slot.ravel(), minlength=n + 1)[:n]
        # Each pair's box: rows and columns of its tile where its map is the first hit.
        mine = slot[block.pair_tile] == block.maps[:, None, None]
        ys = np.take(rows.padded_pixel, block.tile_rows[block.pair_tile], axis=1)
        xs = np.take(cols.padded_pixel, block.tile_cols[block.pair_tile], axis=1)
        hit_rows, hit_cols = mine.any(axis=2).T, mine.any(axis=1).T
        np.minimum.at(box[:, 0], block.maps, np.where(hit_cols, xs, width).min(axis=0))
        np.minimum.at(box[:, 1], block.maps, np.where(hit_rows, ys, height).min(axis=0))
        np.maximum.at(box[:, 2], block.maps, np.where(hit_cols, xs, -1).max(axis=0))
        np.maximum.at(box[:, 3], block.maps, np.where(hit_rows, ys, -1).max(axis=0))
    return tiled, area, box


def panoptic_slots_tiled(
    grids: np.ndarray,
    bounds: TileBounds,
    scores: np.ndarray,
    tiles: TileGrid,
    width: int,
    threshold: np.float32,
) -> tuple[TiledRaster | compiled.CompiledRaster, np.ndarray, np.ndarray, np.ndarray]:
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
    counts = tiles.pixel_counts
    decided = ~undecided
    winner_on = (above & candidate).any(axis=0)  # in decided tiles the winner is the candidate
    codes = np.where(decided & winner_on, winner + 1, 0)
    wins = np.bincount(winner[decided], counts[decided], minlength=n).astype(np.int64)
    seg = tile_sums(codes, counts, n)
    orig = (counts * above).sum(axis=(1, 2))  # plus per-pixel counts in straddled tiles
    needed = (candidate | straddle) & undecided
    if compiled.AVAILABLE:
        tiled = compiled.panoptic_pixels_compiled(
            grids, needed, candidate, straddle, scores, tiles, threshold, codes, (wins, orig, seg)
        )
        return tiled, wins, orig, seg
    weights = scores.astype(np.float32)[:, None, None]
    tiled = TiledRaster(tiles, codes)
    for block in sample_needed(grids, tiles, needed):
        pairs = block.maps, block.tile_rows[block.pair_tile], block.tile_cols[block.pair_tile]
        on = block.values > threshold
        weighted = weights[block.maps] * sigmoid(block.values)
        weighted[~candidate[pairs]] = -np.inf  # queries that cannot win take no part
        local, won = block.first_max(weighted, n, on)  # n, False at padding
        slot = local + 1
        slot *= won
        tiled.add_pixels(block, slot)
        straddled = np.count_nonzero(on.reshape(len(on), -1), axis=1) * straddle[pairs]
        orig += np.bincount(block.maps, straddled, minlength=n).astype(np.int64)
        wins += np.bincount(local.ravel(), minlength=n + 1)[:n]
        seg += np.bincount(slot.ravel(), minlength=n + 1)[1:]
    return tiled, wins, orig, seg


def semantic_codes_tiled(
    maps: np.ndarray, tiles: TileGrid
) -> TiledRaster | compiled.CompiledRaster:
    """Codes ``c* + 1`` of ``argmax_c S_up[c]`` (first on ties), 0 where ``S_up[c*] < 0.05``.

    A tile is decided when one class can win it and clears the floor everywhere or nowhere.
    """
    bounds = tile_bounds(maps, tiles)
    candidate = semantic_candidates(bounds)
    best = candidate.argmax(axis=0)
    one = candidate.sum(axis=0) == 1
    solid = one & (candidate & (bounds.lower >= SEMANTIC_VOID_FLOOR)).any(axis=0)
    void = bounds.upper.max(axis=0, initial=-np.inf) < SEMANTIC_VOID_FLOOR
    needed = candidate & ~(solid | void)
    codes = np.where(solid, best + 1, 0)
    if compiled.AVAILABLE:
        return compiled.semantic_pixels_compiled(maps, needed, SEMANTIC_VOID_FLOOR, tiles, codes)
    tiled = TiledRaster(tiles, codes)
    for block in sample_needed(maps, tiles, needed):
        local, top = block.first_max(block.values, len(maps))
        local += 1
        local *= top >= SEMANTIC_VOID_FLOOR  # -inf at padding: code 0
        tiled.add_pixels(block, local)
    return tiled


def fast_instances(
    frame: RuleInputs, selection: InstanceSelection, tiles: TileGrid, bounds: TileBounds
) -> tuple[Instances, np.ndarray]:
    """Rule 3 (``instance_inference``) with tiled painting; ``bounds`` of the selected grids."""
    meta = frame.meta
    paint = compiled.paint_instances_compiled if compiled.AVAILABLE else paint_instances_tiled
    tiled, area, box = paint(
        frame.mask_logits[selection.query], bounds, tiles, meta.src_w, meta.src_h, frame.threshold
    )
    lut, keep = drop_small(area, frame.options.min_area)
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
        selection, frame.labels, wins, orig, seg, frame.options.overlap_threshold,
        frame.options.min_area,
    )  # fmt: skip
    return segments, tiled.compose(lut)


def fast_semantic(frame: RuleInputs, tiles: TileGrid) -> np.ndarray:
    """Rule 5 (``semantic_inference``) with tiled argmax."""
    if compiled.AVAILABLE:
        maps = compiled.class_maps_compiled(softmax(frame.class_logits)[:, :-1], frame.mask_probs)
    else:
        maps = semantic_lowres(frame)
    lut = np.append(0, frame.labels.id_array).astype(semantic_dtype(frame.labels))
    return semantic_codes_tiled(maps, tiles).compose(lut)


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
    semantic = None
    if outputs.semantic:
        frame.mask_probs  # noqa: B018 (computed here once, not raced for by both threads)
        semantic = beside(fast_semantic, frame, tiles)
    instance = select_instances(frame) if outputs.instance else None
    panoptic = panoptic_selection(frame) if outputs.panoptic else None
    no_queries = np.zeros(0, np.int64)
    queries = np.union1d(
        no_queries if instance is None else instance.query,
        no_queries if panoptic is None else panoptic.query,
    )
    bounds = tile_bounds(frame.mask_logits[queries], tiles)  # once for both rules' queries
    painted = None
    if instance is not None:
        instance_bounds = bounds.take(np.searchsorted(queries, instance.query))
        painted = beside(fast_instances, frame, instance, tiles, instance_bounds)
    result = FrameResult(meta=meta)
    if panoptic is not None:
        result.segments, result.panoptic_raster = fast_panoptic(
            frame, panoptic, tiles, bounds.take(np.searchsorted(queries, panoptic.query))
        )
    if painted is not None:
        result.instances, result.instance_raster = painted.result()
    if semantic is not None:
        result.semantic_raster = semantic.result()
    return result
