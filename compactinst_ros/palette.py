"""Overlay colours, numpy only: shared by the CPU overlay (overlay.py) and the GPU overlay, which
keeps one ``palette(MAX_QUERIES + 1)`` table on the device, without pulling OpenCV into the
TensorRT backend."""

from __future__ import annotations

import numpy as np


def palette(n: int) -> np.ndarray:
    """(n, 3) uint8 RGB colours, well separated (golden-ratio hues); row 0 is black (background).

    HSV -> RGB in numpy rather than cv2.cvtColor, whose SIMD and scalar paths round differently:
    row i must not depend on n (the GPU overlay keeps one table for all frames).
    """
    idx = np.arange(n)
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
    rgb = np.rint(choices[sector, idx]).astype(np.uint8)
    rgb[:1] = 0
    return rgb
