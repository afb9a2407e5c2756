"""/diagnostics warns and recovers (real DDS, node subprocess): a slow backend puts the output
rate and the pipeline latency out of bounds (WARN), a stalled worker outputs nothing while input
arrives (ERROR), and both clear when the backend is fast again."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ros_domains import next_domain
from ros_harness import REPO, Client, NodeProcess, cpu_node_params
from test_ros_node import image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image

NS = "/compactinst"
TOPIC = "/health/image"
OK, WARN, ERROR = b"\x00", b"\x01", b"\x02"


def _level_becomes(client: Client, level: bytes, timeout: float, what: str) -> dict:
    return client.wait_for(
        lambda: (d := client.latest_diagnostics()) and d["_level"] == level and d, timeout, what
    )


def test_slow_and_stalled_backends_warn_then_recover(
    random_bundle, make_client, tmp_path, monkeypatch
):
    delay = tmp_path / "delay_s"
    delay.write_text("0")
    monkeypatch.setenv("COMPACTINST_TEST_DELAY_FILE", str(delay))
    domain = next_domain()
    node = NodeProcess(
        domain,
        cpu_node_params(
            random_bundle,
            image_topic=TOPIC,
            outputs=["instance_mask"],
            diagnostics_period=0.25,
            rate_window=6,  # 1.5 s
            rate_tolerance=0.3,
            latency_budget_ms=400.0,
        ),
        script=REPO / "test" / "ros" / "slow_node.py",
    )
    stop = threading.Event()
    try:
        client = make_client(domain)
        client.subscribe(DiagnosticArray, "/diagnostics")
        client.subscribe(Image, f"{NS}/instance_mask")
        images = client.publisher(Image, TOPIC)
        client.wait_for(images.get_subscription_count, 60, f"node subscribed:\n{node.tail()}")

        def stream() -> None:  # a 4 Hz camera stamping with the current time
            while not stop.wait(0.25):
                msg = image_msg(scene(48, 64), "bgr8")
                msg.header.stamp = client.node.get_clock().now().to_msg()
                images.publish(msg)

        threading.Thread(target=stream, daemon=True).start()
        client.wait_for(
            lambda: (
                (d := client.latest_diagnostics())
                and d["_level"] == OK
                and float(d["expected_rate_hz"]) == pytest.approx(4.0, rel=0.3)
            ),
            30,
            "OK at the measured input rate while the backend keeps up",
        )

        delay.write_text("0.7")  # slower than the camera and over the latency budget
        diag = _level_becomes(client, WARN, 20, "WARN with a slow backend")
        assert "output rate too low" in diag["_message"] or "pipeline latency" in diag["_message"]
        client.wait_for(
            lambda: "pipeline latency up to" in client.latest_diagnostics()["_message"],
            10,
            "pipeline latency over the budget",
        )

        delay.write_text("4")  # the worker stalls: input keeps arriving, nothing comes out
        diag = _level_becomes(client, ERROR, 20, "ERROR with a stalled worker")
        assert "no output for" in diag["_message"], diag

        delay.write_text("0")
        diag = _level_becomes(client, OK, 30, "OK again once the backend is fast")
        assert diag["_message"] == "ok", diag
    finally:
        stop.set()
        code = node.stop()
    assert code == 0, Path(node.log_path).read_text()
