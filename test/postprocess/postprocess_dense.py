"""A straightforward dense implementation of the post-processing rules, for cross-checks only.

It upsamples *every* query to camera resolution at once (the thing the reference must never
do), selects with plain Python loops and paints instances from the lowest rank up. The bilinear
blend uses the same coordinate formula and the same float32 operation order as the reference,
so any difference comes from selection, culling, chunking or id bookkeeping.
"""

from __future__ import annotations

import math

import numpy as np

from compactinst_ros.labels import LabelSet
from compactinst_ros.structures import FrameMeta, PostprocessOptions


def sigmoid(x: np.ndarray) -> np.ndarray:
    """float32 logistic."""
    with np.errstate(over="ignore"):
        return np.float32(1) / (np.float32(1) + np.exp(-x))


def upsample_all(grids: np.ndarray, meta: FrameMeta, stride: int) -> np.ndarray:
    """(N, src_h, src_w) float32: every grid sampled at every camera pixel (rule 1)."""
    h, w = grids.shape[1:]
    axes = []
    for src, resized, size in ((meta.src_h, meta.resized_h, h), (meta.src_w, meta.resized_w, w)):
        pos = np.array(
            [
                min(max((x + 0.5) * (resized / src) / stride - 0.5, 0.0), size - 1)
                for x in range(src)
            ]
        )
        i0 = np.floor(pos).astype(int)
        axes.append((i0, np.minimum(i0 + 1, size - 1), (pos - i0).astype(np.float32)))
    (i0, i1, wy), (j0, j1, wx) = axes
    top = grids[:, i0, :]
    vert = top + (grids[:, i1, :] - top) * wy[None, :, None]
    left = vert[:, :, j0]
    return left + (vert[:, :, j1] - left) * wx


def dense_postprocess(
    cls: np.ndarray,
    masks: np.ndarray,
    stride: int,
    meta: FrameMeta,
    labels: LabelSet,
    options: PostprocessOptions,
) -> dict:
    """Instance, panoptic and semantic results of the contract rules computed densely."""
    k = labels.num_classes
    z = cls - cls.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    t = np.float32(math.log(options.mask_threshold / (1 - options.mask_threshold)))
    up = upsample_all(masks, meta, stride)
    out: dict = {}

    # Instances: pairs over things, top-k, mask score at low res in the valid region.
    vh, vw = math.ceil(meta.resized_h / stride), math.ceil(meta.resized_w / stride)
    pairs = [(float(prob[q, c]), q * k + c, q, c) for q in range(len(cls)) for c in range(k)]
    pairs = [p for p in pairs if labels.isthing[p[3]]]
    pairs.sort(key=lambda p: (-p[0], p[1]))
    best: dict[int, tuple[float, int]] = {}
    for p, _, q, c in pairs[: options.max_instances]:
        m = masks[q, :vh, :vw]
        on = m > t
        mscore = np.float32(sigmoid(m)[on].sum(dtype=np.float64) / (on.sum() + 1e-6))
        score = float(np.float32(np.float32(p) * mscore))
        if score >= np.float32(options.score_threshold) and (q not in best or score > best[q][0]):
            best[q] = (score, c)
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))[: options.max_instances]
    raster = np.zeros((meta.src_h, meta.src_w), np.int64)
    for rank in range(len(ranked), 0, -1):
        raster[up[ranked[rank - 1][0]] > t] = rank
    table = []
    for rank, (_, (score, c)) in enumerate(ranked, start=1):
        ys, xs = np.nonzero(raster == rank)
        if len(ys) and len(ys) >= options.min_area:  # none painted, or a speck: removed
            box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            table.append((len(table) + 1, rank, c, labels.ids[c], score, box, len(ys)))
    final = np.zeros_like(raster)
    for new_id, rank, *_ in table:
        final[raster == rank] = new_id
    out["instance_raster"] = final
    out["instances"] = table

    # Panoptic: Mask2Former's loop over kept queries.
    label = prob.argmax(axis=1)
    score = prob.max(axis=1)
    keep = [
        q for q in range(len(cls)) if label[q] != k and score[q] > options.object_mask_threshold
    ]
    pan = np.zeros((meta.src_h, meta.src_w), np.int64)
    segments: list[list] = []
    if keep:
        weighted = np.stack([np.float32(score[q]) * sigmoid(up[q]) for q in keep])
        winner = weighted.argmax(axis=0)
        counter: dict[int, int] = {}
        for slot, q in enumerate(keep):
            fg = up[q] > t
            wins, orig = int((winner == slot).sum()), int(fg.sum())
            seg = (winner == slot) & fg
            if wins == 0 or orig == 0 or seg.sum() == 0 or wins / orig < options.overlap_threshold:
                continue
            if labels.isthing[label[q]] and seg.sum() < options.min_area:  # a speck
                continue
            lab = labels.ids[label[q]]
            if labels.isthing[label[q]]:
                counter[lab] = counter.get(lab, 0) + 1
                sid = lab * 1000 + counter[lab]
            else:
                sid = lab
            pan[seg] = sid
            known = [s for s in segments if s[0] == sid]
            if known:
                known[0][2] = max(known[0][2], float(score[q]))
            else:
                segments.append([sid, bool(labels.isthing[label[q]]), float(score[q])])
    out["panoptic_raster"] = pan
    out["segments"] = [(*s, int((pan == s[0]).sum())) for s in segments]

    # Semantic: low-res class maps, upsampled, argmax, void floor.
    q, h, w = masks.shape
    maps = (prob[:, :k].T @ sigmoid(masks).reshape(q, h * w)).reshape(k, h, w)
    sem_up = upsample_all(maps, meta, stride)
    ids = np.asarray(labels.ids)
    out["semantic_raster"] = np.where(sem_up.max(axis=0) >= 0.05, ids[sem_up.argmax(axis=0)], 0)
    return out
