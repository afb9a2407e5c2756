"""The optional numba compilation that the CPU loops share (post-processing, 3-D lifting, RVL
depth): the ``fast`` extra. Without numba every caller runs its numpy (or Python) loop, with
the same results."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import Any

from .locks import exclusive

try:
    import numba
except ImportError:  # the optional ``fast`` extra
    numba = None

#: True where numba is installed (and imports)
AVAILABLE = numba is not None
FAST_INSTALL = "pip install 'compactinst_ros[fast]'"


def cpu_loops() -> str:
    """What runs the CPU's per-pixel loops (post-processing, 3-D lifting, RVL depth):
    ``numba``, or the numpy fallback and how to leave it."""
    if AVAILABLE:
        return "numba"
    return (
        "numpy: numba is not installed, so the CPU post-processing and 3-D lifting run their "
        f"numpy loops (1.75x slower post-processing at 1080p, same results); {FAST_INSTALL}"
    )


def njit_cached(function: Callable) -> Any:
    """``function`` compiled by numba in nopython mode, with numba's on-disk cache (compiled
    once per machine, on the first call) and without the GIL held; None without numba."""
    if numba is None:
        return None
    return numba.njit(cache=True, nogil=True)(function)


def compile_lock() -> contextlib.AbstractContextManager[None]:
    """Held while a process compiles its loops (or loads them from numba's cache).

    numba's cache has no lock: processes that start together on a fresh install (the cameras
    of a launch file, test workers) would each compile for seconds. Under this per-user file
    lock the first compiles and writes the cache, the others then load it.
    """
    name = f"compactinst_ros-numba-{os.getuid()}.lock"
    return exclusive(os.path.join(tempfile.gettempdir(), name))
