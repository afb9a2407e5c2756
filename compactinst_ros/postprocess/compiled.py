"""Compiled per-pixel loops of the tiled fast path (``fast.py``), when numba is installed.

The tile decisions stay in numpy (``tiles.py``); these loops replace what numpy does per pixel:
sampling the masks a tile needs, the per-pixel rule, and writing the camera raster. Each
camera pixel is visited once per output, with no padded blocks and no temporary full-frame
arrays, which is where the numpy fast path spends most of a 1080p frame.

Bit-identity with ``reference.postprocess`` holds because every float operation is the
reference's own, in its order, on float32 (numba compiles without fast-math, so nothing is
fused or reordered), and the one transcendental, the panoptic sigmoid, is left to numpy:
the samples it needs are gathered into one buffer, numpy takes the sigmoid, the rule then reads
it. Install with the ``fast`` extra; without numba the numpy loops run, with the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import jit
from ..raster_memory import message_raster
from .helper import Pieces, shared
from .resample import sigmoid
from .tiles import AxisTiles, TileBounds, TileGrid, cull_margin

#: True where numba is installed and the compiled loops run (tests turn them off here).
AVAILABLE = jit.AVAILABLE

#: Tile code of a tile whose pixels carry their own codes (in the pixel-code buffer).
PER_PIXEL = -1
#: Tile rows per piece of the panoptic per-pixel work (68 tile rows at 1080p: 9 pieces), small
#: enough that the two threads finish close together, large enough that a piece's Python costs
#: (~40 us) stay small beside its loops.
PIECE_ROWS = 8


def _axis(axis: AxisTiles) -> tuple[np.ndarray, ...]:
    """(start, size, texel0, texel1, weight) of one axis, as the loops read them."""
    return axis.start, axis.size, axis.texel0, axis.texel1, axis.weight


def _geometry(tiles: TileGrid) -> tuple[np.ndarray, ...]:
    """Both axes' arrays, rows first."""
    return (*_axis(tiles.rows), *_axis(tiles.cols))


def _column_blends(grid, i0, i1, j0, j1, wy):
    """Rule 1's vertical blends ``top + (bottom - top) * wy`` at a tile's two texel columns; a
    pixel's sample is then ``vert0 + (vert1 - vert0) * wx``, the reference's order."""
    top = grid[i0, j0]
    vert0 = top + (grid[i1, j0] - top) * wy
    top = grid[i0, j1]
    return vert0, top + (grid[i1, j1] - top) * wy


_column_blends_jit = jit.njit_cached(_column_blends)


def _needed_maps(needed, r, c, out):
    """How many maps tile (r, c) needs (``needed``: (N, R, C) bool); writes them, ascending,
    to the front of ``out``."""
    m = 0
    for k in range(needed.shape[0]):
        if needed[k, r, c]:
            out[m] = k
            m += 1
    return m


_needed_maps_jit = jit.njit_cached(_needed_maps)


def _compose(tile_code, pixel_code, lut, out, rs, rn, cs, cn):
    """``out`` = lut[code] at every pixel: the tile's code, or the tile's next pixel code where
    the tile is PER_PIXEL (pixel codes in tile order, rows then columns inside a tile).

    Per row of tiles, the decided tiles' values are laid out once as a camera row, copied to
    each of its pixel rows, and the PER_PIXEL tiles are written over them: the stores stream.
    """
    rows, cols = tile_code.shape
    line = np.empty(out.shape[1], out.dtype)
    pos = 0
    for r in range(rows):
        for c in range(cols):
            value = lut[max(tile_code[r, c], 0)]
            for x in range(cs[c], cs[c] + cn[c]):
                line[x] = value
        for dy in range(rn[r]):
            target = out[rs[r] + dy]
            for x in range(line.shape[0]):  # explicit: numba's row assignment is ~3x slower
                target[x] = line[x]
        for c in range(cols):
            if tile_code[r, c] >= 0:
                continue
            x0, width = cs[c], cn[c]
            for dy in range(rn[r]):
                target = out[rs[r] + dy, x0 : x0 + width]
                for dx in range(width):
                    target[dx] = lut[pixel_code[pos + dx]]
                pos += width


