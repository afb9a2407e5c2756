"""Run-time parameter changes over real DDS: run-time ones apply to the next frame, invalid values
and restart-only changes are refused with the reason, and the node keeps its old values."""

from __future__ import annotations

import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import NodeProcess
from ros_messages import raster_from_image, table_from_msg
from test_ros_lifecycle import _call, _state, _transition
from test_ros_node import NS, image_msg, scene

from compactinst_ros.errors import ConfigError
from compactinst_ros.ros.params import PARAMETERS, RUN_TIME, declare_parameters, read_config

pytest.importorskip("rclpy")
from lifecycle_msgs.msg import State, Transition
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, PointCloud2

TABLE = f"{NS}/instance_table"
MASK = f"{NS}/instance_mask"
NODE_PARAMS = {
    "backend": "onnxruntime",
    "ort_threads": 1,
    "score_threshold": 0.0,
    "object_mask_threshold": 0.0,
    "overlap_threshold": 0.0,
    "max_instances": 20,
    "input_reliability": "reliable",
    "diagnostics_period": 0.25,
    "outputs": ["instance_mask", "instance_table"],
}
#: the start-up error of an invalid choice, from the one validation function
BAD_CHOICE = {"input_reliability": "sometimes"}


def start_up_error(changes: dict) -> str:
    """The message start-up validation gives for the defaults with ``changes``."""
    values = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
    with pytest.raises(ConfigError) as info:
        read_config(values | changes)
    return str(info.value)


def set_params(client, **values) -> list:
    """SetParameters results, one per parameter, through the node's own service."""
    request = SetParameters.Request(
        parameters=[Parameter(n, value=v).to_parameter_msg() for n, v in values.items()]
    )
    return list(_call(client, SetParameters, f"{NS}/set_parameters", request).results)


def get_param(client, name: str):
    """The node's current value of ``name``, through its GetParameters service."""
    request = GetParameters.Request(names=[name])
    (value,) = _call(client, GetParameters, f"{NS}/get_parameters", request).values
    return Parameter.from_parameter_msg(ParameterMsg(name=name, value=value)).value


def refused(result, *words: str) -> bool:
    """True when ``result`` is a refusal whose reason contains every one of ``words``."""
    return not result.successful and all(w in result.reason for w in words)


def next_frame(client, camera) -> tuple[np.ndarray, np.ndarray]:
    """(instance table, instance raster) of a fresh frame published now (same scene each time)."""
    msg = image_msg(scene(96, 128, 3), "bgr8")
    camera.publish(msg)
    sec = msg.header.stamp.sec
    client.wait_for(
        lambda: client.stamped(TABLE, sec) and client.stamped(MASK, sec), 30, f"frame {sec}"
    )
    return table_from_msg(client.stamped(TABLE, sec)), raster_from_image(client.stamped(MASK, sec))


def watch(client, topic: str):
    """Subscribe to the outputs and a reliable camera on ``topic``, matched both ways."""
    client.subscribe(PointCloud2, TABLE)
    client.subscribe(Image, MASK)
    camera = client.publisher(Image, topic)
    client.wait_for(camera.get_subscription_count, 60, "node subscribed to the camera")
    client.wait_for(lambda: client.matched(TABLE) and client.matched(MASK), 20, "output match")
    return camera


def test_descriptors_say_which_parameters_change_at_run_time():
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    node = Node("described", context=context, parameter_overrides=[])
    try:
        declare_parameters(node, lambda: False, lambda config: None)
        for name in PARAMETERS:
            described = node.describe_parameter(name)
            assert not described.read_only, name  # refused by the gate, with a fix, instead
            expected = "run time" if name in RUN_TIME else "needs a restart"
            assert expected in described.additional_constraints, name
        assert set(RUN_TIME) >= {"score_threshold", "mask_threshold", "max_instances"}
        assert not RUN_TIME & {"model", "backend", "image_topic", "gpu_device", "outputs"}
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_run_time_refusals_read_as_the_start_up_errors():
    """One validation path: an invalid value set later is refused with the start-up reason; a
    value out of range is refused by rclpy's descriptor check, naming the range and the value."""
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    set_later = Node("n1", context=context, parameter_overrides=[Parameter("model", value="/m")])
    try:
        declare_parameters(set_later, lambda: False, lambda config: None)
        (choice,) = set_later.set_parameters([Parameter(k, value=v) for k, v in BAD_CHOICE.items()])
        assert not choice.successful and choice.reason == start_up_error(BAD_CHOICE)
        (bounds,) = set_later.set_parameters([Parameter("score_threshold", value=1.5)])
        assert refused(bounds, "score_threshold", "out of range", "Max: 1.0", "1.5")
    finally:
        set_later.destroy_node()
        rclpy.try_shutdown(context=context)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("score_threshold", 1.5, ("0.0 to 1.0", "score_threshold:=0.3 (the default)")),
        ("max_instances", 0, ("1 to 65535", "max_instances:=100 (the default)")),
    ],
)
def test_out_of_range_at_start_names_the_parameter_value_range_and_fix(name, value, words):
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    node = Node("n2", context=context, parameter_overrides=[Parameter(name, value=value)])
    try:
        with pytest.raises(ConfigError) as start_up:
            declare_parameters(node, lambda: False, lambda config: None)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    message = str(start_up.value)
    assert message.startswith(f"parameter {name}:={value} is out of range: {name} ("), message
    assert all(w in message for w in words), message
    assert "Reason" not in message and f": {name};" not in message  # no rclpy text twice


