"""DDP on CPU (gloo, 2 processes via torchrun): identical weights on both ranks after a step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from compactinst_ros.train.synthetic import generate

ROOT = Path(__file__).resolve().parents[2]


def test_two_ranks_identical_after_step(tmp_path):
    generate(tmp_path / "data", 2, seed=4, height=96, width=128, progress=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(29500 + os.getpid() % 1000),
        str(ROOT / "test" / "train" / "ddp_worker.py"),
        str(tmp_path / "data"),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert r0["loss"] != r1["loss"]  # each rank saw its own image
    for key, value in r0["model"].items():
        assert torch.equal(value, r1["model"][key]), key
