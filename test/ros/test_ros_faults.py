"""Faults the node survives, over real DDS on loopback: a camera restarting with another
reliability, model files damaged between runs or while the node runs, and SIGTERM with frames in
flight on one worker thread and on two. (A TensorRT engine damaged while the node runs and at
the next start: test_ros_multicamera.py, on the node that starts on the TensorRT stand-ins.)"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params
from test_ros_node import image_msg, scene

from compactinst_ros.bundle import default_bundle_path

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import Image

NS = "/compactinst"
TOPIC = "/cam/image"
MASK = f"{NS}/instance_mask"


def node_params(model: Path | None = None, **extra: object) -> dict:
    """The node on ONNX Runtime with fast /diagnostics, reading ``TOPIC``."""
    return cpu_node_params(
        str(model or default_bundle_path()), image_topic=TOPIC, diagnostics_period=0.25, **extra
    )


def diagnostics_where(client: Client, check, what: str, timeout: float = 30.0) -> dict:
    """The first /diagnostics report (from now on) for which ``check(values)`` holds."""
    return client.wait_for(
        lambda: (d := client.latest_diagnostics()) and check(d) and d, timeout, what
    )


def send_until_output(client: Client, pub, timeout: float = 30.0) -> int:
    """Publish fresh frames until one comes back on ``~/instance_mask``; its stamp's sec.
    (A best-effort frame sent while the node is still re-subscribing may be lost.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = image_msg(scene(96, 128, 3), "bgr8")
        pub.publish(msg)
        sec = msg.header.stamp.sec
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            if client.stamped(MASK, sec):
                return sec
            time.sleep(0.02)
    raise AssertionError(f"no output within {timeout} s")


def start(domain: int, params: dict, script: Path | None = None) -> tuple[NodeProcess, Client]:
    """The node and a client recording /diagnostics and ``~/instance_mask``."""
    from diagnostic_msgs.msg import DiagnosticArray

    node = NodeProcess(domain, params, script=script)
    client = Client(domain)
    client.subscribe(DiagnosticArray, "/diagnostics")
    client.subscribe(Image, MASK)
    return node, client


def stop(node: NodeProcess, client: Client) -> None:
    """Close the client, Ctrl-C the node; it must exit 0."""
    client.close()
    code = node.stop()
    assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def test_camera_restart_with_other_reliability_resumes_and_diagnostics_show_the_gap() -> None:
    domain = next_domain()
    node, client = start(domain, node_params(input_timeout=1.0))
    try:
        reliable = client.publisher(Image, TOPIC, reliable=True)
        diagnostics_where(
            client, lambda d: d.get("input_reliability") == "raw=reliable", "reliable input"
        )
        client.wait_for(lambda: client.matched(MASK), 10, "output matching")
        first = send_until_output(client, reliable)
        ok = diagnostics_where(client, lambda d: d["_message"] == "ok", "healthy while streaming")
        assert ok["_level"] == DiagnosticStatus.OK

        client.node.destroy_publisher(reliable)  # the camera goes away ...
        gone = diagnostics_where(
            client, lambda d: "no publisher" in d["_message"], "the gap on /diagnostics"
        )
        assert gone["_level"] == DiagnosticStatus.WARN and gone["input_publishers"] == "0"

        best_effort = client.publisher(Image, TOPIC, reliable=False)  # ... and comes back
        diagnostics_where(
            client,
            lambda d: d.get("input_reliability") == "raw=best_effort",
            "the node re-subscribing best effort",
        )
        silent = diagnostics_where(
            client, lambda d: "input silent" in d["_message"], "silence before the first frame"
        )
        assert silent["_level"] == DiagnosticStatus.WARN
        resumed = send_until_output(client, best_effort)
        assert resumed > first
        recovered = diagnostics_where(
            client,
            lambda d: d["_message"] == "ok" and int(d["frames_processed"]) >= 2,
            "recovery on /diagnostics",
        )
        assert recovered["_level"] == DiagnosticStatus.OK and recovered["errors"] == "0"
    finally:
        stop(node, client)


def test_model_files_damaged_while_running_then_refused_at_the_next_start(tmp_path) -> None:
    """The backend holds the model in memory once loaded: deleting or overwriting the bundle's
    files does not disturb the running node, and SIGTERM with frames in flight on its one worker
    thread still ends it with 0 within 5 s. The next start verifies the bundle's hashes and
    refuses it with the fix named."""
    bundle = Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))
    domain = next_domain()
    node, client = start(domain, node_params(bundle, stage_threads=1))
    try:
        pub = client.publisher(Image, TOPIC)
        client.wait_for(lambda: pub.get_subscription_count() and client.matched(MASK), 60)
        send_until_output(client, pub)
        encoder = bundle / "encoder.onnx"
        encoder.write_bytes(encoder.read_bytes()[:4096] + b"\0" * 64)
        (bundle / "decoder.onnx").unlink()
        for _ in range(2):
            send_until_output(client, pub)
        report = client.settled_diagnostics()
        assert report["errors"] == "0" and report["_level"] == DiagnosticStatus.OK, report
        sigterm_with_frames_in_flight(node, client)
    finally:
        stop(node, client)

    code, log = NodeProcess(next_domain(), node_params(bundle)).exited(60)
    assert code == 1, log
    assert "encoder.onnx does not match its sha256" in log
    assert "re-export the bundle" in log and "Traceback" not in log


def sigterm_with_frames_in_flight(node: NodeProcess, client: Client) -> None:
    """A 100 Hz camera keeps every worker thread busy with a frame; SIGTERM then must end the
    node with exit code 0 within 5 s."""
    pub = client.publisher(Image, TOPIC)
    client.wait_for(lambda: pub.get_subscription_count() and client.matched(MASK), 60)
    before = client.latest_diagnostics()
    processed, dropped = (int(before.get(k, 0)) for k in ("frames_processed", "frames_dropped"))
    frames = [image_msg(scene(480, 640, i), "bgr8") for i in range(3)]
    streaming = threading.Event()

    def camera() -> None:
        """100 Hz until the node is gone."""
        i = 0
        while not streaming.is_set():
            frames[i % 3].header.stamp.sec += 3
            pub.publish(frames[i % 3])
            i += 1
            time.sleep(1 / 100)

    thread = threading.Thread(target=camera, daemon=True)
    thread.start()
    try:
        diagnostics_where(
            client,
            lambda d: (
                int(d["frames_processed"]) >= processed + 2
                and int(d["frames_dropped"]) >= dropped + 1
            ),
            "frames flowing faster than the node",
        )
        sent = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        try:
            code = node.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - sent
    finally:
        streaming.set()
        thread.join(timeout=2.0)
    assert code == 0, f"exit code {code} after {took:.1f} s:\n{node.log()}"
    assert took < 5.0


def test_sigterm_with_frames_in_flight_on_two_threads_exits_0_within_5_s() -> None:
    """A round handed over while the next one encodes (one thread: at the end of
    test_model_files_damaged_while_running_then_refused_at_the_next_start)."""
    domain = next_domain()
    node, client = start(domain, node_params(stage_threads=2))
    try:
        sigterm_with_frames_in_flight(node, client)
    finally:
        client.close()
        node.stop()