def test_plain_node_applies_run_time_changes_and_refuses_the_rest(random_bundle, make_client):
    domain = next_domain()
    topic = "/params/image"
    node = NodeProcess(domain, NODE_PARAMS | {"model": random_bundle, "image_topic": topic})
    try:
        client = make_client(domain)
        camera = watch(client, topic)
        table, _ = next_frame(client, camera)
        found = len(table)
        assert found > 1, "the random model at score_threshold 0 must yield instances"

        out_of_range, mistyped = set_params(client, score_threshold=1.5, max_instances="all")
        assert refused(out_of_range, "score_threshold", "out of range"), out_of_range.reason
        assert refused(mistyped, "type"), mistyped.reason
        assert get_param(client, "score_threshold") == 0.0
        assert get_param(client, "max_instances") == 20
        assert len(next_frame(client, camera)[0]) == found, "the old values stay in force"

        backend, image_topic, outputs = set_params(
            client, backend="tensorrt", image_topic="/elsewhere", outputs=["semantic"]
        )
        for result, name in ((backend, "backend"), (image_topic, "image_topic")):
            assert refused(result, f"parameter {name} needs a restart"), result.reason
        assert refused(outputs, "outputs needs a restart", "cleanup, set it, configure")
        assert get_param(client, "backend") == "onnxruntime"
        unchanged = set_params(client, backend="onnxruntime", model=str(random_bundle))
        assert all(r.successful for r in unchanged), [r.reason for r in unchanged]

        assert all(r.successful for r in set_params(client, max_instances=1))
        assert len(next_frame(client, camera)[0]) == 1
        assert all(r.successful for r in set_params(client, score_threshold=1.0))
        table, raster = next_frame(client, camera)
        assert len(table) == 0 and not raster.any(), "score_threshold 1.0 keeps no instance"
        assert get_param(client, "score_threshold") == 1.0
    finally:
        code = node.stop()
    assert code == 0, node.log()


def test_lifecycle_node_takes_restart_parameters_only_while_unconfigured(
    random_bundle, make_client
):
    domain = next_domain()
    first, second = "/lc_params/first", "/lc_params/second"
    params = NODE_PARAMS | {"model": random_bundle, "image_topic": first}
    node = NodeProcess(domain, params, lifecycle=True)
    try:
        client = make_client(domain)
        assert _state(client) == State.PRIMARY_STATE_UNCONFIGURED
        (moved,) = set_params(client, image_topic=second)
        assert moved.successful, "unconfigured: a restart-only change waits for configure"
        (choice,) = set_params(client, **BAD_CHOICE)
        assert not choice.successful and choice.reason == start_up_error(BAD_CHOICE)
        assert get_param(client, "input_reliability") == "reliable"

        _transition(client, Transition.TRANSITION_CONFIGURE)
        _transition(client, Transition.TRANSITION_ACTIVATE)
        camera = watch(client, second)
        assert len(next_frame(client, camera)[0]) > 1

        (topic,) = set_params(client, image_topic=first)
        assert refused(topic, "parameter image_topic needs a restart", "lifecycle node: cleanup")
        (bounds,) = set_params(client, mask_threshold=0.995)
        assert refused(bounds, "mask_threshold", "out of range"), bounds.reason
        (score,) = set_params(client, score_threshold=1.0)
        assert score.successful
        table, raster = next_frame(client, camera)
        assert len(table) == 0 and not raster.any()
        assert get_param(client, "image_topic") == second
    finally:
        code = node.stop()
    assert code == 0, node.log()