def _paint_instances(
    grids, lower, upper, threshold, tile_code, pixel_code, area, box,
    rs, rn, r0, r1, rw, cs, cn, c0, c1, cw,
):  # fmt: skip
    """Rule 3's slots by tiles: a tile is decided when the first grid that may exceed T surely
    does (or none may); otherwise each pixel takes the first of those grids whose sample > T.

    Fills ``tile_code`` (slot code or PER_PIXEL), ``pixel_code``, ``area`` and the inclusive
    ``box`` (x0, y0, x1, y1) per slot, which the caller initialises.
    """
    n = grids.shape[0]
    maps = np.empty(n, np.intp)
    left = np.empty(n, np.float32)
    spread = np.empty(n, np.float32)
    pos = 0
    for r in range(lower.shape[1]):
        i0, i1 = r0[r], r1[r]
        for c in range(lower.shape[2]):
            j0, j1 = c0[c], c1[c]
            m = 0
            surely = -1
            for k in range(n):
                if upper[k, r, c] > threshold:
                    maps[m] = k
                    m += 1
                    if lower[k, r, c] > threshold:
                        surely = k
                        break
            if m == 0 or maps[0] == surely:
                code = 0 if m == 0 else surely + 1
                tile_code[r, c] = code
                if code:
                    area[surely] += rn[r] * cn[c]
                    box[surely, 0] = min(box[surely, 0], cs[c])
                    box[surely, 1] = min(box[surely, 1], rs[r])
                    box[surely, 2] = max(box[surely, 2], cs[c] + cn[c] - 1)
                    box[surely, 3] = max(box[surely, 3], rs[r] + rn[r] - 1)
                continue
            tile_code[r, c] = PER_PIXEL
            for y in range(rs[r], rs[r] + rn[r]):
                wy = rw[y]
                for t in range(m):
                    vert0, vert1 = _column_blends_jit(grids[maps[t]], i0, i1, j0, j1, wy)
                    left[t] = vert0
                    spread[t] = vert1 - vert0
                for x in range(cs[c], cs[c] + cn[c]):
                    wx = cw[x]
                    code = 0
                    for t in range(m):
                        if left[t] + spread[t] * wx > threshold:
                            code = maps[t] + 1
                            break
                    pixel_code[pos] = code
                    pos += 1
                    if code:
                        k = code - 1
                        area[k] += 1
                        box[k, 0] = min(box[k, 0], x)
                        box[k, 1] = min(box[k, 1], y)
                        box[k, 2] = max(box[k, 2], x)
                        box[k, 3] = max(box[k, 3], y)


def _tile_bounds(grids, r0, r1, wy, c0, c1, wx, margin, lower, upper):
    """``tiles.TileBounds.of`` as one pass per map and tile row: the same float32 operations in
    the same order (corner blends, their spread times each end weight, min/max, the margin).
    ``wy``/``wx``: (R, 2)/(C, 2) end weights; fills ``lower`` and ``upper`` (N, R, C).

    A NaN texel makes its map's margin NaN (``cull_margin``), so all its bounds are NaN here as
    in numpy, whichever way min and max treat NaN; the margin also erases the sign of a zero.
    """
    width = grids.shape[2]
    first = np.empty(width, np.float32)  # the tile row's first camera row, sampled at texels
    last = np.empty(width, np.float32)
    for k in range(grids.shape[0]):
        grid, pad = grids[k], margin[k]
        for r in range(r0.shape[0]):
            i0, i1, w_first, w_last = r0[r], r1[r], wy[r, 0], wy[r, 1]
            for j in range(width):
                top = grid[i0, j]
                step = grid[i1, j] - top
                first[j] = step * w_first + top
                last[j] = step * w_last + top
            for c in range(c0.shape[0]):
                j0, j1, x_first, x_last = c0[c], c1[c], wx[c, 0], wx[c, 1]
                left = first[j0]
                spread = first[j1] - left
                a, b = spread * x_first, spread * x_last
                low, high = min(a, b) + left, max(a, b) + left
                left = last[j0]
                spread = last[j1] - left
                a, b = spread * x_first, spread * x_last
                lower[k, r, c] = min(low, min(a, b) + left) - pad
                upper[k, r, c] = max(high, max(a, b) + left) + pad


