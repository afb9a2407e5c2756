"""Test-only: ``compactinst_node`` with TensorRT and pycuda replaced by the CPU stand-ins of this
folder, so a ROS test can drive the node's TensorRT path (engine build at start, GPU overlay on
subscription, diagnostics) without a GPU. Arguments are the node's (``--ros-args ...``); at exit
it prints which kernels ran. The emulator library is the one $COMPACTINST_TEST_EMU_LIBRARY names
(the tests' session build, see the ``emu_library_for_nodes`` fixture), else compiled here."""

from __future__ import annotations

import os
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
    prebuilt = os.environ.get(pycuda_emu.PREBUILT_LIBRARY_ENV)
    with tempfile.TemporaryDirectory() as build_dir:
        library = (
            pycuda_emu.load_library(Path(prebuilt))
            if prebuilt
            else pycuda_emu.build_library(Path(build_dir))
        )
        driver = pycuda_emu.install(patch, library)
        tensorrt_emu.install(patch)
        code = main()
        print(f"emulated kernels launched: {sorted(set(driver.launches))}", flush=True)
        sys.exit(code)
