"""The multi-camera node's parts without a node: the batching policy of the worker
(``worker.Batcher``) at explicit times (seconds; the window is 10 ms), and the camera
parameters."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("rclpy")
from ros_domains import next_domain

from compactinst_ros.backends import BackendOptions, usable_cores
from compactinst_ros.errors import ConfigError
from compactinst_ros.ros.params import (
    PARAMETERS,
    declare_parameters,
    ort_threads,
    read_config,
)
from compactinst_ros.ros.worker import Batcher, Frame, round_wait

WINDOW = 0.010


def batcher(cameras: int = 3, subscribed: tuple[int, ...] = (0, 1, 2)) -> Batcher:
    box = Batcher(cameras, WINDOW, clock=lambda: pytest.fail("the tests pass explicit times"))
    for camera in subscribed:
        box.expect(camera, True)
    return box


def put(box: Batcher, camera: int, at: float, name: str = "") -> bool:
    return box.put(camera, Frame(name or f"c{camera}@{at}", False, received=at))


def taken(batch) -> list[tuple[int, str]]:
    return [(camera, frame.msg) for camera, frame in batch.frames]


def test_round_wait_stops_when_every_subscribed_camera_has_a_frame():
    assert round_wait([True, False, False], [True, True, True], 0.0, 0.004, WINDOW) == 0.006
    assert round_wait([True, True, True], [True, True, True], 0.0, 0.001, WINDOW) == 0.0
    assert round_wait([True, False, False], [True, False, False], 0.0, 0.0, WINDOW) == 0.0
    assert round_wait([True, False, False], [True, True, True], 0.0, 0.011, WINDOW) == 0.0


def test_a_round_takes_every_camera_that_came_within_the_window():
    box = batcher()
    assert box.poll(0.000) is None  # the worker is free and waits
    put(box, 0, 0.000)
    assert box.poll(0.000) is None  # the round opens at the first frame and waits
    put(box, 2, 0.004)
    assert box.poll(0.005) is None
    put(box, 1, 0.007)
    batch = box.poll(0.007)  # all three: no need to wait out the window
    assert taken(batch) == [(0, "c0@0.0"), (1, "c1@0.007"), (2, "c2@0.004")]
    assert batch.wait_s == pytest.approx(0.007)
    assert box.poll(0.008) is None  # nothing left


def test_a_stalled_camera_is_left_out_after_the_window_and_joins_a_later_round():
    box = batcher()
    assert box.poll(0.000) is None
    put(box, 0, 0.000)
    put(box, 1, 0.002)
    assert box.poll(0.002) is None
    assert box.poll(0.0099) is None
    batch = box.poll(0.010)
    assert taken(batch) == [(0, "c0@0.0"), (1, "c1@0.002")]
    assert batch.wait_s == pytest.approx(WINDOW)
    assert box.poll(0.011) is None  # the worker is back
    put(box, 2, 0.013)  # the late frame opens the next round
    assert box.poll(0.013) is None
    put(box, 0, 0.020)
    put(box, 1, 0.021)
    assert taken(box.poll(0.021)) == [(0, "c0@0.02"), (1, "c1@0.021"), (2, "c2@0.013")]


def test_an_unsubscribed_camera_is_never_waited_for():
    box = batcher(subscribed=(0, 1))
    assert box.poll(0.0) is None
    put(box, 0, 0.0)
    assert box.poll(0.0) is None
    put(box, 1, 0.001)
    assert taken(box.poll(0.001)) == [(0, "c0@0.0"), (1, "c1@0.001")]
    box.expect(1, False)
    put(box, 0, 0.100)
    assert taken(box.poll(0.100)) == [(0, "c0@0.1")]


def test_a_replaced_frame_is_a_drop_of_that_camera_only():
    box = batcher()
    assert box.poll(0.000) is None
    assert put(box, 0, 0.000, "old") is False
    assert put(box, 1, 0.001) is False
    assert put(box, 0, 0.003, "new") is True  # camera 0's drop; camera 1 keeps its frame
    assert box.poll(0.004) is None
    assert taken(box.poll(0.012)) == [(0, "new"), (1, "c1@0.001")]


def test_frames_that_waited_for_a_busy_worker_go_in_one_round_at_once():
    box = batcher()
    put(box, 0, 0.000)
    put(box, 1, 0.030)  # the worker was busy with the previous round until 0.050
    put(box, 2, 0.045)
    batch = box.poll(0.050)
    assert taken(batch) == [(0, "c0@0.0"), (1, "c1@0.03"), (2, "c2@0.045")]
    assert batch.wait_s == 0.0


def test_a_busy_worker_opens_the_round_when_it_comes_back():
    box = batcher()
    put(box, 0, 0.000)
    put(box, 1, 0.030)
    assert box.poll(0.050) is None  # camera 2 may still come within the window from now
    assert taken(box.poll(0.061)) == [(0, "c0@0.0"), (1, "c1@0.03")]


def test_the_window_can_change_and_deactivation_clears_a_camera():
    box = batcher()
    box.set_window(0.050)
    assert box.poll(0.0) is None
    put(box, 0, 0.0)
    put(box, 1, 0.0)
    assert box.poll(0.040) is None
    assert box.clear(1) is True and box.clear(1) is False
    assert taken(box.poll(0.050)) == [(0, "c0@0.0")]


def test_take_blocks_until_the_round_is_due_and_close_wakes_it():
    box = Batcher(2, 0.005)
    box.expect(0, True)
    box.expect(1, True)
    rounds = []
    thread = threading.Thread(target=lambda: rounds.extend([box.take(), box.take()]))
    thread.start()
    box.put(0, Frame("a", False))
    box.put(1, Frame("b", False))
    thread.join(0.5)
    assert thread.is_alive()  # the first round is taken, the second take waits
    box.close()
    thread.join(2)
    assert not thread.is_alive()
    assert taken(rounds[0]) == [(0, "a"), (1, "b")] and rounds[1] is None


# --- the camera parameters (params.read_config) ---------------------------------------------

VALUES = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
THREE = {"image_topics": ["/a/image", "/b/image", "/c/image"], "camera_names": ["a", "b", "c"]}


def test_one_camera_keeps_todays_layout_from_image_topic_or_a_one_element_list():
    for values in (
        VALUES | {"image_topic": "/cam/image", "camera_info_topic": "/cam/info"},
        VALUES | {"image_topics": ["/cam/image"], "camera_info_topic": "/cam/info"},
        VALUES | {"image_topics": ["/cam/image"], "camera_info_topics": ["/cam/info"]},
        VALUES | {"image_topic": "/cam/image", "image_topics": ["/cam/image"]}
        | {"camera_info_topics": ["/cam/info"], "camera_names": ["front"]},
    ):
        (camera,) = read_config(values).cameras
        assert (camera.prefix, camera.image_topic, camera.topic("compressed")) == (
            "~/",
            "/cam/image",
            "/cam/image/compressed",
        )
        assert camera.camera_info_topic == "/cam/info"
    config = read_config(VALUES)
    assert config.cameras[0].image_topic == "image" and config.backend_options == BackendOptions(
        settings="node"
    )


def test_stage_threads_default_to_two_with_several_cameras_and_share_the_cores():
    """stage_threads 0: two threads with several cameras, one with one; 1 and 2 force it. Two
    threads give each stage session half the usable cores (both halves run at once) unless
    ort_threads is set; one thread keeps the runtime's default."""
    half = max(1, usable_cores() // 2)
    assert (ort_threads(0, True), ort_threads(0, False), ort_threads(3, True)) == (half, None, 3)
    for values, overlap in (
        (VALUES, False),
        (VALUES | THREE, True),
        (VALUES | {"stage_threads": 2}, True),
        (VALUES | THREE | {"stage_threads": 1}, False),
    ):
        config = read_config(values)
        assert config.overlap_stages is overlap, values
        assert config.backend_options.threads == (half if overlap else None), values
    assert read_config(VALUES | THREE | {"ort_threads": 2}).backend_options.threads == 2


def test_several_cameras_get_their_own_namespace_and_the_batch_options():
    config = read_config(VALUES | THREE | {"camera_info_topics": ["/a/info", "", "/c/info"]})
    assert [(c.name, c.prefix, c.image_topic, c.camera_info_topic) for c in config.cameras] == [
        ("a", "~/a/", "/a/image", "/a/info"),
        ("b", "~/b/", "/b/image", ""),
        ("c", "~/c/", "/c/image", "/c/info"),
    ]
    assert config.backend_options.max_batch == 3 and config.backend_options.batch_sizes is None
    sized = read_config(VALUES | THREE | {"batch_sizes": [1, 2, 4]})
    assert sized.backend_options.batch_sizes == (1, 2, 4)
    assert config.batch_window_ms == PARAMETERS["batch_window_ms"].default == 10.0


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"camera_names": ["a", "b"]}, "camera_names has 2 entries but image_topics has 3"),
        ({"camera_names": []}, "camera_names has 0 entries but image_topics has 3; give one"),
        ({"camera_info_topics": ["/a/info"]}, "camera_info_topics has 1 entries"),
        ({"camera_names": ["a", "a", "c"]}, r"camera_names lists \['a'\] more than once"),
        ({"camera_names": ["a", "b c", "c"]}, "'b c', which is not a ROS name token"),
        ({"camera_names": ["a", "2nd", "c"]}, "'2nd', which is not a ROS name token"),
        ({"image_topics": ["/a", "/a", "/c"]}, r"image_topics lists \['/a'\] more than once"),
        ({"image_topic": "/x"}, "image_topic='/x' and image_topics=.* are both set; .* leave"),
        ({"camera_info_topic": "/x"}, "camera_info_topic='/x' and camera_info_topics=\\[\\]"),
        ({"batch_sizes": [1, 2]}, r"no size for a round of all 3 cameras; add 3, e.g. .*\[1,2,3\]"),
        ({"batch_sizes": [2, 1, 3]}, "distinct positive sizes in ascending order"),
        ({"batch_sizes": [0, 3]}, "distinct positive sizes"),
    ],
)
def test_camera_parameter_mistakes_name_the_problem_and_the_fix(change, words):
    with pytest.raises(ConfigError, match=words):
        read_config(VALUES | THREE | change)


