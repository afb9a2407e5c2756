"""Panoptic rule (rule 4 of the spec, Mask2Former's scheme) with self-describing segment ids.

Query selection happens on the class logits; only kept queries are sampled at camera
resolution, in row chunks. One pass produces a slot raster (kept query + 1 where that query wins
the pixel and its own logit is > T) plus three counts per query; a small finalize step applies
the overlap test and stuff merging and yields a slot -> segment id table applied to the raster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..labels import LabelSet
from ..structures import Segments
from .frame import RuleInputs
from .resample import DEFAULT_CHUNK_BYTES, Resampler, rows_per_chunk, sigmoid, softmax

#: Thing segment id = label_id * THING_ID_FACTOR + n (n = 1, 2, ... per label).
THING_ID_FACTOR = 1000


@dataclass(frozen=True)
class PanopticSelection:
    """Kept panoptic queries in query order."""

    query: np.ndarray  # (P,) int64 query index
    class_index: np.ndarray  # (P,) int32 argmax over the K foreground classes
    score: np.ndarray  # (P,) float32 max softmax probability

    def __len__(self) -> int:
        return int(self.query.shape[0])


def select_panoptic_queries(
    class_logits: np.ndarray, object_mask_threshold: float
) -> PanopticSelection:
    """Queries whose max softmax over K+1 (first on ties) is a foreground class with p > thr."""
    prob = softmax(class_logits)
    label = prob.argmax(axis=1)
    score = prob[np.arange(len(prob)), label]
    no_object = class_logits.shape[1] - 1
    keep = np.flatnonzero((label != no_object) & (score > np.float32(object_mask_threshold)))
    return PanopticSelection(keep.astype(np.int64), label[keep].astype(np.int32), score[keep])


def panoptic_slots(
    grids: np.ndarray,
    scores: np.ndarray,
    resampler: Resampler,
    threshold: np.float32,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per pixel winner ``argmax_k score_k * sigmoid(up_k)`` (first on ties) and the counts.

    Returns the uint16 slot raster (winner + 1 where the winner's logit > T, else 0) and, per
    kept query, ``wins`` (pixels it wins), ``orig`` (pixels with logit > T) and ``seg`` (pixels
    of its slot), all int64.
    """
    n = len(grids)
    height, width = resampler.height, resampler.width
    slots = np.zeros((height, width), np.uint16)
    wins = np.zeros(n, np.int64)
    orig = np.zeros(n, np.int64)
    seg = np.zeros(n, np.int64)
    if n == 0:
        return slots, wins, orig, seg
    weights = scores.astype(np.float32)[:, None, None]
    step = rows_per_chunk(n, width, chunk_bytes)
    for y in range(0, height, step):
        rows = slice(y, min(y + step, height))
        up = resampler.sample(grids, rows)
        on = up > threshold
        winner = (weights * sigmoid(up)).argmax(axis=0)
        won = np.take_along_axis(on, winner[None], axis=0)[0]
        slot = np.where(won, winner + 1, 0)
        slots[rows] = slot
        orig += np.count_nonzero(on.reshape(n, -1), axis=1)
        wins += np.bincount(winner.ravel(), minlength=n)
        seg += np.bincount(slot.ravel(), minlength=n + 1)[1:]
    return slots, wins, orig, seg


def finalize_panoptic(
    selection: PanopticSelection,
    labels: LabelSet,
    wins: np.ndarray,
    orig: np.ndarray,
    seg: np.ndarray,
    overlap_threshold: float,
    min_area: int = 1,
) -> tuple[np.ndarray, Segments]:
    """Overlap test, stuff merging and ids: the (P+1,) int32 slot -> segment id LUT and table.

    Slot k+1 is dropped (id 0) if any count is 0 or ``wins / orig < overlap_threshold``, or if
    it is a thing of fewer than ``min_area`` pixels (a speck); stuff segments of one label merge
    into id ``label_id``; things get ``label_id * 1000 + n``.
    """
    lut = np.zeros(len(selection) + 1, np.int32)
    ids: list[int] = []
    label_of: list[int] = []
    isthing: list[bool] = []
    score: list[float] = []
    area: list[int] = []
    things_per_label: dict[int, int] = {}
    for k in range(len(selection)):
        if min(wins[k], orig[k], seg[k]) == 0 or wins[k] / orig[k] < overlap_threshold:
            continue
        c = int(selection.class_index[k])
        if labels.isthing[c] and seg[k] < min_area:
            continue
        label_id = labels.ids[c]
        if labels.isthing[c]:
            things_per_label[label_id] = things_per_label.get(label_id, 0) + 1
            segment = label_id * THING_ID_FACTOR + things_per_label[label_id]
        else:
            segment = label_id
        lut[k + 1] = segment
        if segment in ids:
            j = ids.index(segment)
            score[j] = max(score[j], float(selection.score[k]))
            area[j] += int(seg[k])
            continue
        ids.append(segment)
        label_of.append(label_id)
        isthing.append(bool(labels.isthing[c]))
        score.append(float(selection.score[k]))
        area.append(int(seg[k]))
    segments = Segments(
        ids=np.asarray(ids, np.int32),
        label_id=np.asarray(label_of, np.int32),
        isthing=np.asarray(isthing, bool),
        score=np.asarray(score, np.float32),
        area=np.asarray(area, np.int64),
    )
    return lut, segments


def check_panoptic_labels(labels: LabelSet, num_queries: int) -> None:
    """Raise ConfigError if self-describing ids could collide (stuff id >= 1000, Q >= 1000)."""
    stuff = [i for i, t in zip(labels.ids, labels.isthing, strict=True) if not t]
    if stuff and max(stuff) >= THING_ID_FACTOR:
        raise ConfigError(
            f"stuff label id {max(stuff)} >= {THING_ID_FACTOR} would collide with thing segment "
            "ids (label_id * 1000 + n); renumber stuff labels below 1000"
        )
    if num_queries >= THING_ID_FACTOR:
        raise ConfigError(
            f"{num_queries} queries could give >= 1000 things of one label; panoptic ids "
            "label_id * 1000 + n need fewer than 1000 queries"
        )
    if max(labels.ids) * THING_ID_FACTOR + num_queries > np.iinfo(np.int32).max:
        raise ConfigError(f"label id {max(labels.ids)} is too large for int32 panoptic ids")


def panoptic_selection(frame: RuleInputs) -> PanopticSelection:
    """The queries rule 4 keeps; ConfigError first where segment ids could collide."""
    check_panoptic_labels(frame.labels, len(frame.class_logits))
    return select_panoptic_queries(frame.class_logits, frame.options.object_mask_threshold)


def panoptic_inference(
    frame: RuleInputs, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> tuple[Segments, np.ndarray]:
    """Rule 4: the Segments table and the int32 (src_h, src_w) panoptic id raster (0 = void)."""
    selection = panoptic_selection(frame)
    slots, wins, orig, seg = panoptic_slots(
        frame.mask_logits[selection.query],
        selection.score,
        frame.resampler(),
        frame.threshold,
        chunk_bytes,
    )
    lut, segments = finalize_panoptic(
        selection, frame.labels, wins, orig, seg, frame.options.overlap_threshold,
        frame.options.min_area,
    )  # fmt: skip
    return segments, lut[slots]
