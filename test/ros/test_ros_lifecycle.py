"""Lifecycle variant: configure loads, activate subscribes, deactivate stops output; forced QoS
that cannot match a publisher is reported on /diagnostics."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from ros_domains import next_domain
from ros_harness import NodeProcess
from test_ros_node import NS, image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from sensor_msgs.msg import Image

_GOAL = {
    Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE,
    Transition.TRANSITION_DEACTIVATE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_CLEANUP: State.PRIMARY_STATE_UNCONFIGURED,
}


def _service(client, srv_type, name):
    """One cached client per service, given time to match its response reader."""
    cache = client.__dict__.setdefault("service_clients", {})
    if name not in cache:
        cli = client.node.create_client(srv_type, name)
        assert cli.wait_for_service(timeout_sec=30.0), f"{name} not available"
        time.sleep(0.5)  # a request sent before the reply reader matches loses its reply
        cache[name] = cli
    return cache[name]


def _call(client, srv_type, name, request, attempts=3, timeout=8.0):
    """Service call; a lost reply (DDS discovery race) is retried, the last error raised."""
    cli = _service(client, srv_type, name)
    for attempt in range(attempts):
        future = cli.call_async(request)
        try:
            client.wait_for(future.done, timeout, name)
            return future.result()
        except AssertionError:
            if attempt == attempts - 1:
                raise
    return None


def _state(client):
    return _call(client, GetState, f"{NS}/get_state", GetState.Request()).current_state.id


def _transition(client, transition_id):
    """Request a transition; a lost reply is resolved by asking for the state."""
    req = ChangeState.Request()
    req.transition.id = transition_id
    try:
        result = _call(client, ChangeState, f"{NS}/change_state", req, attempts=1, timeout=30.0)
    except AssertionError:
        assert _state(client) == _GOAL[transition_id], transition_id
        return
    assert result.success, transition_id


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
        client.wait_for(lambda: client.matched(f"{NS}/instance_mask"), 20, "output match")
        first = image_msg(scene(64, 96), "bgr8")
        reliable.publish(first)
        client.wait_for(lambda: client.stamped(f"{NS}/instance_mask", first.header.stamp.sec))

        # nobody listens: the node drops its input subscription (test_ros_idle.py has the rest)
        client.node.destroy_subscription(client.subs.pop(f"{NS}/instance_mask"))
        client.wait_for(lambda: not reliable.get_subscription_count(), 20, "input dropped")
        client.wait_for(lambda: client.latest_diagnostics()["state"] == "idle", 10, "idle")
        client.subscribe(Image, f"{NS}/instance_mask")
        client.wait_for(lambda: client.matched(f"{NS}/instance_mask"), 20, "re-match")
        client.wait_for(reliable.get_subscription_count, 20, "input subscribed again")

        _transition(client, Transition.TRANSITION_DEACTIVATE)
        assert _state(client) == State.PRIMARY_STATE_INACTIVE
        second = image_msg(scene(64, 96), "bgr8")
        reliable.publish(second)  # never output: checked after the re-activated node's output

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
        assert client.stamped(f"{NS}/instance_mask", second.header.stamp.sec) is None
    finally:
        code = node.stop()
    assert code == 0, node.log()


def test_lifecycle_failed_transitions_log_report_and_return_failure(
    random_bundle, make_client, tmp_path, capfd
):
    """Any exception in configure or activate is logged (a plain one with its traceback),
    reported on /diagnostics where the node has it, and returns FAILURE: configure ends
    unconfigured, activate stays inactive with the model loaded."""
    import rclpy
    from rclpy.context import Context
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from compactinst_ros.errors import ConfigError
    from compactinst_ros.ros.node import _lifecycle_class

    broken = tmp_path / "broken_bundle"  # "source" must be a mapping: a ValueError in loading
    shutil.copytree(random_bundle, broken)
    meta = json.loads((broken / "bundle.json").read_text())
    (broken / "bundle.json").write_text(json.dumps({**meta, "source": "exported by hand"}))

    def refuse() -> None:
        raise ConfigError("refused on purpose")

    def crash() -> None:
        raise RuntimeError("crashed on purpose")

    domain = next_domain()
    client = make_client(domain)
    client.subscribe(DiagnosticArray, "/diagnostics")
    context = Context()
    rclpy.init(context=context, domain_id=domain)
    params = [Parameter("model", value=str(broken)), Parameter("ort_threads", value=1)]
    node = _lifecycle_class()(context=context, parameter_overrides=params)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.core.worker is None and not node.core.cameras  # back to unconfigured
        log = capfd.readouterr().err
        assert "configure failed: ValueError: dictionary update sequence" in log, log
        assert "Traceback (most recent call last)" in log and "bundle.py" in log, log

        node.set_parameters([Parameter("model", value=str(random_bundle))])
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        activate = node.core.activate
        node.core.activate = refuse
        assert node.trigger_activate() == TransitionCallbackReturn.FAILURE
        assert node.core.worker is not None and not node.core.active  # still inactive, loaded
        log = capfd.readouterr().err
        assert "activate failed: refused on purpose" in log and "Traceback" not in log, log

        client.wait_for(lambda: client.matched("/diagnostics"), 20, "the node's /diagnostics")
        node.core.activate = crash
        assert node.trigger_activate() == TransitionCallbackReturn.FAILURE
        assert node.core.worker is not None and not node.core.active
        log = capfd.readouterr().err
        assert "activate failed: RuntimeError: crashed on purpose" in log, log
        assert "Traceback (most recent call last)" in log, log
        report = client.wait_for(
            lambda: (
                "crashed on purpose" in client.latest_diagnostics().get("_message", "")
                and client.latest_diagnostics()
            ),
            10,
            "the failed activate on /diagnostics",
        )
        assert report["_level"] == b"\x02"  # ERROR
        assert report["last_error"] == "activate failed: RuntimeError: crashed on purpose"

        node.core.activate = activate
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
