"""Frame counters shared by the callbacks and the worker, and their /diagnostics report (the
health checks it includes live in ``health``)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import ReliabilityPolicy

from .. import dds_env
from ..resources import fastdds_profile
from .health import Problem
from .qos import reliability_name

#: distinct error reasons counted per node; a new one beyond these is counted as OTHER_REASON
MAX_REASONS = 32
OTHER_REASON = "other"
#: /diagnostics key prefix of a reason's count: ``error_count: <reason>``
REASON_KEY = "error_count: "


def error_reason(message: str) -> str:
    """The kind of an error ``message``: the problem before the fix (``;``) with numbers and
    quoted values blanked, so frames that fail alike share one reason whatever their sizes."""
    problem = message.split(";", 1)[0].splitlines()[0] if message else ""
    return re.sub(r"\d+(?:\.\d+)?", "N", re.sub(r"'[^']*'", "'...'", problem)).strip()


class ReasonThrottle:
    """Log throttle with one window per error reason (rclpy's throttle is one per call site, so
    a frequent reason would hide every other): the first message of a reason in ``window_s``
    seconds is logged, later ones are counted and reported with the next one logged."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._logged_at: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def admit(self, reason: str, now: float | None = None) -> int | None:
        """None: suppress this message; else log it, and the count is how many of ``reason``
        were suppressed since the last one logged."""
        now = time.monotonic() if now is None else now
        with self._lock:
            last = self._logged_at.get(reason)
            if last is not None and now - last < self.window_s:
                self._suppressed[reason] += 1
                return None
            self._logged_at[reason] = now
            return self._suppressed.pop(reason, 0)


@dataclass
class _Snapshot:
    received: int = 0
    processed: int = 0
    at: float = field(default_factory=time.monotonic)


class FrameStats:
    """Thread-safe counters: received, processed, dropped, errors (in total and per
    ``error_reason``), QoS events, last timings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received = 0
        self.processed = 0
        self.dropped = 0
        self.idle = 0
        self.input_errors = 0
        self.errors = 0
        self.qos_incompatible = 0
        self.last_error = ""
        self.reasons: Counter[str] = Counter()
        self.last_frame_at: float | None = None
        self.last_timings: dict[str, float] = {}
        self._last = _Snapshot()
        self._errors_at_tick = 0
        self._qos_at_tick = 0
        self._input_errors_at_tick = 0

    def on_received(self, replaced: bool) -> None:
        """A callback put a frame in the mailbox (``replaced``: an older one was dropped)."""
        with self._lock:
            self.received += 1
            self.dropped += int(replaced)
            self.last_frame_at = time.monotonic()

    def on_dropped(self, count: int = 1) -> None:
        """Frames discarded without processing (deactivation)."""
        with self._lock:
            self.dropped += count

    def on_idle(self) -> None:
        """A frame skipped because no output had a subscriber."""
        with self._lock:
            self.idle += 1

    def on_processed(self, timings_ms: dict[str, float]) -> None:
        """The worker published a frame's outputs."""
        with self._lock:
            self.processed += 1
            self.last_timings = dict(timings_ms)

    def on_error(self, message: str, input_error: bool) -> str:
        """A frame failed (bad input or a pipeline/backend error); returns its reason."""
        with self._lock:
            if input_error:
                self.input_errors += 1
            else:
                self.errors += 1
            return self._count_reason(message)

    def on_failure(self, message: str) -> None:
        """A lifecycle transition failed: ``last_error`` says why in every later report."""
        with self._lock:
            self.last_error = message

    def on_qos_incompatible(self, message: str) -> None:
        """The middleware reported a publisher whose QoS cannot match the subscription."""
        with self._lock:
            self.qos_incompatible += 1
            self._count_reason(message)

    def _count_reason(self, message: str) -> str:
        """Record ``message`` as the last error and count its reason (lock held)."""
        self.last_error = message
        reason = error_reason(message)
        if reason not in self.reasons and len(self.reasons) >= MAX_REASONS:
            reason = OTHER_REASON
        self.reasons[reason] += 1
        return reason

    def tick(self) -> dict:
        """Counters plus rates and new-problem flags since the previous tick."""
        now = time.monotonic()
        with self._lock:
            dt = max(now - self._last.at, 1e-6)
            report = {
                "received": self.received,
                # frames the node should have output: bad input and skipped frames excluded
                "to_output": self.received - self.input_errors - self.idle,
                "processed": self.processed,
                "dropped": self.dropped,
                "idle": self.idle,
                "input_errors": self.input_errors,
                "errors": self.errors,
                "qos_incompatible": self.qos_incompatible,
                "last_error": self.last_error,
                "error_reasons": dict(self.reasons),
                "input_rate_hz": (self.received - self._last.received) / dt,
                "output_rate_hz": (self.processed - self._last.processed) / dt,
                "input_age_s": None if self.last_frame_at is None else now - self.last_frame_at,
                "new_errors": self.errors - self._errors_at_tick,
                "new_input_errors": self.input_errors - self._input_errors_at_tick,
                "new_qos_incompatible": self.qos_incompatible - self._qos_at_tick,
                "timings_ms": dict(self.last_timings),
            }
            self._last = _Snapshot(self.received, self.processed, now)
            self._errors_at_tick = self.errors
            self._input_errors_at_tick = self.input_errors
            self._qos_at_tick = self.qos_incompatible
        return report


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def input_facts(subs: Mapping[str, Any], reliability: Mapping[str, ReliabilityPolicy]) -> dict:
    """The subscribed input topics and their reliability, for the status values."""
    return {
        "input_topic": ", ".join(s.topic_name for s in subs.values()) or "(not subscribed)",
        "input_reliability": ", ".join(
            f"{k}={reliability_name(v)}" for k, v in reliability.items() if k in subs
        ),
    }


