"""Frame counters shared by the callbacks and the worker, and their /diagnostics report."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue


@dataclass
class _Snapshot:
    received: int = 0
    processed: int = 0
    at: float = field(default_factory=time.monotonic)


class FrameStats:
    """Thread-safe counters: received, processed, dropped, errors, QoS events, last timings."""

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

    def on_error(self, message: str, input_error: bool) -> None:
        """A frame failed (bad input or a pipeline/backend error)."""
        with self._lock:
            if input_error:
                self.input_errors += 1
            else:
                self.errors += 1
            self.last_error = message

    def on_qos_incompatible(self, message: str) -> None:
        """The middleware reported a publisher whose QoS cannot match the subscription."""
        with self._lock:
            self.qos_incompatible += 1
            self.last_error = message

    def tick(self) -> dict:
        """Counters plus rates and new-problem flags since the previous tick."""
        now = time.monotonic()
        with self._lock:
            dt = max(now - self._last.at, 1e-6)
            report = {
                "received": self.received,
                "processed": self.processed,
                "dropped": self.dropped,
                "idle": self.idle,
                "input_errors": self.input_errors,
                "errors": self.errors,
                "qos_incompatible": self.qos_incompatible,
                "last_error": self.last_error,
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


def health_status(
    name: str,
    hardware_id: str,
    report: dict,
    facts: dict,
    publishers: int,
    input_timeout_s: float,
    loaded: bool,
    warnings: Sequence[str] = (),
) -> DiagnosticStatus:
    """One DiagnosticStatus: level and message from the worst problem, all facts as values.

    ``warnings``: standing conditions reported as WARN every time (e.g. a GPU machine running on
    the CPU), after the per-frame problems.
    """
    problems: list[tuple[bytes, str]] = []
    if not loaded:
        problems.append((DiagnosticStatus.ERROR, "model not loaded"))
    if report["new_errors"]:
        problems.append((DiagnosticStatus.ERROR, f"{report['new_errors']} frame(s) failed"))
    if report["new_input_errors"]:
        problems.append((DiagnosticStatus.WARN, f"{report['new_input_errors']} bad input frame(s)"))
    if report["new_qos_incompatible"]:
        problems.append((DiagnosticStatus.WARN, "incompatible QoS with an image publisher"))
    age = report["input_age_s"]
    if loaded and publishers == 0:
        problems.append((DiagnosticStatus.WARN, "no publisher on the input topic"))
    elif loaded and (age is None or age > input_timeout_s):
        problems.append((DiagnosticStatus.WARN, "input silent: publishers exist but no frames"))
    problems += [(DiagnosticStatus.WARN, warning) for warning in warnings]
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
        "input_rate_hz": report["input_rate_hz"],
        "output_rate_hz": report["output_rate_hz"],
        "input_age_s": "never" if age is None else age,
        **{f"latency_{k}_ms": v for k, v in report["timings_ms"].items()},
    }
    status = DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id)
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
    return status


def diagnostic_array(stamp: object, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    """DiagnosticArray for /diagnostics."""
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg
