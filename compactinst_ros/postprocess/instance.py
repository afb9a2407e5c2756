"""Instance rule (rule 3 of the spec): query selection at mask resolution, then one id raster.

Everything that can be decided on the low-resolution grid is: class probabilities, the top
(query, class) pairs, mask scores, the threshold and the per-query de-duplication. Only the kept
queries are sampled at camera resolution, each only inside the camera window its positive
texels can reach, in row chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..labels import LabelSet
from ..structures import Instances
from .frame import RuleInputs
from .resample import DEFAULT_CHUNK_BYTES, Resampler, softmax
from .tiles import cull_margin


@dataclass(frozen=True)
class InstanceSelection:
    """Kept instances in rank order (score descending, ties: lower query index first)."""

    query: np.ndarray  # (N,) int64 query index
    class_index: np.ndarray  # (N,) int32 contiguous class index (a thing class)
    score: np.ndarray  # (N,) float32 class probability x mask score

    @classmethod
    def empty(cls) -> InstanceSelection:
        """A selection that keeps nothing."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32))

    def __len__(self) -> int:
        return int(self.query.shape[0])


def mask_scores(
    mask_logits: np.ndarray,
    mask_probs: np.ndarray,
    valid_h: int,
    valid_w: int,
    threshold: np.float32,
) -> np.ndarray:
    """(N,) float32 mean sigmoid over texels with logit > T in the valid region (0 if none).

    ``sum(sigmoid(m) * (m > T)) / (#(m > T) + 1e-6)``, accumulated in float64;
    ``mask_probs`` is ``sigmoid(mask_logits)``.
    """
    n = len(mask_logits)
    m = mask_logits[:, :valid_h, :valid_w].reshape(n, valid_h * valid_w)
    probs = mask_probs[:, :valid_h, :valid_w].reshape(n, valid_h * valid_w)
    on = m > threshold
    total = np.where(on, probs, np.float32(0.0)).sum(axis=1, dtype=np.float64)
    return (total / (on.sum(axis=1) + 1e-6)).astype(np.float32)


def select_instances(frame: RuleInputs) -> InstanceSelection:
    """Rule 3 up to the raster: top pairs over thing classes, scores, threshold, dedupe, cap.

    Pairs are ranked by class probability descending, ties by the flat (query, class) index;
    a query keeps its best-scoring pair (ties: lower class index).
    """
    k, options = frame.labels.num_classes, frame.options
    things = np.flatnonzero(frame.labels.thing_mask)
    if len(things) == 0 or len(frame.class_logits) == 0:
        return InstanceSelection.empty()
    p = softmax(frame.class_logits)[:, :k][:, things]
    flat = p.ravel()
    top = np.argsort(-flat, kind="stable")[: options.max_instances]
    query = top // len(things)
    class_index = things[top % len(things)].astype(np.int32)
    unique_q, inverse = np.unique(query, return_inverse=True)
    vh, vw = frame.valid_region()
    mscore = mask_scores(
        frame.mask_logits[unique_q], frame.mask_probs[unique_q], vh, vw, frame.threshold
    )
    score = (flat[top] * mscore[inverse.ravel()]).astype(np.float32)
    keep = score >= np.float32(options.score_threshold)
    query, class_index, score = query[keep], class_index[keep], score[keep]
    order = np.lexsort((class_index, query, -score))
    query, class_index, score = query[order], class_index[order], score[order]
    _, first = np.unique(query, return_index=True)
    first = np.sort(first)[: options.max_instances]
    return InstanceSelection(query[first].astype(np.int64), class_index[first], score[first])


