"""Best-effort frames over Fast DDS's default 512 kB shared-memory segment, between two
processes, on the Fast DDS of this environment (3.2 with Kilted's wheels, 2.14 with Jazzy's):
the loopback profile's 32 MB segment delivers every one, and without it frames are lost, which
is why the launch files set a profile (docs/ros.md, "The Fast DDS shared-memory profiles"; the
numbers there come from the same script, scripts/bench_best_effort_size.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_best_effort_size.py"
#: 6.3 MB bgr8 frames, twelve times the default segment; few, to keep the test short
SIZE, FRAMES = "1024x2048", 8


def test_frames_over_the_default_segment_arrive_only_with_the_loopback_profile() -> None:
    pytest.importorskip("rclpy")
    from ros_domains import next_domain
    from ros_harness import ros_env

    env = ros_env(next_domain())
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", SIZE, "--frames", str(FRAMES),
         "--domain", env["ROS_DOMAIN_ID"]],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    rows = {}
    for line in run.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] in ("defaults", "loopback"):
            rows[cells[0]] = (int(cells[4]), int(cells[5]))
    assert rows.keys() == {"defaults", "loopback"}, run.stdout
    assert rows["loopback"] == (FRAMES, FRAMES), f"the profile lost frames:\n{run.stdout}"
    sent, received = rows["defaults"]
    assert sent == FRAMES and received < sent, (
        f"Fast DDS's defaults delivered every frame over its segment: docs/ros.md is stale\n"
        f"{run.stdout}"
    )
