"""The tf2-algorithm buffer (spatial/tf_buffer.py) against the behaviour tf2's own tests pin
(ros2/geometry2 tf2/test/cache_unittest.cpp and simple_tf2_core.cpp, rewritten here as
behaviour, not code), plus chains, the latest common time and time travel checked against
4x4 matrix products."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.spatial.tf_buffer import (
    BackwardExtrapolationException,
    BufferCore,
    ConnectivityException,
    ExtrapolationException,
    ForwardExtrapolationException,
    InvalidArgumentException,
    LookupException,
    NoDataForExtrapolationException,
    Stamped,
    TimeCache,
    Transform,
    quat_matrix,
    slerp,
)

S = 1_000_000_000  # ns per second


def rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """(x, y, z, w) of fixed-axis roll, pitch, yaw (tf2's setRPY)."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.array([
        sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy,
    ])  # fmt: skip


def angle(a: np.ndarray, b: np.ndarray) -> float:
    """The rotation angle between two unit quaternions."""
    return float(2 * np.arccos(min(1.0, abs(float(np.dot(a, b))))))


def random_transform(rng: np.random.Generator) -> Transform:
    return Transform(rng.uniform(-10, 10, 3), rpy(*rng.uniform(-np.pi, np.pi, 3)))


# -- the time cache ------------------------------------------------------------------------
def test_the_same_entry_inserted_many_times_is_stored_once() -> None:
    cache = TimeCache()
    for _ in range(99):
        assert cache.insert(Stamped(0, "p", Transform()))
    assert len(cache) == 1


def test_each_stamp_gives_its_own_entry_and_zero_the_newest() -> None:
    cache = TimeCache()
    for i in range(1, 101):
        cache.insert(Stamped(i, f"p{i}", Transform()))
    for i in range(1, 100):
        got = cache.get(i)
        assert (got.parent, got.stamp) == (f"p{i}", i)
    assert cache.get(0).stamp == 100
    cache.insert(Stamped(101, "p100", Transform()))
    assert cache.get(0).stamp == 101  # a newer entry is the newest at once


def test_translation_interpolates_linearly_between_the_entries_around_a_time() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        cache = TimeCache()
        values = rng.uniform(0, 10, (2, 3))
        for step in range(2):
            cache.insert(Stamped(200 + 100 * step, "p", Transform(values[step])))
        for pos in range(100):
            got = cache.get(200 + pos).transform.translation
            want = values[0] + (values[1] - values[0]) * pos / 100
            np.testing.assert_allclose(got, want, atol=2e-6)


def test_no_interpolation_across_a_change_of_parent() -> None:
    cache = TimeCache()
    values = np.random.default_rng(1).uniform(0, 10, (2, 3))
    for step in range(2):
        cache.insert(Stamped(555 + 100 * step, f"parent{step}", Transform(values[step])))
    for pos in range(100):
        got = cache.get(555 + pos)
        np.testing.assert_allclose(got.transform.translation, values[0], atol=1e-6)
        assert got.parent == "parent0"


def test_slerp_halfway_is_equally_far_from_both_ends() -> None:
    rng = np.random.default_rng(2)
    identity = rpy(0, 0, 0)
    for _ in range(100):
        other = rpy(*rng.uniform(0, 1, 3))
        half = slerp(identity, other, 0.5)
        assert angle(half, identity) == pytest.approx(angle(other, half), abs=1e-5)


def test_rotation_interpolates_by_slerp() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        cache = TimeCache()
        quats = [rpy(0, 0, rng.uniform(0, 0.1)) for _ in range(2)]
        for step in range(2):
            cache.insert(Stamped(200 + 100 * step, "p", Transform(np.zeros(3), quats[step])))
        for pos in range(100):
            got = cache.get(200 + pos).transform.rotation
            truth = slerp(quats[0], quats[1], pos / 100)
            assert angle(truth, got) < 1e-6
            # and against the yaw it must have: linear in time for a rotation about one axis
            yaws = [2 * np.arctan2(q[2], q[3]) for q in quats]
            want = rpy(0, 0, yaws[0] + (yaws[1] - yaws[0]) * pos / 100)
            assert angle(want, got) < 1e-6


