"""Progress of a batch job on stderr, shared by every command that shows one.

On a terminal one line is redrawn in place (``\\r``); anywhere else (a captured log, a pipe)
plain lines are printed, at most one per ``log_every_s``, so a log stays readable. The rate comes
from the updates themselves over a sliding window and is shown only once the window spans
``min_s``: a first update right after the first item cannot read as hundreds per second.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import TextIO


class Progress:
    """done/total, rate and ETA of a job; silent when ``enabled`` is False."""

    def __init__(
        self,
        total: int,
        label: str,
        enabled: bool = True,
        unit: str = "frames",
        rate_unit: str = "fps",
        every_s: float = 0.5,
        log_every_s: float = 10.0,
        window_s: float = 5.0,
        min_s: float = 1.0,
        stream: TextIO | None = None,
    ) -> None:
        self.total, self.label, self.enabled = total, label, enabled
        self.unit, self.rate_unit = unit, rate_unit
        self.window_s, self.min_s = window_s, min_s
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s if self.tty else log_every_s
        self._samples: deque[tuple[float, int]] = deque()
        self._last_draw: float | None = None
        self._drawn = False

    def rate(self, final: bool = False) -> float | None:
        """Items per second over the last ``window_s``; None until the updates span ``min_s``
        (the ``final`` rate of a job shorter than that spans all of it)."""
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        if (t1 - t0 < self.min_s and not final) or t1 <= t0 or d1 <= d0:
            return None
        return (d1 - d0) / (t1 - t0)

    def line(self, done: int, extra: str = "") -> str:
        """The progress text for ``done`` items (no line ending)."""
        rate = self.rate(final=done >= self.total)
        speed = f"{rate:.1f} {self.rate_unit}" if rate is not None else f"-- {self.rate_unit}"
        eta = f"ETA {(self.total - done) / rate:.0f} s" if rate else "ETA --"
        return f"{self.label}: {done}/{self.total} {self.unit}  {speed}  {eta}  {extra}".rstrip()

    def update(self, done: int, extra: str = "", now: float | None = None) -> None:
        """Record ``done``; draw when ``every_s`` passed since the last draw, or at the end."""
        if not self.enabled:
            return
        now = time.monotonic() if now is None else now
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        due = self._last_draw is None or now - self._last_draw >= self.every_s
        if not due and done < self.total:
            return
        self._last_draw = now
        text = self.line(done, extra)
        if self.tty:
            self.stream.write(f"\r{text}")
            self._drawn = True
        else:
            self.stream.write(f"{text}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line on a terminal (plain lines are already ended)."""
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
