"""Overlay colours, numpy only: shared by the CPU overlay (overlay.py), the colour images and the
GPU overlay, without pulling OpenCV into the TensorRT backend. The colour of an id does not
depend on how many ids a table holds, so a track id keeps its colour in every frame."""

from __future__ import annotations

import numpy as np

#: brightness factors of the k-th thing of a class in the panoptic colour image (k = 1, 2, ...)
SHADES = (1.0, 0.72, 0.86, 0.58)


def palette_colours(ids: np.ndarray) -> np.ndarray:
    """(len(ids), 3) uint8 RGB colour of each id, well separated (golden-ratio hues); 0 is black.

    HSV -> RGB in numpy rather than cv2.cvtColor, whose SIMD and scalar paths round differently:
    an id's colour must not depend on the other ids (the GPU overlay keeps one table).
    """
    idx = np.asarray(ids, np.int64).reshape(-1)
    hue = ((idx * 0.618033988749895 * 180.0) % 180.0).astype(np.uint8) * 2.0 / 60.0  # sectors
    sat = 200.0 / 255.0
    val = np.where(idx % 2, 255.0, 210.0)
    sector = np.floor(hue).astype(np.intp) % 6
    frac = hue - np.floor(hue)
    p, q, t = val * (1 - sat), val * (1 - sat * frac), val * (1 - sat * (1 - frac))
    choices = np.stack(
        [
            np.stack(c, axis=-1)
            for c in ((val, t, p), (q, val, p), (p, val, t), (p, q, val), (t, p, val), (val, p, q))
        ]
    )
    rgb = np.rint(choices[sector, np.arange(idx.size)]).astype(np.uint8)
    rgb[idx == 0] = 0
    return rgb


def palette(n: int) -> np.ndarray:
    """(n, 3) uint8 RGB table of ids 0..n-1 (``palette_colours``); row 0 is black (background)."""
    return palette_colours(np.arange(n))


def id_colours(ids: np.ndarray, colour_ids: np.ndarray) -> np.ndarray:
    """(max(ids) + 1, 3) uint8 RGB table: row ``ids[i]`` has the colour of ``colour_ids[i]``.

    How a raster of per-frame ids is drawn in track-id colours; unused rows are black.
    """
    ids = np.asarray(ids, np.intp)
    table = np.zeros((int(ids.max()) + 1 if ids.size else 1, 3), np.uint8)
    table[ids] = palette_colours(colour_ids)
    return table


def shaded(rgb: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``rgb`` (N, 3) uint8 scaled by ``SHADES[(k - 1) % len(SHADES)]``: the k-th thing's shade."""
    factor = np.asarray(SHADES)[(np.asarray(k, np.int64) - 1) % len(SHADES)]
    return np.rint(rgb.astype(np.float64) * factor[:, None]).astype(np.uint8)
