"""The post-processing helper thread: work that runs beside the caller's on a second CPU.

A frame's three outputs need nothing of each other once the tile bounds are known, and the
panoptic per-pixel work splits by tile rows, so on a host with more than one CPU part of a frame
runs here while the caller's thread does the rest. The compiled loops and numpy's large-array
passes run without the GIL, so the two threads overlap; the results never depend on it.
One helper per process, made on first use: the frames of every Pipeline share it, in the order
they hand it work.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: whether a host with more than one CPU uses the helper (a benchmark turns it off to compare)
HELPER_THREAD = True
_lock = threading.Lock()
_helper: ThreadPoolExecutor | None = None
_helper_pid = 0


def available() -> bool:
    """Whether work goes to the helper: it is on and this thread may run on two CPUs."""
    return HELPER_THREAD and len(os.sched_getaffinity(0)) > 1


def beside(function: Callable[..., T], *args: Any) -> Future:
    """``function(*args)`` on the helper thread; on a host with one CPU (or with the helper
    off), run here and now."""
    global _helper, _helper_pid
    if available():
        with _lock:
            if _helper is None or _helper_pid != os.getpid():  # a forked child has no thread
                _helper = ThreadPoolExecutor(1, thread_name_prefix="postprocess")
                _helper_pid = os.getpid()
        return _helper.submit(function, *args)
    done: Future = Future()
    done.set_result(function(*args))
    return done


class Pieces:
    """Pieces of work that two threads take in turn until none is left (each exactly once)."""

    def __init__(self, pieces: Iterable[T]) -> None:
        self._left: Iterator = iter(pieces)
        self._lock = threading.Lock()

    def take(self) -> Any:
        """The next piece, or None when all are taken."""
        with self._lock:
            return next(self._left, None)


def shared(work: Callable[[], T]) -> tuple[T, T | None]:
    """``work()`` on this thread and on the helper at once (where there is one): each call
    takes pieces from a shared ``Pieces`` until none is left, so the two share the pieces as
    their speed allows. (this thread's result, the helper's or None where the helper had not
    started when this thread ran out of pieces: it then never runs, since it would find none)."""
    helper = beside(work) if available() else None
    mine = work()
    if helper is None or helper.cancel():
        return mine, None
    return mine, helper.result()
