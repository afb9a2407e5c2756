"""Every CUDA source compiles with nvcc for Jetson Orin (sm_87) and Hopper (sm_90), warnings as
errors; skipped where nvcc is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CUDA_DIR = Path(__file__).resolve().parents[2] / "compactinst_ros" / "cuda"
SOURCES = sorted(CUDA_DIR.glob("*.cu"))
NVCC = shutil.which("nvcc")

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def test_sources_exist() -> None:
    assert {p.name for p in SOURCES} >= {"preprocess.cu", "postprocess.cu", "overlay.cu"}


@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(source: Path, arch: str, tmp_path: Path) -> None:
    cmd = [
        str(NVCC), "-c", f"-arch={arch}", "-std=c++17", "-Werror", "all-warnings",
        "-Xcompiler", "-Wall,-Werror", "-I", str(CUDA_DIR), "-o", str(tmp_path / "k.o"),
        str(source),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_nvcc_rejects_broken_source(tmp_path: Path) -> None:
    """The compile check can fail: a kernel with a type error does not pass."""
    bad = tmp_path / "bad.cu"
    bad.write_text('#include "common.cuh"\nextern "C" __global__ void k(int* p) { p = 1.5f; }\n')
    out = str(tmp_path / "b.o")
    cmd = [str(NVCC), "-c", "-arch=sm_87", "-I", str(CUDA_DIR), "-o", out, str(bad)]
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode != 0
