"""Numpy twin of the fused CUDA post-processing (cuda/postprocess.cu), step for step.

The kernels cannot run on a machine without a GPU, so this module executes the same algorithm
with the same float32 arithmetic, in the same stage order, so that CI can check it against the
numpy reference (postprocess/reference.py) and prove the per-tile culling exact:

1. ``query_stats``: per-query mask score over the valid low-res region (one block per query).
2. ``select_queries``: instance / panoptic / semantic tables from the class logits (one block).
3. ``semantic_lowres``: ``S[c] = sum_q p[q, c] * sigmoid(m_q)`` at low resolution.
4. ``tile_candidates``: per 16x16 camera tile, the queries/classes that can matter there.
5. pass A (count): per pixel winners, per-slot areas, boxes, panoptic overlap counts (atomics).
6. ``finalize``: instance renumbering LUT, panoptic overlap test, stuff merging, segment ids.
7. pass B (write): recompute the winners and write the final rasters once through the LUTs.

Everything per pixel is vectorised over one tile row of camera pixels (the kernel's blockIdx.y);
chunks may be processed in any order (``chunk_order``), which models the atomics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..labels import LabelSet
from ..overlay import outline_mask
from ..structures import (
    FrameMeta,
    FrameResult,
    Instances,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
    Segments,
)
from .resample import bilinear_taps

#: Camera pixels per tile side (the kernel's block is TILE x TILE threads).
TILE = 16
#: Margin (in logits) added to footprint bounds so float rounding of bilinear weights can never
#: push an interpolated value outside [min, max] of its texels and make the culling inexact.
BOUND_EPS = np.float32(1e-4)
#: Semantic void threshold of the contract (rule 5).
SEMANTIC_VOID = np.float32(0.05)
NEG_INF = np.float32(-np.inf)


@dataclass
class Selection:
    """Output of ``select_queries``: the compact tables the fused pass reads."""

    inst_query: np.ndarray  # (Ni,) int32 query per instance slot, score order
    inst_class: np.ndarray  # (Ni,) int32 class index
    inst_score: np.ndarray  # (Ni,) float32
    pan_query: np.ndarray  # (Np,) int32 query per panoptic slot, query order
    pan_label: np.ndarray  # (Np,) int32 class index
    pan_score: np.ndarray  # (Np,) float32
    sem_prob: np.ndarray  # (Q, K) float32 softmax without no-object


@dataclass
class TileStats:
    """Candidate counts per tile, for the docs and the benchmark (mean work per pixel)."""

    tiles: int
    inst: float
    pan: float
    orig: float
    sem: float


def mask_coordinates(
    n_out: int, resized: int, src: int, stride: int, n_mask: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps (i0, i1, weight of i1) along one axis: the reference's, uploaded as tables."""
    i0, i1, w1 = bilinear_taps(src, resized, n_mask, stride)
    return i0.astype(np.int32), i1.astype(np.int32), w1.astype(np.float32)


