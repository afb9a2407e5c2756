"""Instance ids that persist across frames: match each frame's instances to live tracks.

Post-processing numbers instances by score every frame, so the same object changes id from frame
to frame. :class:`InstanceTracker` rewrites a frame's instance table and raster so that an object
keeps one **track id** for as long as it is followed (numpy and OpenCV: no ROS, no torch).

Association, per frame:

1. Masks are compared on the instance raster sampled every ``stride`` pixels (a strided view; no
   per-instance mask is built at camera resolution). Each track keeps the sampled pixels of its
   last matched mask as flat indices, so one ``bincount`` gives every track x instance overlap.
2. IoU between a track and an instance of the **same class**; a pair where either mask has no
   sampled pixel (smaller than the grid) uses box IoU instead.
3. Pairs below ``min_iou`` are ruled out; the rest are assigned to maximise total IoU
   (:func:`linear_sum_assignment`, Jonker-Volgenant shortest augmenting paths in numpy).
4. A matched track takes the instance's mask and box. An unmatched instance starts a new track.
   An unmatched track coasts (keeps its last mask) for up to ``max_missed`` frames, unless it is
   still tentative (matched in fewer than ``min_hits`` frames), which ends at its first miss.

Track ids are uint16 in [1, 65535], handed out in increasing order and wrapping around past
65535, skipping ids still live, so an id is never reused while its track lives. The output
raster is the input raster through one lookup table (:func:`remap_ids`: ``cv2.LUT`` when every
raster value fits a byte, about 2.8x faster than numpy's gather at 1080p, else numpy);
:meth:`InstanceTracker.associate` gives the track ids alone, for callers that need no raster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import cv2
import numpy as np

from .errors import ConfigError, InputError
from .jit import njit_cached
from .raster_memory import message_raster
from .structures import Instances

#: Largest track id (ids are uint16 raster values; 0 is background).
MAX_TRACK_ID = 65535


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment of a rectangular cost matrix (scipy's contract, numpy only).

    Returns (row_ind, col_ind), sorted by row, pairing min(rows, cols) rows and columns. Uses
    Jonker-Volgenant shortest augmenting paths with dual potentials (Crouse 2016, as scipy does):
    one Dijkstra-like search per row, vectorised over the columns.
    """
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 2:
        raise ValueError(f"cost matrix must be 2-D, got shape {cost.shape}")
    if not np.isfinite(cost).all():
        raise ValueError("cost matrix has NaN or infinite entries; use a large finite cost instead")
    transposed = cost.shape[0] > cost.shape[1]
    if transposed:
        cost = cost.T
    n_rows, n_cols = cost.shape
    u, v = np.zeros(n_rows), np.zeros(n_cols)
    col_for_row = np.full(n_rows, -1, np.intp)
    row_for_col = np.full(n_cols, -1, np.intp)
    for start in range(n_rows):
        shortest = np.full(n_cols, np.inf)
        path = np.full(n_cols, -1, np.intp)
        unvisited = np.ones(n_cols, bool)
        visited_rows = [start]
        row, min_val, sink = start, 0.0, -1
        while sink < 0:
            reduced = min_val + cost[row] - u[row] - v
            better = unvisited & (reduced < shortest)
            path[better] = row
            shortest[better] = reduced[better]
            candidates = np.flatnonzero(unvisited)
            lengths = shortest[candidates]
            min_val = float(lengths.min())
            ties = candidates[lengths == min_val]
            free = ties[row_for_col[ties] < 0]
            col = int(free[0] if free.size else ties[0])  # prefer a free column: shorter path
            unvisited[col] = False
            if row_for_col[col] < 0:
                sink = col
            else:
                row = int(row_for_col[col])
                visited_rows.append(row)
        others = np.asarray(visited_rows[1:], np.intp)
        u[start] += min_val
        u[others] += min_val - shortest[col_for_row[others]]
        done = ~unvisited
        v[done] -= min_val - shortest[done]
        col = sink
        while True:
            row = int(path[col])
            row_for_col[col] = row
            col_for_row[row], col = col, col_for_row[row]
            if row == start:
                break
    if transposed:
        order = np.argsort(col_for_row)
        return col_for_row[order], order
    return np.arange(n_rows), col_for_row


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of x0, y0, x1, y1 boxes with exclusive x1, y1."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def assign_by_iou(iou: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (rows, cols) maximising total IoU among ``allowed`` pairs; rows/cols never repeat.

    A pair whose row and column have no other allowed pair (an object apart from the others: the
    usual case) is taken as is; only the rows and columns left compete in the assignment.
    """
    row_degree, col_degree = allowed.sum(axis=1), allowed.sum(axis=0)
    alone = allowed & (row_degree[:, None] == 1) & (col_degree[None, :] == 1)
    rows_alone, cols_alone = np.nonzero(alone)
    rows = np.flatnonzero(row_degree > alone.sum(axis=1))
    cols = np.flatnonzero(col_degree > alone.sum(axis=0))
    sub = allowed[np.ix_(rows, cols)]
    r, c = linear_sum_assignment(np.where(sub, -iou[np.ix_(rows, cols)], 0.0))
    keep = sub[r, c]
    pairs_r = np.concatenate([rows_alone, rows[r[keep]]])
    pairs_c = np.concatenate([cols_alone, cols[c[keep]]])
    order = np.argsort(pairs_r)
    return pairs_r[order], pairs_c[order]


@dataclass(frozen=True)
class TrackerOptions:
    """How instances are matched to tracks and how long an unmatched track lives."""

    min_iou: float = 0.3  # below this a track and an instance are never matched
    max_missed: int = 5  # frames a confirmed track survives unmatched (coasting)
    min_hits: int = 2  # matched frames before a track is confirmed and may coast
    stride: int = 4  # the raster is sampled every ``stride`` pixels for mask IoU

    def __post_init__(self) -> None:
        if not 0.0 < self.min_iou <= 1.0:
            raise ConfigError(f"min_iou={self.min_iou} must be in (0, 1]; 0.3 is the default")
        if self.max_missed < 0:
            raise ConfigError(f"max_missed={self.max_missed} must be >= 0 (0: no coasting)")
        if self.min_hits < 1:
            raise ConfigError(f"min_hits={self.min_hits} must be >= 1 (1: confirmed at birth)")
        if self.stride < 1:
            raise ConfigError(f"stride={self.stride} must be >= 1 (4 suits 1080p)")


@dataclass
class _Track:
    """A followed object: its id, class, last matched box and sampled mask, hit/miss counts."""

    track_id: int
    class_index: int
    box: np.ndarray  # (4,) float32
    pixels: np.ndarray  # (P,) intp flat indices into the sampled raster
    hits: int = 1
    missed: int = 0


class InstanceTracker:
    """Replaces per-frame instance ids with track ids that persist while an object is followed.

    Call :meth:`update` once per frame in time order; call :meth:`reset` when the stream jumps
    (a bag loops, time goes backwards, the camera changes). A change of raster size resets the
    tracker by itself. With ``enabled=False`` (settable at run time) :meth:`update` returns its
    inputs unchanged and keeps no state.
    """

    def __init__(self, options: TrackerOptions | None = None, enabled: bool = True) -> None:
        self.options = options or TrackerOptions()
        self._enabled = bool(enabled)
        self._next_id = 1
        self._tracks: list[_Track] = []
        self._shape: tuple[int, int] | None = None

    @property
    def enabled(self) -> bool:
        """Whether :meth:`update` rewrites ids; switching it either way starts afresh."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if bool(value) != self._enabled:
            self.reset()
        self._enabled = bool(value)

    @property
    def live_ids(self) -> np.ndarray:
        """Sorted uint16 ids of the live tracks (matched this frame or coasting)."""
        return np.sort(np.array([t.track_id for t in self._tracks], np.uint16))

    def reset(self) -> None:
        """Forget every track; the next frame's instances start new tracks (ids keep counting)."""
        self._tracks = []
        self._shape = None

    def update(self, instances: Instances, raster: np.ndarray) -> tuple[Instances, np.ndarray]:
        """Return ``instances`` and ``raster`` with each instance id replaced by its track id.

        ``raster`` is (H, W) uint16, 0 = background, value ``instances.ids[i]`` = row i. The
        table keeps its rows and order; only ``ids`` changes. Raster values that no row names
        become background.
        """
        if not self._enabled:
            return instances, raster
        track_ids = self.associate(instances, raster)
        return replace(instances, ids=track_ids), remap_ids(raster, instances.ids, track_ids)

    def associate(self, instances: Instances, raster: np.ndarray) -> np.ndarray:
        """Track id (uint16) of each row of ``instances``, advancing the tracks by one frame.

        :meth:`update` without the full-resolution remap of ``raster``; disabled, the rows' own
        ids. Inputs as for :meth:`update`.
        """
        if not self._enabled:
            return instances.ids
        ids = self._check(instances, raster)
        if self._shape != raster.shape:
            self.reset()
            self._shape = raster.shape
        opts = self.options
        row_of = np.zeros(MAX_TRACK_ID + 1, np.intp)  # raster value -> row + 1
        row_of[ids] = np.arange(1, len(ids) + 1)
        sampled, pixels = sample_rows(raster, row_of, opts.stride, len(ids))

        tracks = self._tracks
        iou = self._iou(tracks, instances, sampled, pixels)
        same_class = (
            np.array([t.class_index for t in tracks], np.int64)[:, None]
            == (instances.class_index.astype(np.int64)[None, :])
        )
        matched_t, matched_i = assign_by_iou(iou, same_class & (iou >= opts.min_iou))

        track_ids = np.zeros(len(ids), np.uint16)
        matched_track = np.zeros(len(tracks), bool)
        matched_track[matched_t] = True
        for t, i in zip(matched_t.tolist(), matched_i.tolist(), strict=True):
            track = tracks[t]
            track.box, track.pixels = instances.box[i].copy(), pixels[i]
            track.hits += 1
            track_ids[i] = track.track_id
        survivors = []
        for track, matched in zip(tracks, matched_track.tolist(), strict=True):
            track.missed = 0 if matched else track.missed + 1
            if matched or (track.hits >= opts.min_hits and track.missed <= opts.max_missed):
                survivors.append(track)
        self._tracks = survivors
        unmatched = np.flatnonzero(track_ids == 0)
        track_ids[unmatched] = self._new_ids(unmatched.size)
        self._tracks += [
            _Track(
                int(track_ids[i]), int(instances.class_index[i]), instances.box[i].copy(), pixels[i]
            )
            for i in unmatched.tolist()
        ]
        return track_ids

    @staticmethod
    def _check(instances: Instances, raster: np.ndarray) -> np.ndarray:
        """Validate the frame and return its ids as an index array."""
        if raster.dtype != np.uint16 or raster.ndim != 2:
            raise InputError(
                f"instance raster must be (H, W) uint16, got {raster.shape} {raster.dtype}; pass "
                "FrameResult.instance_raster (request OutputSet(instance=True))"
            )
        ids = instances.ids.astype(np.intp)
        values, counts = np.unique(ids, return_counts=True)
        if (values < 1).any() or (values > MAX_TRACK_ID).any() or (counts > 1).any():
            raise InputError(
                f"instance ids must be unique and in [1, {MAX_TRACK_ID}]; got ids "
                f"{values[(counts > 1) | (values < 1) | (values > MAX_TRACK_ID)].tolist()} "
                "repeated or out of range (pass the table post-processing made with the raster)"
            )
        return ids

    @staticmethod
    def _iou(
        tracks: list[_Track], instances: Instances, sampled: np.ndarray, pixels: list[np.ndarray]
    ) -> np.ndarray:
        """(tracks, instances) mask IoU on the sampled grid; box IoU where a mask has no sample."""
        n = len(instances)
        if not tracks or not n:
            return np.zeros((len(tracks), n))
        owner = np.repeat(np.arange(len(tracks)), [t.pixels.size for t in tracks])
        under = sampled[np.concatenate([t.pixels for t in tracks])]
        joint = np.bincount(owner * (n + 1) + under, minlength=len(tracks) * (n + 1))
        inter = joint.reshape(len(tracks), n + 1)[:, 1:].astype(np.float64)
        area_t = np.array([t.pixels.size for t in tracks], np.float64)
        area_i = np.array([p.size for p in pixels], np.float64)
        union = area_t[:, None] + area_i[None, :] - inter
        iou = inter / np.maximum(union, 1.0)
        tiny = (area_t[:, None] == 0) | (area_i[None, :] == 0)
        if tiny.any():
            boxes = box_iou(
                np.stack([t.box for t in tracks]).astype(np.float64),
                instances.box.astype(np.float64),
            )
            iou = np.where(tiny, boxes, iou)
        return iou

    def _new_ids(self, count: int) -> list[int]:
        """``count`` ids in [1, 65535] after the last one handed out, skipping live tracks' ids."""
        live = {t.track_id for t in self._tracks}
        if len(live) + count > MAX_TRACK_ID:
            raise InputError(
                f"{len(live)} live tracks + {count} new ones exceed {MAX_TRACK_ID} track ids; "
                "lower max_missed or max_instances"
            )
        ids, candidate = [], self._next_id
        while len(ids) < count:
            if candidate not in live:
                ids.append(candidate)
            candidate = candidate % MAX_TRACK_ID + 1
        self._next_id = candidate
        return ids


