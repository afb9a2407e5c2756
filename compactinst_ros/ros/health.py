"""Health checks that warn: output rate, stamp age and pipeline latency against limits.

They follow diagnostic_updater's ``FrequencyStatus`` (events over a window of the last N reports,
compared with a target frequency +- a tolerance; no event in the window is an error) and
``TimeStampStatus`` (the smallest and largest ``now - header.stamp`` since the previous report,
compared with acceptable bounds), written here because diagnostic_updater has no wheel. Levels:
WARN outside the bounds, ERROR when input arrives but nothing is output for a whole window.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticStatus

#: (level, message) of one problem found by a check
Problem = tuple[bytes, str]


@dataclass(frozen=True)
class HealthLimits:
    """The bounds /diagnostics checks against (parameters ``expected_rate`` ... in params.py)."""

    expected_rate: float = 0.0  # Hz of output; 0 = the input rate measured over the same window
    rate_tolerance: float = 0.1  # acceptable: expected x (1 -+ tolerance), as FrequencyStatus
    rate_window: int = 5  # diagnostics reports per window, as FrequencyStatus's window_size
    latency_budget_ms: float = 500.0  # largest acceptable stamp age and pipeline latency


@dataclass(frozen=True)
class Frequency:
    """Events counted over one window and their rate."""

    events: int
    window_s: float

    @property
    def hz(self) -> float:
        """Events per second (0 for an empty window)."""
        return self.events / self.window_s if self.window_s > 0 else 0.0


class FrequencyStatus:
    """Rate of a cumulative counter over its last ``window`` updates (the first ones since start).

    ``update`` is diagnostic_updater's ``FrequencyStatus.run``: the window reaches back to the
    sample taken ``window`` reports ago, so it spans ``window`` diagnostics periods.
    """

    def __init__(self, window: int, now: float | None = None) -> None:
        start = time.monotonic() if now is None else now
        self._history: deque[tuple[float, int]] = deque([(start, 0)] * window, maxlen=window)

    def update(self, count: int, now: float | None = None) -> Frequency:
        """Record the counter's value now; the events since the oldest sample and their span."""
        now = time.monotonic() if now is None else now
        then, old = self._history[0]
        self._history.append((now, count))
        return Frequency(count - old, now - then)


@dataclass(frozen=True)
class Delays:
    """Smallest and largest ``now - stamp`` (ms) seen since the previous report."""

    count: int
    min_ms: float
    max_ms: float
    zero_stamps: int


class TimeStampStatus:
    """Collects ``now - header.stamp`` per frame; ``take`` returns and resets the extremes.

    Thread-safe: frames tick from the executor or the worker thread, reports take on the executor.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._count = self._zero = 0
        self._min = float("inf")
        self._max = float("-inf")

    def tick(self, stamp_ns: int, now_ns: int) -> float:
        """Count one frame stamped ``stamp_ns`` seen at ``now_ns``; its delay in ms (NaN when the
        stamp is zero: an unstamped frame has no delay)."""
        if stamp_ns == 0:
            with self._lock:
                self._zero += 1
            return float("nan")
        delay_ms = (now_ns - stamp_ns) / 1e6
        with self._lock:
            self._count += 1
            self._min = min(self._min, delay_ms)
            self._max = max(self._max, delay_ms)
        return delay_ms

    def take(self) -> Delays:
        """The extremes since the previous ``take`` (count 0 when no stamped frame came)."""
        with self._lock:
            out = Delays(self._count, self._min, self._max, self._zero)
            self._reset()
        return out


class HealthMonitor:
    """The checks of one node: input and output rate, stamp age and pipeline latency."""

    def __init__(self, limits: HealthLimits, now: float | None = None) -> None:
        self.limits = limits
        self.input_rate = FrequencyStatus(limits.rate_window, now)
        self.output_rate = FrequencyStatus(limits.rate_window, now)
        self.stamp_age = TimeStampStatus()
        self.pipeline = TimeStampStatus()

    def check(
        self, received: int, processed: int, watching: bool, now: float | None = None
    ) -> tuple[list[Problem], dict]:
        """Problems and values of one report from the cumulative frame counters at ``now``
        (monotonic seconds; default the current time). ``received`` counts the frames the node
        should output: bad input frames and frames skipped without subscribers excluded.

        ``watching``: the node is active and some output has a subscriber; otherwise (inactive,
        idle) no rate or latency is expected and none is checked.
        """
        lim = self.limits
        inputs = self.input_rate.update(received, now)
        outputs = self.output_rate.update(processed, now)
        age, latency = self.stamp_age.take(), self.pipeline.take()
        expected = lim.expected_rate or inputs.hz
        values: dict[str, object] = {
            "rate_window_s": outputs.window_s,
            "input_rate_window_hz": inputs.hz,
            "output_rate_window_hz": outputs.hz,
            "expected_rate_hz": expected,
            "rate_tolerance": lim.rate_tolerance,
            "latency_budget_ms": lim.latency_budget_ms,
            "stamp_age_max_ms": age.max_ms if age.count else "none",
            "pipeline_latency_max_ms": latency.max_ms if latency.count else "none",
        }
        if not watching:
            return [], values
        problems: list[Problem] = []
        low, high = expected * (1 - lim.rate_tolerance), expected * (1 + lim.rate_tolerance)
        if inputs.events and not outputs.events:
            problems.append(
                (
                    DiagnosticStatus.ERROR,
                    f"no output for {outputs.window_s:.1f} s while input arrives "
                    f"({inputs.events} frames)",
                )
            )
        elif inputs.events and outputs.hz < low:
            problems.append(
                (
                    DiagnosticStatus.WARN,
                    f"output rate too low: {outputs.hz:.2f} Hz, expected >= {low:.2f} Hz",
                )
            )
        elif lim.expected_rate and outputs.hz > high:
            problems.append(
                (
                    DiagnosticStatus.WARN,
                    f"output rate too high: {outputs.hz:.2f} Hz, expected <= {high:.2f} Hz",
                )
            )
        problems += _delay_problems(age, latency, lim.latency_budget_ms)
        return problems, values


def _delay_problems(age: Delays, latency: Delays, budget_ms: float) -> list[Problem]:
    """TimeStampStatus's checks: stamps too old, in the future, or zero; pipeline over budget."""
    problems: list[Problem] = []
    warn = DiagnosticStatus.WARN
    if age.count and age.max_ms > budget_ms:
        problems.append(
            (warn, f"input stamps up to {age.max_ms:.0f} ms old (budget {budget_ms:g} ms)")
        )
    if age.count and age.min_ms < -budget_ms:
        problems.append(
            (warn, f"input stamps up to {-age.min_ms:.0f} ms in the future: clocks out of sync")
        )
    if age.zero_stamps:
        problems.append((warn, f"{age.zero_stamps} input frame(s) with a zero stamp"))
    if latency.count and latency.max_ms > budget_ms:
        problems.append(
            (warn, f"pipeline latency up to {latency.max_ms:.0f} ms (budget {budget_ms:g} ms)")
        )
    return problems
