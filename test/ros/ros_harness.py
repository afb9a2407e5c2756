"""ROS test harness: the node in a subprocess, a client rclpy context in this process.

Imported by name (``ros_harness``), not through ``conftest``, so that it cannot be confused with
another directory's conftest module.

DDS stays on loopback, each fixture gets its own ROS_DOMAIN_ID (``ros_domains.next_domain``),
and both sides use the shipped loopback-only Fast DDS profile (config/fastdds_loopback.xml: the
vehicle profile's shared memory, UDP on 127.0.0.1 only), under the variable names the
distribution reads (dds_env).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ros_messages import publisher_count

from compactinst_ros import dds_env
from compactinst_ros.eval import realtime

REPO = Path(__file__).resolve().parents[2]
FASTDDS_PROFILE = REPO / "config" / "fastdds_loopback.xml"

os.environ.update(dds_env.loopback_environment(os.environ, FASTDDS_PROFILE))
os.environ["RMW_IMPLEMENTATION"] = "rmw_fastrtps_cpp"



def ros_env(domain: int) -> dict[str, str]:
    """Environment of a node subprocess on ``domain``."""
    env = dict(os.environ)
    env.update(ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    return env


def cpu_node_params(model: Any, **params: Any) -> dict[str, Any]:
    """Parameters of a test node on ONNX Runtime with one thread, for ``model``, plus ``params``."""
    return {"model": model, "backend": "onnxruntime", "ort_threads": 1, **params}


class NodeProcess(realtime.NodeProcess):
    """The node (or its lifecycle variant, or a ``script`` that starts it wrapped) on its own ROS
    domain, in ``namespace`` if given; must exit on Ctrl-C."""

    def __init__(
        self,
        domain: int,
        params: dict[str, Any],
        lifecycle: bool = False,
        script: Path | None = None,
        namespace: str = "",
    ) -> None:
        log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"compactinst_node_{domain}.log"
        command = (
            [sys.executable, str(script), *realtime.ros_args(params)]
            if script
            else realtime.node_command(params, lifecycle)
        )
        if namespace:
            command += ["-r", f"__ns:={namespace}"]
        super().__init__(command, ros_env(domain), log_path, cwd=REPO)

    def stop(self, timeout: float = 15.0) -> int:
        """Ctrl-C the node; a node that does not exit within ``timeout`` fails the test."""
        code = super().stop(timeout)
        if self.killed:
            raise AssertionError(f"node did not exit within {timeout} s:\n{self.log()}")
        return code

    def exited(self, timeout: float) -> tuple[int, str]:
        """(exit code, log) of a node expected to end on its own (a refused start), waited for
        up to ``timeout`` s; stopped either way."""
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.stop()
        return code, self.log()


class Client:
    """A test-side rclpy context and node, spun on a background thread; records messages."""

    def __init__(self, domain: int) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node("compactinst_test_client", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.lock = threading.Lock()
        self.messages: dict[str, list] = defaultdict(list)
        self.subs: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass
        except RuntimeError:
            # close() racing the executor's wait set, as in the nodes' entry point
            if self.context.ok():
                raise

    def subscribe(self, msg_type: type, topic: str, qos: Any = None) -> None:
        """Record every message on ``topic``."""
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        qos = qos or QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)

        def record(msg: Any) -> None:
            with self.lock:
                self.messages[topic].append(msg)

        self.subs[topic] = self.node.create_subscription(msg_type, topic, record, qos)

    def publisher(self, msg_type: type, topic: str, reliable: bool = True, depth: int = 50) -> Any:
        """A publisher on ``topic`` with the given reliability."""
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        rel = ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT
        return self.node.create_publisher(msg_type, topic, QoSProfile(depth=depth, reliability=rel))

    def received(self, topic: str) -> list:
        """Copy of the messages recorded on ``topic``."""
        with self.lock:
            return list(self.messages[topic])

    def matched(self, topic: str) -> int:
        """Publishers matched to our subscription on ``topic`` (graph count on Humble)."""
        return publisher_count(self.node, self.subs[topic])

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
        """Poll ``predicate`` until it returns a truthy value; AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")

    def stamped(self, topic: str, sec: int) -> Any:
        """The first message on ``topic`` whose header stamp has ``sec``, or None."""
        for msg in self.received(topic):
            if msg.header.stamp.sec == sec:
                return msg
        return None

    def latest_diagnostics(self) -> dict[str, str]:
        """Key/values of the newest /diagnostics status (empty dict before the first one)."""
        msgs = self.received("/diagnostics")
        if not msgs or not msgs[-1].status:
            return {}
        status = msgs[-1].status[0]
        return {"_level": status.level, "_message": status.message} | {
            kv.key: kv.value for kv in status.values
        }

    def settled_diagnostics(self, timeout: float = 20.0) -> dict[str, str]:
        """Counters from two successive /diagnostics reports that agree (no frame in flight)."""
        keys = ("frames_received", "frames_processed", "frames_dropped", "input_errors", "errors")

        def agree() -> dict[str, str] | None:
            msgs = self.received("/diagnostics")
            if len(msgs) < 2:
                return None
            a, b = ({kv.key: kv.value for kv in m.status[0].values} for m in msgs[-2:])
            done = sum(int(b[k]) for k in (*keys[1:], "frames_skipped_no_subscribers"))
            if all(a[k] == b[k] for k in keys) and int(b["frames_received"]) == done:
                return self.latest_diagnostics()
            return None

        start = len(self.received("/diagnostics"))
        self.wait_for(lambda: len(self.received("/diagnostics")) >= start + 2, timeout, "reports")
        return self.wait_for(agree, timeout, "settled /diagnostics counters")

    def close(self) -> None:
        """Stop spinning and shut the context down."""
        self.executor.shutdown(timeout_sec=2.0)
        # the spin thread leaves its wait set first: destroying the node while it still holds
        # the node's handles froze the process once (a C++ call spinning with the GIL held)
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
        self._thread.join(timeout=5.0)  # had it been in a callback: the context is down now