def sample_rows(
    raster: np.ndarray, row_of: np.ndarray, stride: int, n: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the row + 1 of every ``stride``-th pixel of ``raster`` through ``row_of``, flat, 0 for
    none; per row 1..n, the flat indices of its samples, ascending). One compiled pass and a
    counting sort where numba is installed (0.1 ms at 1080p against 0.8), numpy's gather and
    stable sort otherwise; equal results."""
    if _sample_rows_jit is None:
        sampled = row_of[raster[::stride, ::stride]].ravel()
        return sampled, _pixels_by_row(sampled, n)
    rows, cols = -(-raster.shape[0] // stride), -(-raster.shape[1] // stride)
    sampled = np.empty(rows * cols, np.intp)
    counts = np.zeros(n + 1, np.intp)
    _sample_rows_jit(raster, row_of, stride, sampled, counts)
    order = np.empty(int(counts[1:].sum()), np.intp)
    ends = np.cumsum(counts[1:])
    _group_by_row_jit(sampled, ends - counts[1:], order)
    return sampled, np.split(order, ends[:-1]) if n else []


def _sample_rows(raster, row_of, stride, sampled, counts):
    """``sampled`` = ``row_of[raster[::stride, ::stride]]`` flat; ``counts[r]`` its r's."""
    k = 0
    for y in range(0, raster.shape[0], stride):
        line = raster[y]
        for x in range(0, raster.shape[1], stride):
            row = row_of[line[x]]
            sampled[k] = row
            counts[row] += 1
            k += 1


