"""Exact per-tile culling: which masks can change the answer inside a tile of camera pixels.

Tiles are cut from *cells*, the runs of camera pixels that read the same two texels per axis
(rule 1's taps), so every pixel of a tile blends the same four texels and only its two weights
vary, monotonically along each axis. The blend is bilinear in the weights, so over a tile it
lies between its values at the tile's four corner pixels; widened by ``cull_margin`` for
float32 rounding, those bounds are exact. From them a tile decides, without sampling:

* threshold state: every pixel of a map is ``> T`` (above) or none can be (not ``maybe``);
* panoptic: a query whose largest possible ``score * sigmoid`` is below another query's
  smallest possible one never wins a pixel of the tile;
* semantic: a class map whose largest possible value is below another's smallest never wins.

The fused CUDA kernels apply the same rules on 16x16 tiles with looser texel-footprint bounds;
the numpy fast path (``postprocess/fast.py``) uses them so that only tiles where the answer can
change get per-pixel work. Every function here works on whole (N, tile rows, tile cols) arrays.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..structures import FrameMeta
from .resample import Resampler, Taps, sigmoid

#: Largest tile side in camera pixels (cells longer than this are split into equal pieces).
TILE = 16


def cull_margin(grids: np.ndarray) -> np.ndarray:
    """(N,) logit margin that covers float rounding of a bilinear blend of each grid's texels.

    Two float32 blends ``a + (b - a) * w`` err by at most ~10 ulp-units (2^-24) of the largest
    texel magnitude M, i.e. < 6e-7 M: ``1e-6 * max|m|`` bounds one blend's error against its
    texels, ``1e-4`` covers small magnitudes.
    """
    peak = np.abs(grids).max(axis=(1, 2), initial=0.0)
    return (np.float32(1e-4) + np.float32(1e-6) * peak).astype(np.float32)


def transposed_outer(
    rows: np.ndarray, cols: np.ndarray, op: np.ufunc, plus: np.ndarray | None = None
) -> np.ndarray:
    """(n, a, b) ``op(rows[i, n], cols[j, n]) (+ plus[i, n])`` for (a, n) ``rows`` and (b, n)
    ``cols``: per tile (or pair) n, an operation between its rows and its columns.

    Computed with n as the last axis, then copied to (n, a, b): numpy broadcasts ~3x faster
    over one long contiguous axis than over tile-sized (8-element) inner axes, copy included.
    ``rows`` and ``cols`` must be C-contiguous (``np.take``, not ``x[:, index]``, which is not).
    """
    out = op(rows[:, None, :], cols[None, :, :])
    if plus is not None:
        out += plus[:, None, :]
    result = np.empty((out.shape[2], out.shape[0], out.shape[1]), out.dtype)
    np.copyto(result, out.transpose(2, 0, 1))
    return result


@dataclass(frozen=True)
class AxisTiles:
    """Tiles along one camera axis: pixel ranges inside one cell, its texels, pixel weights."""

    start: np.ndarray  # (n,) first camera pixel of each tile
    size: np.ndarray  # (n,) pixels in each tile
    texel0: np.ndarray  # (n,) texel idx0 of every pixel of the tile
    texel1: np.ndarray  # (n,) texel idx1 of every pixel of the tile
    weight: np.ndarray  # (length,) float32 weight of idx1 at every camera pixel (rule 1)
    # Pixel j of tile i at [j, i] (tiles last, see transposed_outer), span = largest size:
    padded_pixel: np.ndarray  # (span, n) camera pixel, -1 past the tile's end
    padded_weight: np.ndarray  # (span, n) float32 its weight, NaN past the tile's end

    @classmethod
    def of(cls, taps: Taps, tile: int = TILE) -> AxisTiles:
        """Each run of pixels with the same taps, cut into near-equal pieces.

        Pieces are at most ``tile`` and at most the median cell long, so that the few odd cells
        (clamped borders) do not make tiles of very different sizes.
        """
        idx0, idx1, weight = taps
        cell_start = np.flatnonzero(np.diff(idx0, prepend=-1))
        cell_size = np.diff(cell_start, append=len(idx0))
        target = max(1, min(tile, int(np.median(cell_size))))
        pieces = -(-cell_size // target)
        cell = np.repeat(np.arange(len(cell_start)), pieces)
        piece = np.arange(len(cell)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        lo = cell_start[cell] + piece * cell_size[cell] // pieces[cell]
        hi = cell_start[cell] + (piece + 1) * cell_size[cell] // pieces[cell]
        size = hi - lo
        offset = np.arange(int(size.max()))[:, None]
        inside = offset < size
        padded_pixel = np.where(inside, lo + offset, -1)
        padded_weight = np.where(inside, weight[np.maximum(padded_pixel, 0)], np.float32(np.nan))
        return cls(lo, size, idx0[lo], idx1[lo], weight, padded_pixel, padded_weight)

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def length(self) -> int:
        """Camera pixels along the axis."""
        return int(self.weight.shape[0])

    @functools.cached_property
    def end_weights(self) -> np.ndarray:
        """(n, 2) float32 weights of the first and last pixel of every tile (its corners)."""
        return self.weight[np.stack([self.start, self.start + self.size - 1], axis=1)]


@dataclass(frozen=True)
class TileGrid:
    """The camera frame cut into tiles of one cell each, at most TILE x TILE pixels."""

    rows: AxisTiles
    cols: AxisTiles

    @classmethod
    def of(cls, resampler: Resampler, tile: int = TILE) -> TileGrid:
        """Tiles for ``resampler``'s frame and grid."""
        return cls(AxisTiles.of(resampler.rows_taps, tile), AxisTiles.of(resampler.cols_taps, tile))

    @staticmethod
    @functools.lru_cache(maxsize=8)
    def cached(meta: FrameMeta, stride: int, grid_h: int, grid_w: int, tile: int) -> TileGrid:
        """``of`` for a frame geometry, built once per geometry (a camera keeps its size)."""
        return TileGrid.of(Resampler(meta, stride, grid_h, grid_w), tile)

    @property
    def shape(self) -> tuple[int, int]:
        """(tile rows, tile cols)."""
        return len(self.rows), len(self.cols)

    @functools.cached_property
    def pixel_counts(self) -> np.ndarray:
        """(R, C) int64 camera pixels per tile."""
        return self.rows.size[:, None] * self.cols.size[None, :]

    @property
    def padded_samples(self) -> int:
        """Samples of one map in one tile padded to the largest tile."""
        return len(self.rows.padded_pixel) * len(self.cols.padded_pixel)

    @property
    def raster_size(self) -> int:
        """Camera pixels in the frame (H * W): also the raster offset that padding writes to."""
        return self.rows.length * self.cols.length

    @functools.cached_property
    def padded_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """Raster offsets of ``padded_pixel``: (span, R) rows * W and (span, C) columns.

        Both are ``raster_size`` past a tile's end, so a sum is >= ``raster_size`` exactly at
        padding.
        """
        rows, cols = self.rows.padded_pixel, self.cols.padded_pixel
        padding = self.raster_size
        return (
            np.where(rows >= 0, rows * self.cols.length, padding),
            np.where(cols >= 0, cols, padding),
        )

    def flat_index(self, tile_rows: np.ndarray, tile_cols: np.ndarray) -> np.ndarray:
        """(n, a, b) raster offsets of the padded pixels of tiles (tile_rows, tile_cols).

        Padding pixels get ``raster_size``, one past the raster (a row that ``compose`` drops).
        """
        row_offset, col_offset = self.padded_offsets
        index = transposed_outer(
            np.take(row_offset, tile_rows, axis=1), np.take(col_offset, tile_cols, axis=1), np.add
        )
        return np.minimum(index, self.raster_size, out=index)

    def expand(self, values: np.ndarray, extra_row: bool = False) -> np.ndarray:
        """(R, C) per-tile values -> (H, W) camera raster, each tile filled with its value
        (with ``extra_row``, (H + 1, W): the last row once more).

        Two ``np.repeat`` (columns, then whole rows): faster than any gather.
        """
        row_counts = self.rows.size
        if extra_row:
            row_counts = np.append(row_counts[:-1], row_counts[-1] + 1)
        return np.repeat(np.repeat(values, self.cols.size, axis=1), row_counts, axis=0)

    def sample_pairs(
        self, grids: np.ndarray, maps: np.ndarray, tile_rows: np.ndarray, tile_cols: np.ndarray
    ) -> np.ndarray:
        """(p, a, b) samples of map ``grids[maps[i]]`` at the padded pixels of tile
        (tile_rows[i], tile_cols[i]); NaN at padding (NaN weights), so padding is never above
        a threshold, never greater than a running maximum and never equal to anything.

        The float32 operations are the reference's (``Resampler.sample``): the vertical blend
        ``top + (bottom - top) * wy`` at the tile's two texel columns, then the horizontal one.
        """
        h, w = grids.shape[1:]
        flat = grids.reshape(-1)
        r0 = maps * (h * w) + self.rows.texel0[tile_rows] * w
        r1 = r0 + (self.rows.texel1[tile_rows] - self.rows.texel0[tile_rows]) * w
        c0, c1 = self.cols.texel0[tile_cols], self.cols.texel1[tile_cols]
        wy = np.take(self.rows.padded_weight, tile_rows, axis=1)  # (a, p)
        top = flat[r0 + c0]
        left = (flat[r1 + c0] - top) * wy
        left += top
        top = flat[r0 + c1]
        right = (flat[r1 + c1] - top) * wy
        right += top
        right -= left
        wx = np.take(self.cols.padded_weight, tile_cols, axis=1)  # (b, p)
        return transposed_outer(right, wx, np.multiply, left)


