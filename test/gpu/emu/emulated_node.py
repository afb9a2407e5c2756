"""Test-only: ``compactinst_node`` with TensorRT and pycuda replaced by the CPU stand-ins of this
folder, so a ROS test can drive the node's TensorRT path (engine build at start, GPU overlay on
subscription, diagnostics) without a GPU. Arguments are the node's (``--ros-args ...``); at exit
it prints which kernels ran."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pycuda_emu
import tensorrt_emu

from compactinst_ros.ros.node import main

if __name__ == "__main__":
    patch = pytest.MonkeyPatch()
    with tempfile.TemporaryDirectory() as build_dir:
        driver = pycuda_emu.install(patch, pycuda_emu.build_library(Path(build_dir)))
        tensorrt_emu.install(patch)
        code = main()
        print(f"emulated kernels launched: {sorted(set(driver.launches))}", flush=True)
        sys.exit(code)
