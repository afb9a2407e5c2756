"""``backend: auto`` that ended up on the CPU of an NVIDIA machine: the WARN the node logs at start
and keeps on /diagnostics, naming the GPU runtime piece that failed to import."""

from __future__ import annotations

import os

from ..backends import GPU_BACKENDS, gpu_fallback_reason

#: environment variable: the file-system root searched for NVIDIA markers (default ``/``), so a
#: check of the warning can point the node at a prepared folder
MARKER_ROOT_ENV = "COMPACTINST_MARKER_ROOT"


def cpu_fallback_warning(requested: str, resolved: str) -> str | None:
    """The warning when ``requested`` was ``auto`` and ``resolved`` is not a GPU backend on a
    machine with an NVIDIA GPU, else None (the CPU was chosen, or is all there is)."""
    if requested != "auto" or resolved in GPU_BACKENDS:
        return None
    return gpu_fallback_reason(os.environ.get(MARKER_ROOT_ENV, "/"))


def cpu_loops_warning(resolved: str) -> str | None:
    """The start-up warning when the frames' post-processing runs on the CPU (any backend but
    on the GPU) without its compiled loops, else None (``jit.cpu_loops``)."""
    from ..jit import AVAILABLE, cpu_loops

    return None if AVAILABLE or resolved in GPU_BACKENDS else cpu_loops()
