"""Numpy twin of the CUDA kernels (gpu/kernels/*.cu), step for step: the oracle of the tests and
of scripts/gpu_check.py, never imported by the runtime.

The kernels cannot run on a machine without a GPU, so this module executes the same algorithm
with the same float32 arithmetic, in the same stage order, so that CI can check it against the
numpy reference (postprocess/reference.py) and prove the per-tile culling exact. Post-processing
(``TwinFrame``), one frame:

1. ``query_stats``: per-query mask score over the valid low-res region (``pp_stats``' query
   blocks).
2. ``select_queries``: instance / panoptic / semantic tables from the class logits (the last
   query block).
3. ``class_maps``: ``S[c] = sum_q p[q, c] * sigmoid(m_q)`` at low resolution (``pp_stats``'
   semantic blocks).
4. ``tile_candidates``: per 16x16 camera tile, the queries/classes that can matter there
   (``pp_tiles``).
5. count: per pixel winners, per-slot areas, boxes, panoptic overlap counts (atomics).
6. ``finalize``: the reference's instance renumbering and table (``postprocess.instance``) and
   its panoptic overlap test, stuff merging and segment ids (``finalize_panoptic``) on the counts
   (the last tile block).
7. write: the final rasters from the winners through the LUTs (the kernels write the winners in
   ``pp_tiles`` and map them in ``pp_remap``; the twin recomputes them, the same values).

Everything per pixel is vectorised over one tile row of camera pixels (the kernel's blockIdx.y);
chunks may be processed in any order (``chunk_order``), which models the atomics. The
pre-processing and overlay kernels are twinned by ``letterbox`` and ``overlay``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..labels import LabelSet
from ..overlay import outline_mask
from ..postprocess.instance import InstanceSelection, drop_small, instances_table
from ..postprocess.panoptic import PanopticSelection, finalize_panoptic, select_panoptic_queries
from ..postprocess.resample import (
    Taps,
    bilinear_taps,
    logit_threshold,
    sigmoid,
    softmax,
    valid_region,
)
from ..postprocess.semantic import SEMANTIC_VOID_FLOOR, class_maps, semantic_dtype
from ..structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions, RawOutputs
from .constants import BOUND_EPS, ENCODING_CODES, TILE

NEG_INF = np.float32(-np.inf)


@dataclass
class Selection:
    """Output of ``select_queries``: the compact tables the fused pass reads."""

    instance: InstanceSelection  # instance slots in score order (the reference's record)
    panoptic: PanopticSelection  # panoptic slots in query order (the reference's selection)
    sem_prob: np.ndarray  # (Q, K) float32 softmax without no-object


def mask_coordinates(src: int, resized: int, n_mask: int, stride: int) -> Taps:
    """Bilinear taps (i0, i1, weight of i1) along one axis: the reference's, uploaded as tables."""
    i0, i1, w1 = bilinear_taps(src, resized, n_mask, stride)
    return i0.astype(np.int32), i1.astype(np.int32), w1.astype(np.float32)


