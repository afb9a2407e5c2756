"""The health checks' arithmetic (FrequencyStatus / TimeStampStatus semantics), stamp
matching and the per-reason error log and counts, without DDS; the node-level behaviour:
test_ros_health.py, test_ros_camera_info.py."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticStatus

from compactinst_ros.ros.camera_info import StampMatcher
from compactinst_ros.ros.diagnostics import (
    MAX_REASONS,
    OTHER_REASON,
    REASON_KEY,
    FrameStats,
    ReasonThrottle,
    error_reason,
    health_status,
)
from compactinst_ros.ros.health import FrequencyStatus, HealthLimits, HealthMonitor

MS = 1_000_000
#: seven distinct bad-frame messages, as the converters word them
BAD_FRAMES = (
    "step 100 is smaller than width x channels = 1920 (640 px); fix the driver",
    "image data has 10 bytes, fewer than height x step = 1920; the message is truncated",
    "unsupported image encoding 'bayer_rggb8'; publish one of ['bgr8']",
    "image has zero size (0x640); the camera sent an empty frame",
    "image 40000x40000 exceeds the 16384-pixel side limit; downscale at the camera",
    "compressed image is empty; the camera sent no data",
    "CompressedImage format 'tiff' is not supported; publish one of ['jpeg', 'png']",
)


def test_frequency_window_reaches_back_window_updates():
    rate = FrequencyStatus(window=3, now=0.0)
    assert rate.update(10, now=1.0).hz == pytest.approx(10.0)  # since the start
    rate.update(20, now=2.0)
    rate.update(30, now=3.0)
    later = rate.update(34, now=4.0)  # the sample taken 3 updates ago: (1.0, 10)
    assert (later.events, later.window_s) == (24, 3.0)
    assert later.hz == pytest.approx(8.0)


def _monitor(**limits: float) -> HealthMonitor:
    """A monitor whose rate window starts at monotonic time 0."""
    return HealthMonitor(HealthLimits(**limits), now=0.0)


def _levels(problems: list) -> list[bytes]:
    return [level for level, _ in problems]


def test_rates_against_the_measured_input_rate():
    assert _monitor(rate_tolerance=0.1).check(100, 95, True, now=10.0)[0] == []  # within 10 %
    problems, values = _monitor(rate_tolerance=0.1).check(100, 10, True, now=10.0)  # 90 % dropped
    assert _levels(problems) == [DiagnosticStatus.WARN] and "too low" in problems[0][1]
    assert (values["expected_rate_hz"], values["output_rate_window_hz"]) == (10.0, 1.0)
    problems, _ = _monitor().check(100, 0, True, now=10.0)  # input but no output: stalled
    assert _levels(problems) == [DiagnosticStatus.ERROR] and "no output" in problems[0][1]
    assert _monitor().check(100, 0, False, now=10.0)[0] == []  # idle or inactive: no check
    assert _monitor().check(0, 0, True, now=10.0)[0] == []  # no input: "input silent"'s case


def test_a_set_expected_rate_bounds_both_ways():
    ok = _monitor(expected_rate=10.0, rate_tolerance=0.1).check(100, 95, True, now=10.0)
    assert ok[0] == []
    low = _monitor(expected_rate=10.0, rate_tolerance=0.1).check(100, 85, True, now=10.0)
    assert "too low" in low[0][0][1]
    high = _monitor(expected_rate=10.0, rate_tolerance=0.1).check(150, 120, True, now=10.0)
    assert _levels(high[0]) == [DiagnosticStatus.WARN] and "too high" in high[0][0][1]


def test_stamp_age_and_pipeline_latency_against_the_budget():
    monitor = _monitor(latency_budget_ms=100.0)
    now = 10_000 * MS
    monitor.stamp_age.tick(now - 20 * MS, now)
    monitor.pipeline.tick(now - 50 * MS, now)
    assert monitor.check(1, 1, True, now=1.0)[0] == []
    monitor.stamp_age.tick(now - 250 * MS, now)  # a 250 ms old frame
    monitor.pipeline.tick(now - 2000 * MS, now)  # 2 s camera-to-output
    monitor.stamp_age.tick(now + 500 * MS, now)  # a stamp from the future
    problems, values = monitor.check(2, 2, True, now=2.0)
    text = "; ".join(m for _, m in problems)
    assert set(_levels(problems)) == {DiagnosticStatus.WARN}
    assert "250 ms old" in text and "2000 ms" in text and "in the future" in text
    assert values["pipeline_latency_max_ms"] == pytest.approx(2000.0)
    assert monitor.check(3, 3, True, now=3.0)[0] == []  # extremes reset after each report
    assert monitor.stamp_age.tick(0, now) != monitor.stamp_age.tick(0, now)  # NaN: no stamp
    assert "zero stamp" in monitor.check(4, 4, True, now=4.0)[0][0][1]


def test_stamp_matcher_exact_nearest_and_bounded():
    matcher: StampMatcher[str] = StampMatcher(tolerance_ns=1 * MS, keep=3)
    for i in range(5):
        matcher.add(i * 100 * MS, f"info{i}")
    assert matcher.match(400 * MS) == "info4"
    assert matcher.match(300 * MS + MS // 2) == "info3"  # within 1 ms
    assert matcher.match(300 * MS + 2 * MS) is None  # outside the tolerance
    assert matcher.match(100 * MS) is None  # no longer kept


def test_each_error_reason_has_its_own_log_window():
    """One reason logged often never hides another: each is logged once per window, and the
    suppressed ones are counted for the next line of that reason."""
    throttle = ReasonThrottle(window_s=2.0)
    reasons = [error_reason(f"bad input frame: {m}") for m in BAD_FRAMES]
    assert len(set(reasons)) == len(BAD_FRAMES)
    logged = [throttle.admit(r, now=0.1 * i) for i, r in enumerate(reasons)]
    assert logged == [0] * len(BAD_FRAMES)  # seven reasons 0.1 s apart: all seven logged
    assert throttle.admit(reasons[0], now=1.0) is None
    assert throttle.admit(reasons[0], now=1.5) is None
    assert throttle.admit(reasons[1], now=1.9) is None
    assert throttle.admit(reasons[0], now=2.1) == 2  # next window: two suppressed meanwhile
    assert throttle.admit(reasons[1], now=2.2) == 1


def test_frame_stats_count_each_reason_and_diagnostics_show_every_count():
    stats = FrameStats()
    for message in [*BAD_FRAMES, BAD_FRAMES[0].replace("640", "320"), BAD_FRAMES[0]]:
        stats.on_error(f"bad input frame: {message}", input_error=True)
    stats.on_error("RuntimeError: CUDA out of memory", input_error=False)
    report = stats.tick()
    counts = report["error_reasons"]
    assert len(counts) == len(BAD_FRAMES) + 1
    assert counts[error_reason(f"bad input frame: {BAD_FRAMES[0]}")] == 3  # sizes differ: 1 reason
    status = health_status("n", report, {}, 1, 2.0, True)
    values = {kv.key: kv.value for kv in status.values}
    shown = {k[len(REASON_KEY) :]: int(v) for k, v in values.items() if k.startswith(REASON_KEY)}
    assert shown == counts and values["input_errors"] == str(len(BAD_FRAMES) + 2)
    assert "bad input frame: step N is smaller than width x channels = N (N px)" in shown


def test_reasons_beyond_the_limit_are_counted_as_other():
    stats = FrameStats()
    for i in range(MAX_REASONS + 5):
        stats.on_error(f"RuntimeError: failure kind {'x' * i}", input_error=False)
    counts = stats.tick()["error_reasons"]
    assert len(counts) == MAX_REASONS + 1 and counts[OTHER_REASON] == 5
