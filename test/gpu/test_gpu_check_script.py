"""scripts/gpu_check.sh keeps its stated time limits even when a step ignores SIGTERM, as a
process stuck in TensorRT's builder does: SIGKILL follows, and the next step still runs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Stands in for python: no tensorrt to import, and every script ignores SIGTERM and hangs.
STUCK_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then exit 1; fi
trap '' TERM
echo "started $*"
sleep 60
"""


def test_a_step_that_ignores_sigterm_is_killed_and_the_next_runs(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text(STUCK_PYTHON)
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {
        **os.environ, "PYTHON": str(python), "GPU_CHECK_CHECK_S": "1", "GPU_CHECK_BENCH_S": "1",
        "GPU_CHECK_KILL_S": "1",
    }  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)],
        env=env, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert proc.returncode == 137, proc.stdout + proc.stderr
    assert elapsed < 20, f"{elapsed:.0f} s: a step outlived its limit"
    assert "gpu_check.py exit 137, gpu_bench.py exit 137" in proc.stdout
    bench_log = (out / "gpu_bench.log").read_text()
    assert "started scripts/gpu_bench.py" in bench_log
    report = ROOT / "docs" / "engine_reports" / "paper-1024x2048-sm86.json"
    assert f"--engine-report {report}" in bench_log and report.is_file()
    assert "no TensorRT: no engines built" in (out / "build_engine.log").read_text()
    assert "gpu_check.py 1 s, gpu_bench.py 1 s" in (out / "gpu.txt").read_text()