def bilinear_rows(
    maps: np.ndarray,
    ry: tuple[np.ndarray, np.ndarray, np.ndarray],
    cx: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """(N, rows, cols) float32 samples of (N, h, w) maps: ``a + (b - a) * w``, rows first.

    The kernel evaluates exactly these float32 operations (no FMA contraction), so the twin
    and the kernel agree bit for bit on the interpolated logits.
    """
    y0, y1, wy = ry
    x0, x1, wx = cx
    top = maps[:, y0, :]
    vert = top + (maps[:, y1, :] - top) * wy[None, :, None]
    left = vert[:, :, x0]
    return (left + (vert[:, :, x1] - left) * wx).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """float32 logistic function (the kernel uses 1 / (1 + expf(-x)))."""
    with np.errstate(over="ignore"):
        return (np.float32(1.0) / (np.float32(1.0) + np.exp(-x.astype(np.float32)))).astype(
            np.float32
        )


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax in float32 (max-subtracted, as the selection kernel does)."""
    z = logits.astype(np.float32) - logits.max(axis=1, keepdims=True).astype(np.float32)
    e = np.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def valid_extent(meta: FrameMeta, stride: int) -> tuple[int, int]:
    """Rows and columns of the mask grid whose centres lie inside the resized image (rule 2)."""
    return -(-meta.resized_h // stride), -(-meta.resized_w // stride)


def query_stats(
    masks: np.ndarray, meta: FrameMeta, stride: int, threshold: np.float32
) -> np.ndarray:
    """Mask score per query over the valid region: sum(sigmoid(m) * (m > T)) / (#(m > T) + 1e-6)."""
    vh, vw = valid_extent(meta, stride)
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
    # Panoptic: per query max over K+1 (first on ties); keep in query order.
    pan_label = prob.argmax(axis=1).astype(np.int32)
    pan_score = prob[np.arange(q_count), pan_label]
    pan_keep = np.flatnonzero(
        (pan_label != k) & (pan_score > np.float32(options.object_mask_threshold))
    )
    return Selection(
        inst_query=order.astype(np.int32),
        inst_class=best_c[order],
        inst_score=score[order],
        pan_query=pan_keep.astype(np.int32),
        pan_label=pan_label[pan_keep],
        pan_score=pan_score[pan_keep].astype(np.float32),
        sem_prob=p,
    )


def semantic_lowres(sem_prob: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """(K, h, w) float32 class maps ``S[c] = sum_q p[q, c] * sigmoid(m_q)`` (rule 5)."""
    q, h, w = masks.shape
    sig = sigmoid(masks).reshape(q, h * w)
    return (sem_prob.T.astype(np.float32) @ sig).reshape(-1, h, w).astype(np.float32)


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


class _Frame:
    """State of one frame while the twin runs the fused passes."""

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
        self.threshold = np.float32(np.log(options.mask_threshold / (1.0 - options.mask_threshold)))
        stats = query_stats(self.masks, meta, self.stride, self.threshold)
        self.sel = select_queries(np.asarray(raw.class_logits), stats, labels, options)
        self.inst_maps = self.masks[self.sel.inst_query] if outputs.instance else self.masks[:0]
        self.pan_maps = self.masks[self.sel.pan_query] if outputs.panoptic else self.masks[:0]
        self.sem_maps = (
            semantic_lowres(self.sel.sem_prob, self.masks)
            if outputs.semantic
            else np.zeros((0, self.h, self.w), np.float32)
        )
        self.ry = mask_coordinates(meta.src_h, meta.resized_h, meta.src_h, self.stride, self.h)
        self.cx = mask_coordinates(meta.src_w, meta.resized_w, meta.src_w, self.stride, self.w)
        self.row_lo, self.row_hi = tile_footprints(meta.src_h, self.ry)
        self.col_lo, self.col_hi = tile_footprints(meta.src_w, self.cx)
        ni, npan = len(self.inst_maps), len(self.pan_maps)
        self.inst_area = np.zeros(ni, np.int64)
        self.inst_box = np.tile(np.array([meta.src_w, meta.src_h, -1, -1], np.int64), (ni, 1))
        self.wins = np.zeros(npan, np.int64)
        self.orig = np.zeros(npan, np.int64)
        self.seg = np.zeros(npan, np.int64)
        self.cand_sum = np.zeros(4, np.float64)

    def candidates(self, tile_row: int) -> dict[str, np.ndarray]:
        """Per tile-column candidate masks (N, tiles) for one tile row (the block prologue)."""
        rows = (int(self.row_lo[tile_row]), int(self.row_hi[tile_row]))
        out = {}
        if len(self.inst_maps):
            _, fmax = footprint_bounds(self.inst_maps, rows, self.col_lo, self.col_hi)
            out["inst"] = fmax + BOUND_EPS > self.threshold
        if len(self.pan_maps):
            fmin, fmax = footprint_bounds(self.pan_maps, rows, self.col_lo, self.col_hi)
            s = self.sel.pan_score[:, None]
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
        for name, c in cand.items():
            self.cand_sum[["inst", "pan", "orig", "sem"].index(name)] += c.sum()
        if len(self.inst_maps):
            up = bilinear_rows(self.inst_maps, ry, self.cx)
            hit = up > self.threshold
            if cull:
                hit &= cand["inst"][:, tile_of_x][:, None, :]
            first, any_hit = _first_true(hit)
            res["inst"] = np.where(any_hit, first + 1, 0)
        if len(self.pan_maps):
            up = bilinear_rows(self.pan_maps, ry, self.cx)
            prob = self.sel.pan_score[:, None, None] * sigmoid(up)
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
            res["sem"] = np.where(top >= SEMANTIC_VOID, best, -1)
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
            n = len(self.pan_maps)
            win = res["pan_winner"].ravel()
            self.wins += np.bincount(win, minlength=n)
            self.seg += np.bincount(win[res["pan_on"].ravel()], minlength=n)
            self.orig += res["pan_orig"]

    def finalize(self) -> tuple[np.ndarray, np.ndarray, Instances, Segments]:
        """Instance LUT (drop empty, renumber) and panoptic LUT (overlap test, stuff merge)."""
        labels = self.labels
        ids_of = labels.id_array
        keep = self.inst_area > 0
        inst_lut = np.zeros(len(self.inst_maps) + 1, np.int64)
        inst_lut[1:][keep] = np.arange(1, int(keep.sum()) + 1)
        box = self.inst_box[keep].astype(np.float32)
        box[:, 2:] += 1
        cls = self.sel.inst_class[keep] if len(self.inst_maps) else np.zeros(0, np.int32)
        instances = Instances(
            ids=np.arange(1, int(keep.sum()) + 1, dtype=np.uint16),
            class_index=cls.astype(np.int32),
            label_id=ids_of[cls].astype(np.int32),
            score=self.sel.inst_score[keep].astype(np.float32)
            if len(self.inst_maps)
            else np.zeros(0, np.float32),
            box=box.reshape(-1, 4),
            area=self.inst_area[keep].astype(np.int64),
        )
        pan_lut = np.zeros(len(self.pan_maps), np.int64)
        seg_ids: list[int] = []
        seg_label: list[int] = []
        seg_thing: list[bool] = []
        seg_score: list[float] = []
        seg_area: list[int] = []
        thing_count: dict[int, int] = {}
        for k in range(len(self.pan_maps)):
            wins, orig, seg = int(self.wins[k]), int(self.orig[k]), int(self.seg[k])
            if wins == 0 or orig == 0 or seg == 0:
                continue
            if wins / orig < self.options.overlap_threshold:
                continue
            c = int(self.sel.pan_label[k])
            label_id = int(ids_of[c])
            score = float(self.sel.pan_score[k])
            if labels.isthing[c]:
                thing_count[label_id] = thing_count.get(label_id, 0) + 1
                segment = label_id * 1000 + thing_count[label_id]
            else:
                segment = label_id
            pan_lut[k] = segment
            if segment in seg_ids:
                j = seg_ids.index(segment)
                seg_area[j] += seg
                seg_score[j] = max(seg_score[j], score)
            else:
                seg_ids.append(segment)
                seg_label.append(label_id)
                seg_thing.append(bool(labels.isthing[c]))
                seg_score.append(score)
                seg_area.append(seg)
        segments = Segments(
            ids=np.asarray(seg_ids, np.int32),
            label_id=np.asarray(seg_label, np.int32),
            isthing=np.asarray(seg_thing, bool),
            score=np.asarray(seg_score, np.float32),
            area=np.asarray(seg_area, np.int64),
        )
        return inst_lut, pan_lut, instances, segments


def postprocess(
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
    cull: bool = True,
    chunk_order: np.ndarray | None = None,
) -> FrameResult:
    """Run the GPU algorithm on the CPU; ``chunk_order`` permutes tile rows (atomics model)."""
    frame = _Frame(raw, meta, labels, options, outputs)
    n_rows = -(-meta.src_h // TILE)
    order = np.arange(n_rows) if chunk_order is None else np.asarray(chunk_order)
    for r in order:
        frame.count(int(r), cull)
    inst_lut, pan_lut, instances, segments = frame.finalize()
    result = FrameResult(meta=meta, instances=instances, segments=segments)
    sem_dtype = np.uint8 if max(labels.ids) <= 255 else np.uint16
    if outputs.instance:
        result.instance_raster = np.zeros((meta.src_h, meta.src_w), np.uint16)
    if outputs.panoptic:
        result.panoptic_raster = np.zeros((meta.src_h, meta.src_w), np.int32)
    if outputs.semantic:
        result.semantic_raster = np.zeros((meta.src_h, meta.src_w), sem_dtype)
    sem_lut = np.concatenate([labels.id_array, [0]])
    for r in order:  # pass B: recompute and write every raster pixel once through the LUTs
        res = frame.evaluate(int(r), cull)
        rows = slice(int(r) * TILE, min((int(r) + 1) * TILE, meta.src_h))
        if outputs.instance:
            result.instance_raster[rows] = inst_lut[res["inst"]] if "inst" in res else 0
        if outputs.panoptic and "pan_winner" in res:
            result.panoptic_raster[rows] = np.where(
                res["pan_on"], pan_lut[res["pan_winner"]], 0
            )
        if outputs.semantic:
            result.semantic_raster[rows] = sem_lut[res["sem"]]
    return result


def tile_stats(
    raw: RawOutputs,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
) -> TileStats:
    """Mean candidates per tile for instance, panoptic, panoptic-orig and semantic lists."""
    frame = _Frame(raw, meta, labels, options, outputs)
    n_rows = -(-meta.src_h // TILE)
    for r in range(n_rows):
        frame.evaluate(r, cull=True)
    tiles = n_rows * -(-meta.src_w // TILE)
    inst, pan, orig, sem = (frame.cand_sum / tiles).tolist()
    return TileStats(tiles=tiles, inst=inst, pan=pan, orig=orig, sem=sem)


#: Encoding -> kernel code (cuda/common.cuh ``Encoding``).
ENCODING_CODES: dict[str, int] = {
    "rgb8": 0,
    "bgr8": 1,
    "rgba8": 2,
    "bgra8": 3,
    "mono8": 4,
    "yuv422": 5,
    "uyvy": 5,
    "yuv422_yuy2": 6,
    "yuyv": 6,
}


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
        rgb = (
            (one - wx) * (one - wy) * a + wx * (one - wy) * b + (one - wx) * wy * c + wx * wy * d
        )
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
