"""test/gpu/emu on sys.path: this folder's modules import the stand-ins by name (pycuda_emu,
tensorrt_emu). The emulator library itself is the session fixture ``emu_lib`` (test/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "emu"))
