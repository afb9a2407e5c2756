"""A 60 s soak of the node under a 30 Hz 1080p stream (scripts/soak.py): private resident memory
stays flat after the warm-up and no file descriptor or thread accumulates (shared memory, the DDS
transport's fixed-size segments being touched, is reported by the script, not judged). On a
small CPU the node cannot keep up and drops frames (counted); the soak checks resources, not
throughput."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys

import pytest
from ros_domains import next_domain
from ros_harness import REPO, ros_env

pytest.importorskip("rclpy")


#: one 1080x1920 bgr8 frame of the soak's camera, in MiB
FRAME_MB = 1080 * 1920 * 3 / 2**20


# a minute and a half of one worker: make test-full runs it (resource growth, not behaviour)
@pytest.mark.full
@pytest.mark.slow
def test_sixty_second_soak_has_flat_memory_and_no_fd_or_thread_growth(tmp_path) -> None:
    out = tmp_path / "soak"
    command = [sys.executable, str(REPO / "scripts" / "soak.py"), "--duration", "60"]
    command += ["--warmup-frames", "25", "--probe-every", "8", "--out", str(out)]
    env = ros_env(next_domain())
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    report = f"{summary}\nnode log: {out / 'node.log'}"
    assert len(summary["probes"]) >= 4, report  # from the warm-up's end to the end
    # A leak grows steadily; the transport taking one more camera frame buffer under load is
    # one step of one frame (1080p bgr8: 5.9 MiB), seen once in a while at any point of the run.
    private = [probe[2] for probe in summary["probes"]]
    steps = [b - a for a, b in itertools.pairwise(private)]
    largest = max(steps, default=0.0)
    assert largest <= FRAME_MB + 0.5, report
    assert summary["private_growth_mb"] - max(largest, 0.0) < 2.0, report
    assert summary["fds_end"] <= summary["fds_start"], report
    assert summary["threads_end"] <= summary["threads_start"], report
    assert summary["frames_processed"] > 0 and summary["errors"] == 0, report
    assert summary["frames_sent"] > summary["frames_processed"], report
    with open(out / "soak.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == summary["samples"] and summary["duration_s"] >= 60.0
    assert (out / "soak.png").stat().st_size > 0
