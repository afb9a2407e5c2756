"""Track ids: the numpy assignment equals scipy's, and ids persist on moving synthetic sequences."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment as scipy_assignment

from compactinst_ros.errors import ConfigError, InputError
from compactinst_ros.eval.tracking_metrics import tracking_counts
from compactinst_ros.structures import Instances
from compactinst_ros.tracking import (
    MAX_TRACK_ID,
    InstanceTracker,
    TrackerOptions,
    assign_by_iou,
    linear_sum_assignment,
)
from compactinst_ros.train.synthetic import render_sequence


def _frame(
    raster: np.ndarray, classes: dict[int, int], rng: np.random.Generator | None = None
) -> tuple[Instances, np.ndarray]:
    """Instance table + uint16 raster of objects ``raster`` values -> class, ids shuffled.

    Shuffling stands in for post-processing's per-frame score order.
    """
    values = [v for v in classes if (raster == v).any()]
    ids = np.arange(1, len(values) + 1, dtype=np.uint16)
    if rng is not None:
        ids = rng.permutation(ids)
    lut = np.zeros(int(raster.max()) + 1, np.uint16)
    boxes = []
    for value, new_id in zip(values, ids.tolist(), strict=True):
        lut[value] = new_id
        ys, xs = np.nonzero(raster == value)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
    n = len(values)
    table = Instances(
        ids=ids,
        class_index=np.array([classes[v] for v in values], np.int32),
        label_id=np.array([classes[v] + 1 for v in values], np.int32),
        score=np.ones(n, np.float32),
        box=np.array(boxes, np.float32).reshape(n, 4),
        area=np.ones(n, np.int64),
    )
    return table, lut[raster]


def _squares(shape: tuple[int, int], squares: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Raster of (y, x, size, value) squares, drawn in order (later ones on top)."""
    raster = np.zeros(shape, np.int32)
    for y, x, size, value in squares:
        raster[max(y, 0) : max(y + size, 0), max(x, 0) : max(x + size, 0)] = value
    return raster


def _track_ids(
    tracker: InstanceTracker, raster: np.ndarray, classes: dict[int, int]
) -> dict[int, int]:
    """Run one frame; return raster value -> track id read back from the output raster."""
    table, frame = _frame(raster, classes)
    out_table, out = tracker.update(table, frame)
    assert out.dtype == np.uint16 and out.shape == raster.shape
    assert sorted(out_table.ids.tolist()) == sorted(set(np.unique(out).tolist()) - {0})
    return {v: int(out[raster == v][0]) for v in classes if (raster == v).any()}


def test_assignment_equals_scipy():
    rng = np.random.default_rng(0)
    for trial in range(400):
        n, m = rng.integers(0, 10, 2)
        cost = (
            rng.integers(-3, 4, (n, m)).astype(float) if trial % 2 else rng.normal(size=(n, m)) * 10
        )
        rows, cols = linear_sum_assignment(cost)
        ref_rows, ref_cols = scipy_assignment(cost)
        assert len(rows) == min(n, m) and np.all(np.diff(rows) > 0)
        assert len(set(cols.tolist())) == len(cols)
        assert cost[rows, cols].sum() == pytest.approx(cost[ref_rows, ref_cols].sum())
    square = rng.random((6, 6))
    np.testing.assert_array_equal(linear_sum_assignment(square)[1], scipy_assignment(square)[1])


def test_assignment_rejects_bad_costs():
    with pytest.raises(ValueError, match="2-D"):
        linear_sum_assignment(np.zeros(3))
    with pytest.raises(ValueError, match="infinite"):
        linear_sum_assignment(np.array([[0.0, np.inf]]))


def test_assign_by_iou_only_allowed_pairs_max_total():
    iou = np.array([[0.9, 0.6, 0.0], [0.7, 0.0, 0.0], [0.0, 0.0, 0.2]])
    rows, cols = assign_by_iou(iou, iou >= 0.3)
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 1), (1, 0)]  # 1.3 > 0.9