def _group_by_row(sampled, starts, order):
    """Counting sort: the indices of ``sampled`` of row r (> 0), ascending, from ``starts[r-1]``."""
    at = starts.copy()
    for i in range(sampled.shape[0]):
        row = sampled[i]
        if row:
            order[at[row - 1]] = i
            at[row - 1] += 1


_sample_rows_jit = njit_cached(_sample_rows)
_group_by_row_jit = njit_cached(_group_by_row)


def _pixels_by_row(sampled: np.ndarray, n: int) -> list[np.ndarray]:
    """Flat indices of the sampled pixels of rows 1..n (``sampled`` holds row + 1, 0 = none)."""
    foreground = np.flatnonzero(sampled)
    owner = sampled[foreground]
    order = np.argsort(owner.astype(np.uint16), kind="stable")  # radix sort: n <= 65535
    counts = np.bincount(owner, minlength=n + 1)[1:]
    return np.split(foreground[order], np.cumsum(counts)[:-1]) if n else []


def remap_ids(raster: np.ndarray, ids: np.ndarray, new_ids: np.ndarray) -> np.ndarray:
    """(H, W) uint16 ``raster`` with value ``ids[i]`` replaced by ``new_ids[i]``, others 0.

    One table lookup: ``cv2.LUT`` on the raster narrowed to uint8 when its largest value is at
    most 255 (the max check is a fraction of the lookup), else ``np.take``; equal results.
    """
    ids = np.asarray(ids, np.intp)
    out = message_raster(raster.shape, np.uint16)  # the node publishes it: no copy then
    if raster.size and int(raster.max()) <= 255:
        small = ids <= 255  # an id above the raster's maximum is not in it
        lut = np.zeros(256, np.uint16)
        lut[ids[small]] = new_ids[small]
        return cv2.LUT(raster.astype(np.uint8), lut, dst=out)
    lut = np.zeros(MAX_TRACK_ID + 1, np.uint16)
    lut[ids] = new_ids
    return np.take(lut, raster, out=out)