def test_data_older_than_the_cache_time_is_refused_and_pruned() -> None:
    cache = TimeCache(cache_time_ns=10 * S)
    assert cache.insert(Stamped(20 * S, "p", Transform()))
    assert not cache.insert(Stamped(5 * S, "p", Transform()))  # TF_OLD_DATA
    assert cache.insert(Stamped(12 * S, "p", Transform()))
    cache.insert(Stamped(30 * S, "p", Transform()))
    cache.get(15 * S)  # as in tf2, pruning runs before an insert, against the newest before it
    cache.insert(Stamped(31 * S, "p", Transform()))  # now 12 s is out of the window
    with pytest.raises(BackwardExtrapolationException):
        cache.get(15 * S)


# -- lookups -------------------------------------------------------------------------------
def test_lookup_of_frames_that_do_not_exist() -> None:
    core = BufferCore()
    with pytest.raises(LookupException, match=r'"a" passed to lookupTransform argument target'):
        core.lookup_transform("a", "b", S)
    assert not core.can_transform("a", "b", S)
    assert core.set_transform("foo", "child", S, Transform()) is None
    with pytest.raises(LookupException, match=r'"bar" passed to .* does not exist'):
        core.lookup_transform("foo", "bar", S)
    assert not core.can_transform("foo", "bar", S)
    with pytest.raises(InvalidArgumentException, match="cannot be empty"):
        core.lookup_transform("", "foo", S)
    with pytest.raises(InvalidArgumentException, match="cannot start with a '/'"):
        core.lookup_transform("/foo", "child", S)


def test_one_stamp_then_two_give_tf2s_three_extrapolation_errors() -> None:
    core = BufferCore()
    core.set_transform("foo", "bar", 2 * S, Transform())
    core.lookup_transform("foo", "bar", 2 * S)
    with pytest.raises(NoDataForExtrapolationException, match=r"only time 2\.000000000 is in"):
        core.lookup_transform("foo", "bar", 4 * S)
    core.set_transform("foo", "bar", 3 * S, Transform())
    with pytest.raises(BackwardExtrapolationException, match=r"into the past\.  Requested time 1"):
        core.lookup_transform("foo", "bar", 1 * S)
    future = r"into the future.*\[bar\] to frame \[foo\]"
    with pytest.raises(ForwardExtrapolationException, match=future):
        core.lookup_transform("foo", "bar", 4 * S)
    assert issubclass(ForwardExtrapolationException, ExtrapolationException)


def test_a_static_transform_holds_at_every_time_and_survives_clear() -> None:
    core = BufferCore()
    core.set_transform("foo", "bar", S, Transform(np.array([1.0, 0, 0])))
    core.clear()
    with pytest.raises(ExtrapolationException):
        core.lookup_transform("foo", "bar", 2 * S)
    core.set_transform("foo", "bar", S, Transform(np.array([1.0, 0, 0])), is_static=True)
    for t in (0, 2 * S, 100 * S):
        np.testing.assert_allclose(core.lookup_transform("foo", "bar", t)[0].translation, [1, 0, 0])
    core.clear()
    assert core.can_transform("foo", "bar", 5 * S)


@pytest.mark.parametrize(
    ("parent", "child", "rotation", "why"),
    [
        ("a", "a", [0, 0, 0, 1], "TF_SELF_TRANSFORM"),
        ("a", "", [0, 0, 0, 1], "TF_NO_CHILD_FRAME_ID"),
        ("", "b", [0, 0, 0, 1], "TF_NO_FRAME_ID"),
        ("a", "b", [0, 0, 0, np.nan], "TF_NAN_INPUT"),
        ("a", "b", [0, 0, 0, 2], "TF_DENORMALIZED_QUATERNION"),
    ],
)
def test_invalid_transforms_are_ignored_with_tf2s_reason(parent, child, rotation, why) -> None:
    core = BufferCore()
    reason = core.set_transform(parent, child, S, Transform(np.zeros(3), np.array(rotation, float)))
    assert reason is not None and reason.startswith(why)
    assert core.all_frames() == []


