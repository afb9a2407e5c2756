"""COCO's file encodings, without pycocotools: the panoptic PNG's colour ids and run-length
encoded masks (RLE), so that the runtime (``compactinst infer``) writes results any COCO tool
reads, and the evaluation and the synthetic data write the same bytes."""

from __future__ import annotations

import numpy as np


def id_to_rgb(ids: np.ndarray) -> np.ndarray:
    """COCO panoptic encoding: id -> (R, G, B) with id = R + 256 G + 256^2 B."""
    ids = ids.astype(np.uint32)
    return np.stack([ids & 255, (ids >> 8) & 255, (ids >> 16) & 255], axis=-1).astype(np.uint8)


def rgb_to_id(rgb: np.ndarray) -> np.ndarray:
    """COCO panoptic decoding: (H, W, 3) uint8 RGB -> (H, W) int32 ids."""
    rgb = rgb.astype(np.int32)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """COCO's runs of a boolean (H, W) mask: column-major order, starting with a run of zeros
    (0 where the first pixel is set), alternating."""
    flat = np.asarray(mask, bool).T.ravel()  # column-major, as COCO (Fortran order)
    if flat.size == 0:
        return np.zeros(0, np.int64)
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate(([0], edges, [flat.size]))
    runs = np.diff(bounds)
    return np.concatenate(([0], runs)) if flat[0] else runs


def runs_to_string(runs: np.ndarray) -> str:
    """COCO's compressed RLE string of ``runs`` (pycocotools' rleToString): each count, less the
    count two before it from the third on, in 5-bit groups, low first, each group + 48 as a
    character, bit 0x20 set while more groups follow. A loop over runs, not pixels."""
    out = []
    counts = [int(c) for c in runs]
    for i, count in enumerate(counts):
        x = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            group = x & 0x1F
            x >>= 5  # arithmetic shift: negative deltas end at -1
            more = x != -1 if group & 0x10 else x != 0
            out.append(chr(group + (0x20 if more else 0) + 48))
    return "".join(out)


def encode_rle(mask: np.ndarray) -> dict:
    """COCO compressed RLE of a boolean (H, W) mask, JSON-ready: ``{"size": [H, W],
    "counts": str}``, equal to pycocotools' ``mask.encode`` (counts decoded as ASCII)."""
    h, w = mask.shape
    return {"size": [int(h), int(w)], "counts": runs_to_string(run_lengths(mask))}