def test_ids_persist_through_motion_entering_leaving():
    tracker = InstanceTracker(TrackerOptions(stride=2))
    classes = {1: 0, 2: 0, 3: 1}
    seen: dict[int, int] = {}
    for t in range(12):
        squares = [(10, 4 + 3 * t, 20, 1)]  # moves right
        if t >= 4:
            squares.append((50, 5 + 2 * (t - 4), 16, 2))  # enters at frame 4
        if t < 8:
            squares.append((40, 90, 18, 3))  # leaves after frame 7
        ids = _track_ids(tracker, _squares((80, 120), squares), classes)
        for value, track_id in ids.items():
            assert seen.setdefault(value, track_id) == track_id  # persists
    assert len(set(seen.values())) == 3 and seen[2] not in (seen[1], seen[3])  # new object, new id


def test_crossing_objects_keep_their_ids():
    """Two same-class objects pass each other, the near one hiding the far one's lower half."""
    tracker = InstanceTracker(TrackerOptions(stride=2))
    seen: dict[int, int] = {}
    for t in range(16):
        far = (6, 10 + 5 * t, 30, 1)
        near = (22, 90 - 5 * t, 26, 2)
        ids = _track_ids(tracker, _squares((70, 130), [far, near]), {1: 0, 2: 0})
        for value, track_id in ids.items():
            assert seen.setdefault(value, track_id) == track_id
    assert seen[1] != seen[2]


def test_coasting_min_hits_and_class_gate():
    opts = TrackerOptions(max_missed=2, min_hits=2, stride=2)
    tracker = InstanceTracker(opts)
    square = _squares((40, 40), [(5, 5, 12, 1)])
    empty = np.zeros_like(square)
    first = _track_ids(tracker, square, {1: 0})[1]
    assert _track_ids(tracker, square, {1: 0})[1] == first  # confirmed (2 hits)
    _track_ids(tracker, empty, {1: 0})
    _track_ids(tracker, empty, {1: 0})
    assert _track_ids(tracker, square, {1: 0})[1] == first  # coasted through 2 missed frames
    for _ in range(3):
        _track_ids(tracker, empty, {1: 0})
    second = _track_ids(tracker, square, {1: 0})[1]
    assert second != first  # 3 missed frames end the track
    _track_ids(tracker, empty, {1: 0})
    third = _track_ids(tracker, square, {1: 0})[1]
    assert third not in (first, second)  # a one-frame (tentative) track does not coast
    assert _track_ids(tracker, square, {1: 1})[1] not in (first, second, third)  # class changed


def test_instance_smaller_than_the_grid_matches_by_box():
    tracker = InstanceTracker(TrackerOptions(stride=8))
    dot = [_squares((64, 64), [(9 + t, 9, 2, 1)]) for t in range(3)]  # never on the 8-px grid
    assert len({_track_ids(tracker, d, {1: 0})[1] for d in dot}) == 1