@dataclass(frozen=True)
class TileBounds:
    """Per map and tile: bounds that no sample of the map in the tile can reach or cross."""

    lower: np.ndarray  # (N, R, C) float32, below every sample of the map in the tile
    upper: np.ndarray  # (N, R, C) float32, above every sample of the map in the tile

    @classmethod
    def of(cls, grids: np.ndarray, tiles: TileGrid) -> TileBounds:
        """Corner samples of every tile, widened by twice the rounding margin.

        A pixel's exact blend lies between the exact corner blends; each computed value is
        within one margin of its exact blend, so two margins separate any pixel from the
        computed corners. The corners of all tiles form a (2R, 2C) lattice, sampled separably.
        """
        rows, cols = tiles.rows, tiles.cols
        wy = rows.end_weights[:, :, None]  # (R, 2, 1)
        top = grids[:, rows.texel0, None]  # (N, R, 1, w)
        vert = (grids[:, rows.texel1, None] - top) * wy
        vert += top  # (N, R, 2, w): the tile rows' first and last camera rows
        # The blend is linear in wx, so its extremes over a tile's two column ends are
        # left + min/max(d * wx_first, d * wx_last), d = right - left (rounding is monotone).
        left = np.take(vert, cols.texel0, axis=3)  # (N, R, 2, C)
        spread = np.take(vert, cols.texel1, axis=3)
        spread -= left
        wx_first, wx_last = cols.end_weights.T
        high = spread * wx_first
        spread *= wx_last
        low = np.minimum(high, spread)
        np.maximum(high, spread, out=high)
        low += left
        high += left
        lower = np.minimum(low[:, :, 0], low[:, :, 1])
        upper = np.maximum(high[:, :, 0], high[:, :, 1])
        margin = 2 * cull_margin(grids)[:, None, None]
        lower -= margin
        upper += margin
        return cls(lower, upper)

    def take(self, index: np.ndarray) -> TileBounds:
        """Bounds of maps ``index`` only."""
        return TileBounds(self.lower[index], self.upper[index])

    def above(self, threshold: np.float32) -> np.ndarray:
        """(N, R, C) bool: every sample of the map in the tile is ``> threshold``."""
        return self.lower > threshold

    def maybe_above(self, threshold: np.float32) -> np.ndarray:
        """(N, R, C) bool: some sample of the map in the tile may be ``> threshold``."""
        return self.upper > threshold


def panoptic_candidates(bounds: TileBounds, scores: np.ndarray) -> np.ndarray:
    """(P, R, C) bool: queries that may win a pixel ``argmax_k score_k * sigmoid(up_k)``.

    Query k is out when ``score_k * sigmoid(upper_k)`` is below the largest
    ``score_j * sigmoid(lower_j)``: query j beats it at every pixel of the tile. The float32
    sigmoid is monotone at the margin's scale, so the comparison is exact.
    """
    weights = scores.astype(np.float32)[:, None, None]
    best_lower = (weights * sigmoid(bounds.lower)).max(axis=0, initial=-np.inf)
    return weights * sigmoid(bounds.upper) >= best_lower


def semantic_candidates(bounds: TileBounds) -> np.ndarray:
    """(K, R, C) bool: class maps that may win ``argmax_c S_up[c]`` at a pixel of the tile."""
    return bounds.upper >= bounds.lower.max(axis=0, initial=-np.inf)
