"""One inter-process lock for work that must happen once per machine (numba's compilation of
the CPU loops, an interface package's build): an exclusive ``flock`` on a file."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created, with its folder, where missing) for the
    block; another process asking for it waits until this one leaves."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