def test_ids_are_uint16_wrap_and_skip_live():
    """Churn through all 65535 ids: the live long-lived object's id is never handed out again."""
    tracker = InstanceTracker(TrackerOptions(stride=1, max_missed=0))
    n = 400  # one-pixel objects in row 1; the anchor (row 0 of the table) is pixel (0, 0)
    ys, xs = np.r_[0, np.ones(n, int)], np.r_[0, np.arange(n)]
    box = np.stack([xs, ys, xs + 1, ys + 1], 1).astype(np.float32)
    handed_out = []
    for t in range(MAX_TRACK_ID // n + 3):
        ids = np.random.default_rng(t).permutation(np.arange(1, n + 2)).astype(np.uint16)
        raster = np.zeros((2, n), np.uint16)
        raster[ys, xs] = ids
        table = Instances(
            ids=ids,
            class_index=np.r_[0, np.full(n, 1 + t % 2)].astype(np.int32),
            label_id=np.ones(n + 1, np.int32),
            score=np.ones(n + 1, np.float32),
            box=box,
            area=np.ones(n + 1, np.int64),
        )  # churn class alternates
        out_table, out = tracker.update(table, raster)
        np.testing.assert_array_equal(out[ys, xs], out_table.ids)
        assert out_table.ids[0] == 1  # the first id handed out, kept while the anchor lives
        assert len(set(out_table.ids.tolist())) == n + 1 and out_table.ids.min() >= 1
        handed_out += out_table.ids[1:].tolist()
    assert len(handed_out) > MAX_TRACK_ID  # so ids wrapped around
    assert max(handed_out) == MAX_TRACK_ID and 1 not in handed_out


def test_reset_disable_and_bad_input():
    tracker = InstanceTracker(TrackerOptions(stride=2))
    square = _squares((40, 40), [(5, 5, 12, 1)])
    first = _track_ids(tracker, square, {1: 0})[1]
    tracker.reset()
    assert _track_ids(tracker, square, {1: 0})[1] != first  # fresh track, ids keep counting
    tracker.enabled = False
    table, frame = _frame(square, {1: 0})
    assert tracker.update(table, frame) == (table, frame)
    assert tracker.live_ids.size == 0
    tracker.enabled = True
    assert len(_track_ids(tracker, np.zeros((30, 30), np.int32), {})) == 0  # new size: resets
    with pytest.raises(InputError, match="uint16"):
        tracker.update(table, frame.astype(np.int32))
    table.ids[:] = 0
    with pytest.raises(InputError, match="unique"):
        tracker.update(table, frame)
    with pytest.raises(ConfigError, match="min_iou"):
        TrackerOptions(min_iou=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_sequence_no_id_switches(seed):
    """Ground-truth masks of a moving synthetic video, ids shuffled each frame, are re-linked."""
    frames = render_sequence(seed, 0, 24, 128, 192)
    tracker = InstanceTracker(TrackerOptions(stride=2))
    rng = np.random.default_rng(seed)
    gt_tracks, predicted, live_before = [], [], set()
    track_of_id: dict[int, int] = {}
    for scene in frames:
        things = {s["id"]: s for s in scene.segments if s["isthing"]}
        table, raster = _frame(
            scene.panoptic, {k: s["category_id"] - 1 for k, s in things.items()}, rng
        )
        out_table, out = tracker.update(table, raster)
        new = set(out_table.ids.tolist()) - set(track_of_id)
        assert not new & live_before  # a new object never takes a live track's id
        for seg_id, seg in things.items():
            track_id = int(out[scene.panoptic == seg_id][0])
            assert track_of_id.setdefault(track_id, seg["track_id"]) == seg["track_id"]
        live_before = set(tracker.live_ids.tolist())
        gt_tracks.append({k: s["track_id"] for k, s in things.items()})
        predicted.append(out)
    counts = tracking_counts([f.panoptic for f in frames], gt_tracks, predicted)
    print(f"seed {seed}: {counts}")
    assert counts.misses == 0 and counts.false_positives == 0
    # switches only where an object is hidden longer than max_missed or reappears as a sliver
    assert counts.id_switches <= 0.05 * counts.gt_objects


@pytest.mark.parametrize("size", [(1080, 1920), (37, 53), (5, 3), (0, 4)])
@pytest.mark.parametrize("stride", [1, 3, 4])
@pytest.mark.parametrize("rows", [0, 1, 7, 40])
def test_compiled_row_sampling_is_numpys(size, stride, rows, monkeypatch) -> None:
    """The tracker's strided samples and per-row pixel lists: the compiled pass and counting
    sort give numpy's gather and stable sort, values, order and types."""
    import compactinst_ros.tracking as tracking

    if tracking._sample_rows_jit is None:
        pytest.skip("numba is not installed (pip install '.[fast]')")
    rng = np.random.default_rng(sum(size) * 100 + stride * 10 + rows)
    ids = rng.choice(np.arange(1, 65535), rows, replace=False).astype(np.intp)
    raster = np.zeros(size, np.uint16)
    if rows and raster.size:
        raster[:] = np.where(rng.random(size) < 0.6, ids[rng.integers(0, rows, size)], 0)
        raster[0, 0] = 65535  # a value no row names: background
    row_of = np.zeros(65536, np.intp)
    row_of[ids] = np.arange(1, rows + 1)
    compiled = tracking.sample_rows(raster, row_of, stride, rows)
    monkeypatch.setattr(tracking, "_sample_rows_jit", None)
    expected = tracking.sample_rows(raster, row_of, stride, rows)
    np.testing.assert_array_equal(compiled[0], expected[0])
    assert len(compiled[1]) == len(expected[1]) == rows
    for got, want in zip(compiled[1], expected[1], strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