def tree(rng: np.random.Generator, stamp: int) -> tuple[BufferCore, dict[str, np.ndarray]]:
    """map -> odom -> base_link -> {camera_link -> camera_optical, lidar}; returns the buffer
    and each frame's 4x4 pose in map."""
    core = BufferCore()
    edges = [("map", "odom"), ("odom", "base_link"), ("base_link", "camera_link"),
             ("camera_link", "camera_optical"), ("base_link", "lidar")]  # fmt: skip
    pose = {"map": np.eye(4)}
    for parent, child in edges:
        t = random_transform(rng)
        assert core.set_transform(parent, child, stamp, t, is_static=child != "base_link") is None
        pose[child] = pose[parent] @ t.matrix()
    return core, pose


def test_chains_through_any_common_parent_equal_matrix_products() -> None:
    rng = np.random.default_rng(4)
    core, pose = tree(rng, 5 * S)
    for target, source in [("camera_optical", "lidar"), ("lidar", "camera_optical"),
                           ("map", "camera_optical"), ("camera_optical", "map"),
                           ("odom", "lidar"), ("base_link", "base_link")]:  # fmt: skip
        got, used = core.lookup_transform(target, source, 5 * S)
        assert used == 5 * S
        relative = np.linalg.inv(pose[target]) @ pose[source]
        np.testing.assert_allclose(got.matrix(), relative, atol=1e-9)
        points = rng.uniform(-5, 5, (7, 3))
        want = (relative @ np.c_[points, np.ones(7)].T).T[:, :3]
        np.testing.assert_allclose(got.apply(points), want, atol=1e-9)
    core.set_transform("elsewhere", "alone", 5 * S, Transform())
    with pytest.raises(ConnectivityException, match="not part of the same tree"):
        core.lookup_transform("camera_optical", "alone", 5 * S)


def test_time_zero_is_the_latest_time_the_whole_chain_has() -> None:
    core = BufferCore()
    core.set_transform("odom", "base_link", 1 * S, Transform())
    core.set_transform("odom", "base_link", 3 * S, Transform(np.array([2.0, 0, 0])))
    core.set_transform("map", "odom", 2 * S, Transform())
    core.set_transform("base_link", "lidar", 0, Transform(), is_static=True)
    got, used = core.lookup_transform("map", "lidar", 0)
    assert used == 2 * S  # odom's newest; base_link has 3 s, the static lidar any time
    np.testing.assert_allclose(got.translation, [1, 0, 0])  # base_link halfway at 2 s
    assert core.lookup_transform("base_link", "lidar", 0)[1] == 0  # static only


def test_time_travel_places_a_point_seen_earlier_where_it_is_now() -> None:
    """A vehicle at 20 m/s along x: a LiDAR point 10 m ahead seen at t = 0 is 9 m ahead of
    the camera at t = 50 ms, in the fixed odom frame's terms."""
    core, ms = BufferCore(), 1_000_000
    for step in range(0, 101, 10):  # from 1 s on: a time of 0 asks for the latest
        moved = Transform(np.array([20.0 * step / 1000, 0, 0]))
        core.set_transform("odom", "base_link", S + step * ms, moved)
    core.set_transform("base_link", "lidar", 0, Transform(), is_static=True)
    core.set_transform("base_link", "camera", 0, Transform(), is_static=True)
    transform, _ = core.lookup_transform_full("camera", S + 50 * ms, "lidar", S, "odom")
    np.testing.assert_allclose(transform.apply(np.array([[10.0, 0, 0]])), [[9.0, 0, 0]])
    same_time, _ = core.lookup_transform("camera", "lidar", S + 50 * ms)
    np.testing.assert_allclose(same_time.apply(np.array([[10.0, 0, 0]])), [[10.0, 0, 0]])


def test_transform_algebra() -> None:
    rng = np.random.default_rng(5)
    a, b = random_transform(rng), random_transform(rng)
    np.testing.assert_allclose((a * b).matrix(), a.matrix() @ b.matrix(), atol=1e-12)
    np.testing.assert_allclose(a.inverse().matrix(), np.linalg.inv(a.matrix()), atol=1e-12)
    rotation = quat_matrix(a.rotation)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
