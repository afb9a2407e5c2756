"""The shared progress line: redrawn only on a terminal, no first-frame spike in its rate."""

from __future__ import annotations

import io

from compactinst_ros.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _feed(bar: Progress, hz: float, n: int) -> None:
    for i in range(n):
        bar.update(i + 1, now=100.0 + i / hz)


def test_a_log_gets_plain_lines_no_carriage_returns() -> None:
    log = io.StringIO()
    bar = Progress(40, "realtime x1", stream=log, log_every_s=2.0)
    _feed(bar, 10.0, 40)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0].startswith("realtime x1: 1/40 frames  -- fps")
    assert lines[-1].startswith("realtime x1: 40/40 frames  10.0 fps  ETA 0 s")
    assert len(lines) == 3  # first, one 2 s later, the last (3.9 s): not one per frame


def test_a_terminal_gets_one_redrawn_line() -> None:
    tty = _Terminal()
    bar = Progress(40, "lockstep", stream=tty, every_s=0.5)
    _feed(bar, 10.0, 40)
    bar.close()
    text = tty.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.count("\r") == 9  # every 0.5 s of 3.9 s, plus the first and the last


def test_the_first_rate_waits_for_a_window() -> None:
    bar = Progress(100, "x", stream=io.StringIO(), min_s=1.0, window_s=5.0)
    bar.update(1, now=0.0)
    bar.update(2, now=0.002)  # the first two frames 2 ms apart: not 500 fps
    assert bar.rate() is None
    _feed(bar, 10.0, 60)
    assert abs(bar.rate() - 10.0) < 1e-6


def test_a_job_shorter_than_the_window_ends_with_its_rate() -> None:
    log = io.StringIO()
    bar = Progress(6, "realtime x2", stream=log)
    _feed(bar, 20.0, 6)  # 0.25 s in all
    assert log.getvalue().splitlines()[-1].startswith("realtime x2: 6/6 frames  20.0 fps")


def test_disabled_prints_nothing() -> None:
    log = io.StringIO()
    bar = Progress(3, "x", enabled=False, stream=log)
    _feed(bar, 1.0, 3)
    bar.close()
    assert log.getvalue() == ""
