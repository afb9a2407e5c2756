"""Camera rasters in memory that a ROS message keeps as it is, reused from frame to frame.

A 1080p frame's three rasters are 14.5 MB. A sensor_msgs/Image's uint8[] field keeps an
``array.array('B')`` as it is (any other value is copied, or checked element by element), so the
rasters that post-processing composes and the tracker remaps are made in one
(``message_raster``) and go out with no copy (``message_bytes``). New memory costs a write of
every byte (array.array has no uninitialised constructor) and the page faults of a fresh
mapping, so each buffer is kept and handed out again once nothing but this module holds it: no
numpy view of it and no message with it is left. That is a reference count, exact in CPython.
"""

from __future__ import annotations

import array
import sys
import threading

import numpy as np

#: buffers kept per byte count: a camera's frame in flight and the one being published, with room
#: for a second camera of the same size (more are made as needed, and not kept)
KEPT_PER_SIZE = 4

_kept: dict[int, list[array.array]] = {}
_kept_lock = threading.Lock()


def _references_when_unused() -> int:
    """What ``sys.getrefcount`` reports for a kept buffer that nothing else holds, counted in the
    same loop shape as ``message_raster`` (the list's slot, the loop variable, the argument)."""
    for buffer in [array.array("B")]:
        return sys.getrefcount(buffer)
    raise AssertionError("unreachable")


_UNUSED = _references_when_unused()


def message_raster(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` whose memory is an ``array.array('B')``,
    a kept one where one is free. Its values are what the last user left: callers write every
    element (the compose and remap loops do)."""
    count = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with _kept_lock:
        kept = _kept.setdefault(count, [])
        for buffer in kept:
            if sys.getrefcount(buffer) <= _UNUSED:
                break
        else:
            buffer = array.array("B", b"\0") * count
            if len(kept) < KEPT_PER_SIZE:
                kept.append(buffer)
    return np.frombuffer(buffer, dtype).reshape(shape)


def message_bytes(values: np.ndarray) -> array.array:
    """``values``' bytes as ``array.array('B')`` for a uint8[] message field: the array.array
    under ``values`` itself where it is all of one (``message_raster``), else a copy."""
    owner = values
    while isinstance(owner, np.ndarray):
        owner = owner.base
    if isinstance(owner, memoryview):  # np.frombuffer keeps a view of the array.array
        owner = owner.obj
    if (
        isinstance(owner, array.array)
        and owner.typecode == "B"
        and values.flags.c_contiguous
        and values.nbytes == len(owner)
        and values.__array_interface__["data"][0] == owner.buffer_info()[0]
    ):
        return owner
    out = array.array("B")
    out.frombytes(np.ascontiguousarray(values).reshape(-1).view(np.uint8))
    return out