def _class_maps(weights, probs, maps):
    """``semantic.class_maps`` as loops: ``maps[c] += weights[c, q] * probs[q]`` in query order,
    one rounded multiply and one rounded add per term, as numpy's two passes do."""
    for c in range(maps.shape[0]):
        target = maps[c]
        for q in range(probs.shape[0]):
            w = weights[c, q]
            source = probs[q]
            for i in range(target.shape[0]):
                target[i] = target[i] + w * source[i]


def _sample_needed(grids, needed, samples, first, stop, rs, rn, r0, r1, rw, cs, cn, c0, c1, cw):
    """Samples of the ``needed`` ((N, R, C) bool) maps at every pixel of their tiles in tile rows
    ``first`` to ``stop``, in tile order, then rows, columns, and ascending maps at a pixel."""
    n = grids.shape[0]
    maps = np.empty(n, np.intp)
    pos = 0
    for r in range(first, stop):
        i0, i1 = r0[r], r1[r]
        for c in range(needed.shape[2]):
            m = _needed_maps_jit(needed, r, c, maps)
            if m == 0:
                continue
            j0, j1 = c0[c], c1[c]
            for y in range(rs[r], rs[r] + rn[r]):
                wy = rw[y]
                for x in range(cs[c], cs[c] + cn[c]):
                    wx = cw[x]
                    for t in range(m):
                        vert0, vert1 = _column_blends_jit(grids[maps[t]], i0, i1, j0, j1, wy)
                        samples[pos] = vert0 + (vert1 - vert0) * wx
                        pos += 1


def _panoptic_pixels(
    needed, candidate, straddle, samples, probs, weights, threshold, tile_code, pixel_code,
    out, wins, orig, seg, first, stop, rn, cn,
):  # fmt: skip
    """Rule 4 at the pixels of the tiles that need it in tile rows ``first`` to ``stop``, from
    ``_sample_needed``'s samples of those rows and their sigmoids: the winner ``argmax score *
    sigmoid`` among the candidates (first on ties), its slot where its own logit > T (into
    ``pixel_code`` from ``out``), and the per-query counts of those pixels."""
    n = needed.shape[0]
    maps = np.empty(n, np.intp)
    pos = 0
    for r in range(first, stop):
        for c in range(needed.shape[2]):
            m = _needed_maps_jit(needed, r, c, maps)
            if m == 0:
                continue
            tile_code[r, c] = PER_PIXEL
            for _ in range(rn[r] * cn[c]):
                best = -np.inf
                winner = n
                won = False
                for t in range(m):
                    k = maps[t]
                    on = samples[pos] > threshold
                    if straddle[k, r, c] and on:
                        orig[k] += 1
                    if candidate[k, r, c]:
                        value = weights[k] * probs[pos]
                        if value > best:
                            best = value
                            winner = k
                            won = on
                    pos += 1
                code = winner + 1 if won else 0
                pixel_code[out] = code
                out += 1
                if winner < n:
                    wins[winner] += 1
                if code:
                    seg[winner] += 1