#: every input transport kind a camera may publish (``params.INPUT_KINDS``' kinds)
TRANSPORT_KINDS = ("raw", "compressed", "ffmpeg", "foxglove")
#: the shipped shared-memory profile's file name (resources.FASTDDS_PROFILE)
SHM_PROFILE = "fastdds_shm.xml"


def input_causes(
    node: Any,
    topic_of: Callable[[str], str],
    subscribed: Mapping[str, ReliabilityPolicy],
    env: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """(likely cause of "no publisher on the input topic", of "input silent"), "" where none
    is seen, from ``node``'s graph: ``topic_of(kind)`` is the topic of each transport kind,
    ``subscribed`` the kinds subscribed and their reliability.

    No publisher: another transport of the same camera has publishers (a compressed-only
    camera while ``input_transport`` is raw). Silent: best-effort publishers without the
    shared-memory profile (a frame larger than a UDP datagram is lost in fragments), or a
    reliable subscription that a best-effort publisher cannot serve (QoS)."""
    env = os.environ if env is None else env
    unsubscribed = [k for k in TRANSPORT_KINDS if k not in subscribed]
    others = [k for k in unsubscribed if node.count_publishers(topic_of(k))]
    missing = ""
    if others:
        missing = (
            f"the camera publishes {' and '.join(topic_of(k) for k in others)}: set "
            f"input_transport:={others[0]}"
        )
    causes = []
    infos = [i for k in subscribed for i in node.get_publishers_info_by_topic(topic_of(k))]
    best_effort = [i for i in infos if i.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT]
    profile = dds_env.site_profile(env)
    if best_effort and (profile is None or Path(profile).name != SHM_PROFILE):
        shipped = fastdds_profile()
        causes.append(
            "best-effort frames larger than a UDP datagram are lost without the shared-memory "
            f"profile: export FASTDDS_DEFAULT_PROFILES_FILE={shipped or SHM_PROFILE} "
            "(docs/ros.md, DDS)"
        )
    if best_effort and ReliabilityPolicy.RELIABLE in subscribed.values():
        causes.append(
            "QoS: best-effort publishers do not serve the reliable subscription; set "
            "input_reliability:=auto"
        )
    return missing, "; ".join(causes)


def namesake_warning(graph: Any, node_name: str) -> str | None:
    """The warning when more than one node of ``graph`` (any rclpy node: its view of the DDS
    graph) is named ``node_name`` (fully qualified), else None."""
    namespace, _, name = node_name.rpartition("/")
    me = (name, namespace or "/")
    count = sum(1 for entry in graph.get_node_names_and_namespaces() if entry == me)
    if count <= 1:
        return None
    return (
        f"{count} nodes are named {node_name}: consumers get every one's outputs and a "
        "parameter change reaches one of them; start each with its own name "
        "(--ros-args -r __node:=NAME) or namespace"
    )


class NamesakeCheck:
    """Whether other nodes in the graph carry ``node``'s fully qualified name: consumers then
    get every one's outputs under one name and a parameter change reaches only one of them. A
    call returns the warning (logged the first time) or None."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.logged = False

    def __call__(self) -> str | None:
        message = namesake_warning(self.node, self.node.get_fully_qualified_name())
        if message is None:
            return None
        if not self.logged:
            self.node.get_logger().warning(message)
            self.logged = True
        return message


def status_name(node_name: str, camera: str = "") -> str:
    """The DiagnosticStatus name of the node whose fully qualified name is ``node_name``, or of
    its ``camera`` in a node of several (a replay keeps only its own node's reports by it)."""
    return f"{node_name}/{camera}: segmentation" if camera else f"{node_name}: segmentation"


def batch_status_name(node_name: str) -> str:
    """The DiagnosticStatus name of the batch report of a node of several cameras."""
    return f"{node_name}: batch"


class BatchStats:
    """Thread-safe counters of the worker's rounds: frames, padded slots and window waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rounds = 0
        self.frames = 0
        self.padded = 0
        self._period: list[tuple[int, int, float]] = []
        self._at = time.monotonic()

    def on_round(self, frames: int, slots: int, wait_s: float) -> None:
        """A round ran ``frames`` frames in ``slots`` batch slots after waiting ``wait_s``."""
        with self._lock:
            self.rounds += 1
            self.frames += frames
            self.padded += slots - frames
            self._period.append((frames, slots, wait_s))

    def tick(self, cameras: int) -> dict:
        """Totals, and means over the rounds since the previous tick (0 without rounds)."""
        now = time.monotonic()
        with self._lock:
            period, self._period = self._period, []
            dt, self._at = max(now - self._at, 1e-6), now
            rounds, frames, padded = self.rounds, self.frames, self.padded
        count = max(len(period), 1)
        waits = [w * 1e3 for _, _, w in period]
        return {
            "cameras": cameras,
            "rounds": rounds,
            "frames_batched": frames,
            "padded_slots": padded,
            "rounds_per_s": len(period) / dt,
            "frames_per_round_mean": sum(f for f, _, _ in period) / count,
            "batch_fill_mean": sum(f / cameras for f, _, _ in period) / count,
            "padded_slots_per_round_mean": sum(s - f for f, s, _ in period) / count,
            "window_wait_mean_ms": sum(waits) / count,
            "window_wait_max_ms": max(waits, default=0.0),
        }


def batch_status(name: str, report: dict, facts: dict) -> DiagnosticStatus:
    """The batch DiagnosticStatus: OK, what the rounds did (``BatchStats.tick``) as values."""
    message = (
        f"{report['rounds_per_s']:.1f} rounds/s, {report['frames_per_round_mean']:.2f} of "
        f"{report['cameras']} cameras per round"
    )
    status = DiagnosticStatus(level=DiagnosticStatus.OK, name=name, message=message)
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in {**facts, **report}.items()]
    return status


def health_status(
    name: str,
    report: dict,
    facts: dict,
    publishers: int,
    input_timeout_s: float,
    loaded: bool,
    warnings: Sequence[str] = (),
    checks: Sequence[tuple[list[Problem], dict]] = (),
    causes: tuple[str, str] = ("", ""),
) -> DiagnosticStatus:
    """One DiagnosticStatus: level and message from the worst problem, all facts as values.

    ``facts["state"]`` is ``active``, ``idle`` (no subscriber on any output: the input is
    unsubscribed, nothing is expected) or ``inactive``; ``checks`` are the (problems, values) of
    the health checks (``HealthMonitor.check``, ``CameraInfoRelay.check``); ``warnings`` are
    standing conditions reported as WARN every time (e.g. a GPU machine running on the CPU).
    """
    problems: list[Problem] = []
    if not loaded:
        problems.append((DiagnosticStatus.ERROR, "model not loaded"))
    if report["new_errors"]:
        problems.append((DiagnosticStatus.ERROR, f"{report['new_errors']} frame(s) failed"))
    if report["new_input_errors"]:
        problems.append((DiagnosticStatus.WARN, f"{report['new_input_errors']} bad input frame(s)"))
    if report["new_qos_incompatible"]:
        problems.append((DiagnosticStatus.WARN, "incompatible QoS with an image publisher"))
    age = report["input_age_s"]
    if facts.get("state") == "idle":
        problems.append(
            (DiagnosticStatus.OK, "idle: no subscriber on any output, input unsubscribed")
        )
    elif loaded and publishers == 0:
        missing = "no publisher on the input topic"
        problems.append((DiagnosticStatus.WARN, _with_cause(missing, causes[0])))
    elif loaded and (age is None or age > input_timeout_s):
        silent = "input silent: publishers exist but no frames"
        problems.append((DiagnosticStatus.WARN, _with_cause(silent, causes[1])))
    problems += [(DiagnosticStatus.WARN, warning) for warning in warnings]
    checked: dict = {}
    for found, values in checks:
        problems += found
        checked.update(values)
    level = max((p[0] for p in problems), default=DiagnosticStatus.OK)
    message = "; ".join(p[1] for p in problems) or "ok"
    values = {
        **facts,
        "input_publishers": publishers,
        "frames_received": report["received"],
        "frames_processed": report["processed"],
        "frames_dropped": report["dropped"],
        "frames_skipped_no_subscribers": report["idle"],
        "input_errors": report["input_errors"],
        "errors": report["errors"],
        "qos_incompatible_events": report["qos_incompatible"],
        "last_error": report["last_error"],
        **{f"{REASON_KEY}{r}": n for r, n in sorted(report["error_reasons"].items())},
        "input_rate_hz": report["input_rate_hz"],
        "output_rate_hz": report["output_rate_hz"],
        "input_age_s": "never" if age is None else age,
        **checked,
        **{f"latency_{k}_ms": v for k, v in report["timings_ms"].items()},
    }
    hardware_id = str(facts.get("device", facts.get("backend", "")))
    status = DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id)
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
    return status


def _with_cause(problem: str, cause: str) -> str:
    return f"{problem} (likely: {cause})" if cause else problem


def diagnostic_array(stamp: object, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    """DiagnosticArray for /diagnostics."""
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg
