"""test/gpu/emu on sys.path: this folder's modules import the stand-ins by name (pycuda_emu,
tensorrt_emu). The emulator library itself is the session fixture ``emu_lib`` (test/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu
import tensorrt_emu


@pytest.fixture
def emulated_gpu(emu_lib, monkeypatch, tmp_path):
    """pycuda and TensorRT replaced by the stand-ins, the engine cache in a temporary folder;
    returns the emulated driver."""
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    tensorrt_emu.install(monkeypatch)
    return driver