def _semantic_pixels(maps, needed, floor, tile_code, pixel_code, rs, rn, r0, r1, rw, cs, cn, c0,
                     c1, cw):  # fmt: skip
    """Rule 5 at the pixels of the tiles that need it: code ``c + 1`` of the first class map at
    the maximum of the needed maps' samples, 0 where that maximum is below ``floor``."""
    n = maps.shape[0]
    index = np.empty(n, np.intp)
    out = 0
    for r in range(needed.shape[1]):
        i0, i1 = r0[r], r1[r]
        for c in range(needed.shape[2]):
            m = _needed_maps_jit(needed, r, c, index)
            if m == 0:
                continue
            tile_code[r, c] = PER_PIXEL
            j0, j1 = c0[c], c1[c]
            for y in range(rs[r], rs[r] + rn[r]):
                wy = rw[y]
                for x in range(cs[c], cs[c] + cn[c]):
                    wx = cw[x]
                    best = np.float32(-np.inf)
                    winner = 0
                    for t in range(m):
                        vert0, vert1 = _column_blends_jit(maps[index[t]], i0, i1, j0, j1, wy)
                        value = vert0 + (vert1 - vert0) * wx
                        if value > best:
                            best = value
                            winner = index[t] + 1
                    pixel_code[out] = winner if best >= floor else 0
                    out += 1


_compose_jit = jit.njit_cached(_compose)
_tile_bounds_jit = jit.njit_cached(_tile_bounds)
_class_maps_jit = jit.njit_cached(_class_maps)
_paint_instances_jit = jit.njit_cached(_paint_instances)
_sample_needed_jit = jit.njit_cached(_sample_needed)
_panoptic_pixels_jit = jit.njit_cached(_panoptic_pixels)
_semantic_pixels_jit = jit.njit_cached(_semantic_pixels)


@dataclass(frozen=True)
class CompiledRaster:
    """A camera raster of codes, as ``fast.TiledRaster``: one code per tile, or PER_PIXEL and
    then one code per pixel (in tile order, rows then columns inside a tile)."""

    tiles: TileGrid
    tile_code: np.ndarray  # (R, C) intp
    pixel_code: np.ndarray  # (H * W,) codes, the first of them written

    def compose(self, lut: np.ndarray) -> np.ndarray:
        """(H, W) raster of ``lut[code]``, in memory a ROS message takes without a copy."""
        out = message_raster((self.tiles.rows.length, self.tiles.cols.length), lut.dtype)
        rows, cols = self.tiles.rows, self.tiles.cols
        _compose_jit(
            self.tile_code, self.pixel_code, lut, out, rows.start, rows.size, cols.start, cols.size
        )
        return out


def tile_bounds_compiled(grids: np.ndarray, tiles: TileGrid) -> TileBounds:
    """``TileBounds.of(grids, tiles)`` compiled: the same bounds, bit for bit, without numpy's
    (N, R, 2, w) and (N, R, 2, C) temporaries."""
    grids = np.ascontiguousarray(grids, np.float32)
    rows, cols = tiles.rows, tiles.cols
    shape = (len(grids), len(rows), len(cols))
    lower, upper = np.empty(shape, np.float32), np.empty(shape, np.float32)
    _tile_bounds_jit(
        grids, rows.texel0, rows.texel1, rows.end_weights, cols.texel0, cols.texel1,
        cols.end_weights, 2 * cull_margin(grids), lower, upper,
    )  # fmt: skip
    return TileBounds(lower, upper)


def class_maps_compiled(class_probs: np.ndarray, mask_probs: np.ndarray) -> np.ndarray:
    """``semantic.class_maps`` compiled: the same (K, h, w) float32 maps, bit for bit, in one
    pass per class without the GIL (numpy's version is two small calls per query, 200 a frame,
    which a second thread waits on)."""
    q, h, w = mask_probs.shape
    weights = np.ascontiguousarray(class_probs.T, np.float32)  # (K, Q)
    maps = np.zeros((len(weights), h * w), np.float32)
    _class_maps_jit(weights, np.ascontiguousarray(mask_probs, np.float32).reshape(q, h * w), maps)
    return maps.reshape(-1, h, w)