def bilinear_rows(
    maps: np.ndarray,
    ry: tuple[np.ndarray, np.ndarray, np.ndarray],
    cx: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """(N, rows, cols) float32 samples of (N, h, w) maps: ``a + (b - a) * w``, rows first.

    The kernel evaluates exactly these float32 operations (no FMA contraction, docs/gpu.md
    "Float arithmetic"), so the twin and the kernel agree bit for bit on the interpolated logits.
    """
    y0, y1, wy = ry
    x0, x1, wx = cx
    top = maps[:, y0, :]
    vert = top + (maps[:, y1, :] - top) * wy[None, :, None]
    left = vert[:, :, x0]
    return (left + (vert[:, :, x1] - left) * wx).astype(np.float32)


def query_stats(
    masks: np.ndarray, meta: FrameMeta, stride: int, threshold: np.float32
) -> np.ndarray:
    """Mask score per query over the valid region: sum(sigmoid(m) * (m > T)) / (#(m > T) + 1e-6)."""
    vh, vw = valid_region(meta, stride, masks.shape[1], masks.shape[2])
    m = masks[:, :vh, :vw].astype(np.float32)
    on = m > threshold
    num = (sigmoid(m) * on).reshape(len(m), -1).sum(axis=1, dtype=np.float32)
    den = on.reshape(len(m), -1).sum(axis=1).astype(np.float32) + np.float32(1e-6)
    return (num / den).astype(np.float32)


def select_queries(
    class_logits: np.ndarray,
    mask_score: np.ndarray,
    labels: LabelSet,
    options: PostprocessOptions,
) -> Selection:
    """Instance, panoptic and semantic tables (rules 3-5), as the one-block selection kernel."""
    q_count, k1 = class_logits.shape
    k = k1 - 1
    prob = softmax(class_logits)
    p = prob[:, :k]
    thing = labels.thing_mask
    # Instances: a query qualifies when its best thing pair ranks inside the top max_instances
    # pairs (desc p, ties: lower flat index q * K + c); its score is that p x its mask score.
    pt = np.where(thing[None, :], p, NEG_INF)
    best_c = pt.argmax(axis=1).astype(np.int32)
    best_p = pt[np.arange(q_count), best_c]
    flat = np.arange(q_count * k).reshape(q_count, k)
    own_flat = flat[np.arange(q_count), best_c]
    pairs = pt.reshape(-1)
    better = (pairs[None, :] > best_p[:, None]) | (
        (pairs[None, :] == best_p[:, None]) & (flat.reshape(-1)[None, :] < own_flat[:, None])
    )
    rank = (better & np.isfinite(pairs)[None, :]).sum(axis=1)
    has_thing = bool(thing.any())
    score = (best_p * mask_score).astype(np.float32)
    keep = (rank < options.max_instances) & (score >= np.float32(options.score_threshold))
    keep &= has_thing
    kept = np.flatnonzero(keep)
    order = kept[np.lexsort((kept, -score[kept]))][: options.max_instances]
    return Selection(
        instance=InstanceSelection(order.astype(np.int64), best_c[order], score[order]),
        panoptic=select_panoptic_queries(class_logits, options.object_mask_threshold),
        sem_prob=p,
    )


def tile_footprints(
    n_out: int, taps: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """First and last texel index (inclusive) that each tile of TILE pixels samples."""
    i0, i1, _ = taps
    starts = np.arange(0, n_out, TILE)
    ends = np.minimum(starts + TILE, n_out) - 1
    return i0[starts], i1[ends]


def footprint_bounds(
    maps: np.ndarray, rows: tuple[int, int], col_lo: np.ndarray, col_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(N, tiles) min and max of each map over each tile's texel rectangle in one tile row."""
    block = maps[:, rows[0] : rows[1] + 1]
    lo = block.min(axis=1)
    hi = block.max(axis=1)
    width = int((col_hi - col_lo).max()) + 1
    fmin = np.full((len(maps), len(col_lo)), np.inf, np.float32)
    fmax = np.full((len(maps), len(col_lo)), -np.inf, np.float32)
    for d in range(width):
        idx = np.minimum(col_lo + d, col_hi)
        fmin = np.minimum(fmin, lo[:, idx])
        fmax = np.maximum(fmax, hi[:, idx])
    return fmin, fmax


def _first_true(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the first True along axis 0 and whether there is one."""
    any_true = mask.any(axis=0)
    return mask.argmax(axis=0), any_true


class TwinFrame:
    """One frame through the fused post-processing kernels, in numpy: ``postprocess`` gives the
    kernels' FrameResult, ``candidates`` each tile row's candidate lists."""

    def __init__(
        self,
        raw: RawOutputs,
        meta: FrameMeta,
        labels: LabelSet,
        options: PostprocessOptions,
        outputs: OutputSet,
    ) -> None:
        self.meta, self.labels, self.options, self.outputs = meta, labels, options, outputs
        self.masks = np.ascontiguousarray(raw.mask_logits, dtype=np.float32)
        self.stride = raw.mask_stride
        _, self.h, self.w = self.masks.shape
        self.threshold = logit_threshold(options.mask_threshold)
        stats = query_stats(self.masks, meta, self.stride, self.threshold)
        self.sel = select_queries(np.asarray(raw.class_logits), stats, labels, options)
        self.instance = self.sel.instance if outputs.instance else InstanceSelection.empty()
        self.inst_maps = self.masks[self.instance.query]
        self.pan_maps = self.masks[self.sel.panoptic.query] if outputs.panoptic else self.masks[:0]
        self.sem_maps = (
            class_maps(self.sel.sem_prob, sigmoid(self.masks))
            if outputs.semantic
            else np.zeros((0, self.h, self.w), np.float32)
        )
        self.ry = mask_coordinates(meta.src_h, meta.resized_h, self.h, self.stride)
        self.cx = mask_coordinates(meta.src_w, meta.resized_w, self.w, self.stride)
        self.row_lo, self.row_hi = tile_footprints(meta.src_h, self.ry)
        self.col_lo, self.col_hi = tile_footprints(meta.src_w, self.cx)
        self.n_rows = -(-meta.src_h // TILE)
        self.reset_counts()

    def reset_counts(self) -> None:
        """Zero what pass A accumulates (the kernels' atomics)."""
        ni, npan = len(self.inst_maps), len(self.sel.panoptic)
        self.inst_area = np.zeros(ni, np.int64)
        box = np.array([self.meta.src_w, self.meta.src_h, -1, -1], np.int64)
        self.inst_box = np.tile(box, (ni, 1))
        self.wins, self.orig, self.seg = (np.zeros(npan, np.int64) for _ in range(3))

    def candidates(self, tile_row: int) -> dict[str, np.ndarray]:
        """Per tile-column candidate masks (N, tiles) for one tile row (the block prologue)."""
        rows = (int(self.row_lo[tile_row]), int(self.row_hi[tile_row]))
        out = {}
        if len(self.inst_maps):
            _, fmax = footprint_bounds(self.inst_maps, rows, self.col_lo, self.col_hi)
            out["inst"] = fmax + BOUND_EPS > self.threshold
        if len(self.pan_maps):
            fmin, fmax = footprint_bounds(self.pan_maps, rows, self.col_lo, self.col_hi)
            s = self.sel.panoptic.score[:, None]
            upper = s * sigmoid(fmax + BOUND_EPS)
            lower = (s * sigmoid(fmin - BOUND_EPS)).max(axis=0)
            out["pan"] = upper >= lower[None, :]
            out["orig"] = fmax + BOUND_EPS > self.threshold
        if len(self.sem_maps):
            fmin, fmax = footprint_bounds(self.sem_maps, rows, self.col_lo, self.col_hi)
            lower = (fmin - BOUND_EPS).max(axis=0)
            out["sem"] = fmax + BOUND_EPS >= lower[None, :]
        return out

    def evaluate(self, tile_row: int, cull: bool) -> dict[str, np.ndarray]:
        """Per pixel results of one tile row: instance slot, panoptic winner/on, semantic class."""
        y_start = tile_row * TILE
        y_stop = min(y_start + TILE, self.meta.src_h)
        ry = tuple(a[y_start:y_stop] for a in self.ry)
        cand = self.candidates(tile_row)
        tile_of_x = np.arange(self.meta.src_w) // TILE
        res: dict[str, np.ndarray] = {}
        if len(self.inst_maps):
            up = bilinear_rows(self.inst_maps, ry, self.cx)
            hit = up > self.threshold
            if cull:
                hit &= cand["inst"][:, tile_of_x][:, None, :]
            first, any_hit = _first_true(hit)
            res["inst"] = np.where(any_hit, first + 1, 0)
        if len(self.pan_maps):
            up = bilinear_rows(self.pan_maps, ry, self.cx)
            prob = self.sel.panoptic.score[:, None, None] * sigmoid(up)
            on = up > self.threshold
            if cull:
                prob = np.where(cand["pan"][:, tile_of_x][:, None, :], prob, NEG_INF)
                on &= cand["orig"][:, tile_of_x][:, None, :]
            winner = prob.argmax(axis=0)
            res["pan_winner"] = winner
            res["pan_on"] = np.take_along_axis(on, winner[None], axis=0)[0]
            res["pan_orig"] = on.reshape(len(on), -1).sum(axis=1)
        if len(self.sem_maps):
            up = bilinear_rows(self.sem_maps, ry, self.cx)
            if cull:
                up = np.where(cand["sem"][:, tile_of_x][:, None, :], up, NEG_INF)
            best = up.argmax(axis=0)
            top = np.take_along_axis(up, best[None], axis=0)[0]
            res["sem"] = np.where(top >= SEMANTIC_VOID_FLOOR, best, -1)
        return res

    def count(self, tile_row: int, cull: bool) -> None:
        """Pass A for one tile row: accumulate areas, boxes and overlap counts (the atomics)."""
        res = self.evaluate(tile_row, cull)
        y0 = tile_row * TILE
        if "inst" in res:
            ids = res["inst"]
            self.inst_area += np.bincount(ids.ravel(), minlength=len(self.inst_maps) + 1)[1:]
            ys, xs = np.nonzero(ids)
            slot = ids[ys, xs] - 1
            np.minimum.at(self.inst_box[:, 0], slot, xs)
            np.minimum.at(self.inst_box[:, 1], slot, ys + y0)
            np.maximum.at(self.inst_box[:, 2], slot, xs)
            np.maximum.at(self.inst_box[:, 3], slot, ys + y0)
        if "pan_winner" in res:
            n = len(self.sel.panoptic)
            win = res["pan_winner"].ravel()
            self.wins += np.bincount(win, minlength=n)
            self.seg += np.bincount(win[res["pan_on"].ravel()], minlength=n)
            self.orig += res["pan_orig"]

    def finalize(self) -> tuple[FrameResult, np.ndarray, np.ndarray]:
        """The tables (a FrameResult without rasters), the instance slot LUT (empty slots dropped,
        the rest renumbered) and the (P+1,) panoptic slot LUT: the reference's ``drop_small``,
        ``instances_table`` and ``finalize_panoptic`` on the counts of pass A."""
        inst_lut, keep = drop_small(self.inst_area, self.options.min_area)
        instances = instances_table(self.instance, self.labels, self.inst_area, self.inst_box, keep)
        pan_lut, segments = finalize_panoptic(
            self.sel.panoptic, self.labels, self.wins, self.orig, self.seg,
            self.options.overlap_threshold, self.options.min_area,
        )  # fmt: skip
        tables = FrameResult(meta=self.meta, instances=instances, segments=segments)
        return tables, inst_lut, pan_lut

    def postprocess(self, cull: bool = True, chunk_order: np.ndarray | None = None) -> FrameResult:
        """The kernels' FrameResult; ``chunk_order`` permutes tile rows (models the atomics)."""
        self.reset_counts()
        meta, outputs = self.meta, self.outputs
        order = np.arange(self.n_rows) if chunk_order is None else np.asarray(chunk_order)
        for r in order:
            self.count(int(r), cull)
        result, inst_lut, pan_lut = self.finalize()
        shape = (meta.src_h, meta.src_w)
        if outputs.instance:
            result.instance_raster = np.zeros(shape, np.uint16)
        if outputs.panoptic:
            result.panoptic_raster = np.zeros(shape, np.int32)
        if outputs.semantic:
            result.semantic_raster = np.zeros(shape, semantic_dtype(self.labels))
        sem_lut = np.concatenate([self.labels.id_array, [0]])
        for r in order:  # pass B: recompute and write every raster pixel once through the LUTs
            res = self.evaluate(int(r), cull)
            rows = slice(int(r) * TILE, min((int(r) + 1) * TILE, meta.src_h))
            if outputs.instance:
                result.instance_raster[rows] = inst_lut[res["inst"]] if "inst" in res else 0
            if outputs.panoptic and "pan_winner" in res:
                slot = np.where(res["pan_on"], res["pan_winner"] + 1, 0)
                result.panoptic_raster[rows] = pan_lut[slot]
            if outputs.semantic:
                result.semantic_raster[rows] = sem_lut[res["sem"]]
        return result


def fetch_rgb(image: np.ndarray, encoding: str, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """(..., 3) float32 RGB of pixels (ys, xs) of a raw HxWxC frame, as ``ci::fetch_rgb``."""
    code = ENCODING_CODES[encoding.lower()]
    if code <= 4:
        px = image[ys, xs].astype(np.float32)
        if code == 4:
            return np.repeat(px[..., :1], 3, axis=-1)
        rgb = px[..., :3]
        return rgb[..., ::-1] if code in (1, 3) else rgb
    pairs = image.reshape(image.shape[0], -1, 4)  # one 4-byte macro-pixel per 2 pixels
    macro = pairs[ys, xs // 2].astype(np.float32)
    odd = (xs & 1).astype(np.intp)
    if code == 5:  # U Y0 V Y1
        u, v = macro[..., 0], macro[..., 2]
        yy = np.take_along_axis(macro, (1 + 2 * odd)[..., None], axis=-1)[..., 0]
    else:  # Y0 U Y1 V
        u, v = macro[..., 1], macro[..., 3]
        yy = np.take_along_axis(macro, (2 * odd)[..., None], axis=-1)[..., 0]
    luma = np.maximum(yy - np.float32(16), np.float32(0)) * np.float32(1.164)
    u, v = u - np.float32(128), v - np.float32(128)
    r = luma + np.float32(1.596) * v
    g = luma - np.float32(0.813) * v - np.float32(0.391) * u
    b = luma + np.float32(2.018) * u
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.float32)


def _resize_taps(n_out: int, n_src: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV INTER_LINEAR taps (i0, i1, weight of i1) along one axis, as ``pre_letterbox``."""
    scale = np.float32(n_src / n_out)
    f = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    i0 = np.floor(f).astype(np.int64)
    frac = (f - i0).astype(np.float32)
    frac[i0 < 0] = 0
    i0[i0 < 0] = 0
    last = i0 >= n_src - 1
    frac[last] = 0
    i0[last] = n_src - 1
    return i0, np.minimum(i0 + 1, n_src - 1), frac


def letterbox(
    image: np.ndarray, encoding: str, meta: FrameMeta, pad_value: tuple[float, float, float]
) -> np.ndarray:
    """(1, 3, input_h, input_w) float32: the preprocessing kernel's output for one raw frame."""
    out = np.empty((3, meta.input_h, meta.input_w), np.float32)
    out[:] = np.asarray(pad_value, np.float32)[:, None, None]
    rh, rw = meta.resized_h, meta.resized_w
    if (rh, rw) == (meta.src_h, meta.src_w):
        ys, xs = np.mgrid[0:rh, 0:rw]
        rgb = fetch_rgb(image, encoding, ys, xs)
    else:
        y0, y1, fy = _resize_taps(rh, meta.src_h)
        x0, x1, fx = _resize_taps(rw, meta.src_w)
        one = np.float32(1)
        wy, wx = fy[:, None, None], fx[None, :, None]
        a = fetch_rgb(image, encoding, y0[:, None], x0[None, :])
        b = fetch_rgb(image, encoding, y0[:, None], x1[None, :])
        c = fetch_rgb(image, encoding, y1[:, None], x0[None, :])
        d = fetch_rgb(image, encoding, y1[:, None], x1[None, :])
        rgb = (one - wx) * (one - wy) * a + wx * (one - wy) * b + (one - wx) * wy * c + wx * wy * d
    out[:, :rh, :rw] = rgb.transpose(2, 0, 1)
    return out[None]


def overlay(
    image: np.ndarray,
    encoding: str,
    ids: np.ndarray,
    lut: np.ndarray,
    alpha: float,
    sorted_ids: np.ndarray | None = None,
) -> np.ndarray:
    """HxWx3 uint8 RGB: the overlay kernels' output (``ov_instance``, or ``ov_panoptic`` when
    ``sorted_ids`` maps segment ids to LUT rows 1..S)."""
    h, w = ids.shape
    ys, xs = np.mgrid[0:h, 0:w]
    rgb = fetch_rgb(image, encoding, ys, xs)
    if sorted_ids is None:
        index = np.where(ids < len(lut), ids, 0).astype(np.intp)
    else:
        pos = np.clip(np.searchsorted(sorted_ids, ids), 0, max(len(sorted_ids) - 1, 0))
        found = len(sorted_ids) > 0 and sorted_ids[pos] == ids
        index = np.where(found, pos + 1, 0).astype(np.intp)
    fg = index > 0
    edge = outline_mask(index)
    w_image, w_colour = np.float32(1.0 - alpha), np.float32(alpha)
    blended = rgb * w_image + lut[index].astype(np.float32) * w_colour
    out = np.where(fg[..., None], np.rint(blended), rgb)
    out[edge & fg] = 255
    return np.clip(out, 0, 255).astype(np.uint8)
