"""Lifecycle variant: configure loads, activate subscribes, deactivate stops output; forced QoS
that cannot match a publisher is reported on /diagnostics."""

from __future__ import annotations

import time

import pytest
from conftest import NodeProcess, next_domain
from test_ros_node import NS, image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from sensor_msgs.msg import Image


def _call(client, srv_type, name, request, timeout=30.0):
    cli = client.node.create_client(srv_type, name)
    assert cli.wait_for_service(timeout_sec=timeout), f"{name} not available"
    future = cli.call_async(request)
    client.wait_for(future.done, timeout, name)
    return future.result()


def _transition(client, transition_id):
    req = ChangeState.Request()
    req.transition.id = transition_id
    assert _call(client, ChangeState, f"{NS}/change_state", req).success, transition_id


def _state(client):
    return _call(client, GetState, f"{NS}/get_state", GetState.Request()).current_state.id


def test_lifecycle_transitions_and_incompatible_qos(random_bundle, make_client):
    domain = next_domain()
    topic = "/lc/image"
    node = NodeProcess(
        domain,
        {
            "model": random_bundle,
            "backend": "onnxruntime",
            "ort_threads": 1,
            "image_topic": topic,
            "input_reliability": "reliable",
            "diagnostics_period": 0.25,
            "outputs": ["instance_mask"],
        },
        lifecycle=True,
    )
    try:
        client = make_client(domain)
        client.subscribe(DiagnosticArray, "/diagnostics")
        client.subscribe(Image, f"{NS}/instance_mask")
        assert _state(client) == State.PRIMARY_STATE_UNCONFIGURED
        assert not client.received("/diagnostics"), "nothing runs before configure"

        _transition(client, Transition.TRANSITION_CONFIGURE)
        diag = client.wait_for(client.latest_diagnostics, 20, "diagnostics after configure")
        assert diag["state"] == "inactive" and diag["backend"] == "onnxruntime"

        _transition(client, Transition.TRANSITION_ACTIVATE)
        client.wait_for(
            lambda: "no publisher" in client.latest_diagnostics()["_message"], 10, "no publisher"
        )
        best_effort = client.publisher(Image, topic, reliable=False)
        client.wait_for(
            lambda: (
                (d := client.latest_diagnostics()) and int(d["qos_incompatible_events"]) > 0 and d
            ),
            20,
            "incompatible QoS on /diagnostics",
        )
        diag = client.latest_diagnostics()
        assert "incompatible QoS" in diag["last_error"]
        assert "input silent" in diag["_message"] and diag["_level"] == b"\x01"  # WARN
        client.node.destroy_publisher(best_effort)

        reliable = client.publisher(Image, topic)
        client.wait_for(reliable.get_subscription_count, 20, "reliable match")
        client.wait_for(client.subs[f"{NS}/instance_mask"].get_publisher_count, 20, "output match")
        first = image_msg(scene(64, 96), "bgr8")
        reliable.publish(first)
        client.wait_for(lambda: client.stamped(f"{NS}/instance_mask", first.header.stamp.sec))

        _transition(client, Transition.TRANSITION_DEACTIVATE)
        assert _state(client) == State.PRIMARY_STATE_INACTIVE
        second = image_msg(scene(64, 96), "bgr8")
        reliable.publish(second)
        time.sleep(1.0)
        assert client.stamped(f"{NS}/instance_mask", second.header.stamp.sec) is None

        _transition(client, Transition.TRANSITION_CLEANUP)
        assert _state(client) == State.PRIMARY_STATE_UNCONFIGURED
        _transition(client, Transition.TRANSITION_CONFIGURE)
        _transition(client, Transition.TRANSITION_ACTIVATE)
        client.wait_for(reliable.get_subscription_count, 20, "re-activated subscription")
        third = image_msg(scene(64, 96), "bgr8")
        client.wait_for(
            lambda: (
                reliable.publish(third),
                client.stamped(f"{NS}/instance_mask", third.header.stamp.sec),
            )[1],
            30,
            "output after re-configure",
        )
    finally:
        code = node.stop()
    assert code == 0, node.log()