def test_camera_lists_without_image_topics_are_refused():
    with pytest.raises(ConfigError, match="camera_names is set but image_topics is empty; list"):
        read_config(VALUES | {"camera_names": ["front"]})
    with pytest.raises(ConfigError, match="image_topic='/x' and image_topics=\\[/y\\]"):
        read_config(VALUES | {"image_topic": "/x", "image_topics": ["/y"]})


def test_array_parameters_with_an_empty_default_declare_by_type():
    """rclpy takes a default of [] for a byte array; these are declared by type, read back as
    [] and take a list of their own type from an override (or refuse another type)."""
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        overrides = [Parameter("image_topics", value=["/a", "/b"])]
        node = Node("typed", context=context, parameter_overrides=overrides)
        declare_parameters(node, lambda: False, lambda config: None)
        assert node.get_parameter("image_topics").value == ["/a", "/b"]
        assert list(node.get_parameter("camera_names").value) == []
        assert node.get_parameter("batch_sizes").type_ == Parameter.Type.INTEGER_ARRAY
        assert node.get_parameter("camera_names").type_ == Parameter.Type.STRING_ARRAY
        names = Parameter("camera_names", value=["a", "b"])
        sizes = Parameter("batch_sizes", value=[1, 2])
        assert node.set_parameters_atomically([names, sizes]).successful
        node.destroy_node()
        wrong = [Parameter("camera_names", value=[1, 2])]
        node = Node("wrong", context=context, parameter_overrides=wrong)
        with pytest.raises(ConfigError, match=r"camera_names: .* camera_names:=\[front,rear\]"):
            declare_parameters(node, lambda: False, lambda config: None)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