def paint_instances_compiled(
    grids: np.ndarray,
    bounds: TileBounds,
    tiles: TileGrid,
    width: int,
    height: int,
    threshold: np.float32,
) -> tuple[CompiledRaster, np.ndarray, np.ndarray]:
    """``fast.paint_instances_tiled`` compiled: slot codes, (N,) areas, (N, 4) inclusive boxes."""
    n = len(grids)
    tile_code = np.empty(tiles.shape, np.intp)
    pixel_code = np.empty(tiles.raster_size, np.min_scalar_type(n + 1))
    area = np.zeros(n, np.int64)
    box = np.empty((n, 4), np.int64)
    box[:] = (width, height, -1, -1)
    _paint_instances_jit(
        grids,
        bounds.lower,
        bounds.upper,
        threshold,
        tile_code,
        pixel_code,
        area,
        box,
        *_geometry(tiles),
    )
    return CompiledRaster(tiles, tile_code, pixel_code), area, box


def panoptic_pixels_compiled(
    grids: np.ndarray,
    needed: np.ndarray,
    candidate: np.ndarray,
    straddle: np.ndarray,
    scores: np.ndarray,
    tiles: TileGrid,
    threshold: np.float32,
    tile_code: np.ndarray,
    counts: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> CompiledRaster:
    """Rule 4 at the pixels of the ``needed`` tiles: marks them PER_PIXEL in ``tile_code`` (the
    decided tiles' codes) and adds their pixels to ``counts`` (wins, orig, seg).

    The work goes in pieces of PIECE_ROWS tile rows, which this thread and the helper take in
    turn (``helper.shared``). Where a piece's samples and pixel codes go follows from the tiles
    before it, not from who takes it, and the counts are sums: the result is the same either way.
    """
    maps_per_tile = needed.sum(axis=0)
    samples_per_row = (maps_per_tile * tiles.pixel_counts).sum(axis=1)
    pixels_per_row = ((maps_per_tile > 0) * tiles.pixel_counts).sum(axis=1)
    first_pixel = np.concatenate([[0], np.cumsum(pixels_per_row)])
    pixel_code = np.empty(tiles.raster_size, np.min_scalar_type(len(grids) + 1))
    weights = scores.astype(np.float32)
    rows = len(tiles.rows)
    pieces = Pieces((r, min(r + PIECE_ROWS, rows)) for r in range(0, rows, PIECE_ROWS))

    def work() -> tuple[np.ndarray, ...]:
        """Take pieces until none is left; this thread's (wins, orig, seg)."""
        mine = tuple(np.zeros_like(c) for c in counts)
        while (piece := pieces.take()) is not None:
            first, stop = piece
            samples = np.empty(int(samples_per_row[first:stop].sum()), np.float32)
            _sample_needed_jit(grids, needed, samples, first, stop, *_geometry(tiles))
            _panoptic_pixels_jit(
                needed, candidate, straddle, samples, sigmoid(samples), weights, threshold,
                tile_code, pixel_code, first_pixel[first], *mine, first, stop, tiles.rows.size,
                tiles.cols.size,
            )  # fmt: skip
        return mine

    for part in shared(work):
        for total, added in zip(counts, part or (), strict=False):
            total += added
    return CompiledRaster(tiles, tile_code, pixel_code)


def semantic_pixels_compiled(
    maps: np.ndarray, needed: np.ndarray, floor: np.float32, tiles: TileGrid, tile_code: np.ndarray
) -> CompiledRaster:
    """Rule 5 at the pixels of the ``needed`` tiles: marks them PER_PIXEL in ``tile_code`` (the
    decided tiles' codes)."""
    pixel_code = np.empty(tiles.raster_size, np.min_scalar_type(len(maps) + 1))
    _semantic_pixels_jit(maps, needed, floor, tile_code, pixel_code, *_geometry(tiles))
    return CompiledRaster(tiles, tile_code, pixel_code)