def texel_boxes(grids: np.ndarray, threshold: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Per grid, whether any texel may exceed T and its inclusive texel box (r0, r1, c0, c1)."""
    near = grids > (threshold - cull_margin(grids))[:, None, None]
    rows, cols = near.any(axis=2), near.any(axis=1)
    has = rows.any(axis=1)
    h, w = grids.shape[1:]
    box = np.stack(
        [
            rows.argmax(axis=1),
            h - 1 - rows[:, ::-1].argmax(axis=1),
            cols.argmax(axis=1),
            w - 1 - cols[:, ::-1].argmax(axis=1),
        ],
        axis=1,
    )
    return has, box


def paint_instances(
    grids: np.ndarray,
    resampler: Resampler,
    threshold: np.float32,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raster of 1-based slots: each pixel gets the first grid (in order) whose sample is > T.

    Returns the uint16 (H, W) slot raster, the (N,) int64 pixel count per slot and the (N, 4)
    int64 inclusive pixel box (x0, y0, x1, y1) per slot (-1 where the slot has no pixel). Each
    grid is sampled only inside the camera window that its near-positive texels can reach.
    """
    n = len(grids)
    raster = np.zeros((resampler.height, resampler.width), np.uint16)
    area = np.zeros(n, np.int64)
    box = np.full((n, 4), -1, np.int64)
    has, tbox = texel_boxes(grids, threshold)
    y_start, y_stop = resampler.camera_span(tbox[:, 0], tbox[:, 1], axis=0)
    x_start, x_stop = resampler.camera_span(tbox[:, 2], tbox[:, 3], axis=1)
    for i in np.flatnonzero(has & (y_stop > y_start) & (x_stop > x_start)):
        cols = slice(int(x_start[i]), int(x_stop[i]))
        step = max(1, chunk_bytes // (4 * (cols.stop - cols.start)))
        for y in range(int(y_start[i]), int(y_stop[i]), step):
            rows = slice(y, min(y + step, int(y_stop[i])))
            window = raster[rows, cols]
            paint = (resampler.sample(grids[i : i + 1], rows, cols)[0] > threshold) & (window == 0)
            window[paint] = i + 1
            count = int(np.count_nonzero(paint))
            if count == 0:
                continue
            area[i] += count
            ys = np.flatnonzero(paint.any(axis=1)) + rows.start
            xs = np.flatnonzero(paint.any(axis=0)) + cols.start
            lo = np.array([xs[0], ys[0]])
            hi = np.array([xs[-1], ys[-1]])
            box[i, :2] = lo if box[i, 0] < 0 else np.minimum(box[i, :2], lo)
            box[i, 2:] = np.maximum(box[i, 2:], hi)
    return raster, area, box


def drop_small(area: np.ndarray, min_area: int) -> tuple[np.ndarray, np.ndarray]:
    """Slots that painted fewer than ``max(1, min_area)`` pixels are removed (none painted, or a
    speck): the (N+1,) uint16 renumbering LUT and the keep mask.

    The LUT maps slot 0 and the removed slots to 0 and the kept slots to 1..n in rank order
    (rule 3 step 7).
    """
    keep = area >= max(1, min_area)
    lut = np.zeros(len(area) + 1, np.uint16)
    lut[1:][keep] = np.arange(1, int(keep.sum()) + 1)
    return lut, keep


def instances_table(
    selection: InstanceSelection,
    labels: LabelSet,
    area: np.ndarray,
    box: np.ndarray,
    keep: np.ndarray,
) -> Instances:
    """The Instances table of the kept slots; ``box`` is inclusive (x0, y0, x1, y1) per slot."""
    n = int(keep.sum())
    box = box[keep].astype(np.float32)
    box[:, 2:] += 1
    class_index = selection.class_index[keep]
    return Instances(
        ids=np.arange(1, n + 1, dtype=np.uint16),
        class_index=class_index.astype(np.int32),
        label_id=labels.id_array[class_index],
        score=selection.score[keep].astype(np.float32),
        box=box.reshape(n, 4),
        area=area[keep],
    )


def instance_inference(
    frame: RuleInputs, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> tuple[Instances, np.ndarray]:
    """Rule 3: the Instances table and the uint16 (src_h, src_w) id raster (0 = background)."""
    selection = select_instances(frame)
    raster, area, box = paint_instances(
        frame.mask_logits[selection.query], frame.resampler(), frame.threshold, chunk_bytes
    )
    lut, keep = drop_small(area, frame.options.min_area)
    if not keep.all():
        raster = lut[raster]
    return instances_table(selection, frame.labels, area, box, keep), raster
