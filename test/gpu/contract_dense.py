"""A deliberately plain, dense implementation of the post-processing rules in docs/CONTRACTS.md.

Test-only: it upsamples every needed map to camera resolution with interpolation matrices and
applies the rules literally, so the GPU twin's tiling, culling and two-pass LUT design are
checked against something that has none of them.
"""

from __future__ import annotations

import numpy as np

from compactinst_ros.labels import LabelSet
from compactinst_ros.structures import FrameMeta, OutputSet, PostprocessOptions


def interp_matrix(n_out: int, resized: int, src: int, stride: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) bilinear weights of rule 1 (align_corners=False, border clamp)."""
    pos = (np.arange(n_out) + 0.5) * (resized / src) / stride - 0.5
    pos = np.clip(pos, 0, n_in - 1)
    i0 = np.floor(pos).astype(int)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = pos - i0
    mat = np.zeros((n_out, n_in))
    np.add.at(mat, (np.arange(n_out), i0), 1 - w1)
    np.add.at(mat, (np.arange(n_out), i1), w1)
    return mat


def dense_postprocess(
    class_logits: np.ndarray,
    masks: np.ndarray,
    stride: int,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
    outputs: OutputSet,
) -> dict[str, np.ndarray]:
    """Rasters and tables by the letter of the contract (float64 throughout)."""
    _, h, w = masks.shape
    k = class_logits.shape[1] - 1
    t = np.log(options.mask_threshold / (1 - options.mask_threshold))
    wy = interp_matrix(meta.src_h, meta.resized_h, meta.src_h, stride, h)
    wx = interp_matrix(meta.src_w, meta.resized_w, meta.src_w, stride, w)
    m = masks.astype(np.float64)
    z = class_logits - class_logits.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    p = prob[:, :k]
    out: dict[str, np.ndarray] = {}

    def up(i: int) -> np.ndarray:
        return wy @ m[i] @ wx.T

    if outputs.instance:
        vh, vw = -(-meta.resized_h // stride), -(-meta.resized_w // stride)
        valid = m[:, :vh, :vw]
        on = valid > t
        sig = 1 / (1 + np.exp(-valid))
        ms = (sig * on).sum((1, 2)) / (on.sum((1, 2)) + 1e-6)
        thing = labels.thing_mask
        flat = np.where(thing[None], p, -np.inf).ravel()
        cand = np.argsort(-flat, kind="stable")[: options.max_instances]
        cand = cand[np.isfinite(flat[cand])]
        best: dict[int, tuple[float, int]] = {}
        for idx in cand:
            qq, c = divmod(int(idx), k)
            s = p[qq, c] * ms[qq]
            if s >= options.score_threshold and (qq not in best or s > best[qq][0]):
                best[qq] = (s, c)
        order = sorted(best, key=lambda qq: (-best[qq][0], qq))[: options.max_instances]
        raster = np.zeros((meta.src_h, meta.src_w), np.int64)
        for rank, qq in enumerate(order, start=1):
            raster[(raster == 0) & (up(qq) > t)] = rank
        smallest = max(1, options.min_area)  # none painted, or a speck: removed
        present = [r for r in range(1, len(order) + 1) if (raster == r).sum() >= smallest]
        lut = np.zeros(len(order) + 1, np.int64)
        lut[present] = np.arange(1, len(present) + 1)
        out["instance"] = lut[raster]
        out["inst_query"] = np.array([order[r - 1] for r in present], np.int64)
        out["inst_score"] = np.array([best[order[r - 1]][0] for r in present])
    if outputs.panoptic:
        scores, plabels = prob.max(1), prob.argmax(1)
        keep = np.flatnonzero((plabels != k) & (scores > options.object_mask_threshold))
        pan = np.zeros((meta.src_h, meta.src_w), np.int64)
        if len(keep):
            ups = np.stack([up(i) for i in keep])
            winner = (scores[keep, None, None] / (1 + np.exp(-ups))).argmax(0)
            count: dict[int, int] = {}
            for j, qq in enumerate(keep):
                orig = ups[j] > t
                seg = (winner == j) & orig
                wins = (winner == j).sum()
                if wins == 0 or orig.sum() == 0 or seg.sum() == 0:
                    continue
                if wins / orig.sum() < options.overlap_threshold:
                    continue
                c = int(plabels[qq])
                if labels.isthing[c] and seg.sum() < options.min_area:  # a speck
                    continue
                lid = labels.ids[c]
                if labels.isthing[c]:
                    count[lid] = count.get(lid, 0) + 1
                    pan[seg] = lid * 1000 + count[lid]
                else:
                    pan[seg] = lid
        out["panoptic"] = pan
    if outputs.semantic:
        sig = 1 / (1 + np.exp(-m))
        s_low = np.einsum("qc,qhw->chw", p, sig)
        s_up = np.stack([wy @ s_low[c] @ wx.T for c in range(k)])
        best_c = s_up.argmax(0)
        ids = np.asarray(labels.ids)
        out["semantic"] = np.where(s_up.max(0) < 0.05, 0, ids[best_c])
    return out
