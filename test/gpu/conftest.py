"""The kernel emulator library (test/gpu/emu), compiled once per test session."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu


@pytest.fixture(scope="session")
def emu_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """runner.cpp (the real kernel sources on the CPU emulator) as a loaded shared library."""
    return pycuda_emu.build_library(tmp_path_factory.mktemp("emu"))
