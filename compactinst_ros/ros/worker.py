"""One worker thread that owns the Pipeline; callbacks hand it only the newest frame.

The mailbox has one slot: putting a frame while one waits replaces it and counts a drop, so
no queue grows and the worker always runs on the freshest image.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BackendError

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..structures import PostprocessOptions


@dataclass
class Frame:
    """A received message waiting for the worker (raw Image or CompressedImage)."""

    msg: Any
    compressed: bool
    received: float = field(default_factory=time.perf_counter)


class Mailbox:
    """Single-slot, latest-wins hand-off between the executor and the worker thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: Frame | None = None
        self._closed = False

    def put(self, item: Frame) -> bool:
        """Store ``item``; True when it replaced a frame the worker had not taken yet."""
        with self._cond:
            replaced = self._item is not None
            self._item = item
            self._cond.notify()
        return replaced

    def get(self, timeout: float | None = None) -> Frame | None:
        """Newest frame, waiting up to ``timeout``; None when closed or timed out."""
        with self._cond:
            if self._item is None and not self._closed:
                self._cond.wait(timeout)
            item, self._item = self._item, None
            return None if self._closed else item

    def clear(self) -> bool:
        """Drop a waiting frame (deactivation); True if there was one."""
        with self._cond:
            had, self._item = self._item is not None, None
            return had

    def close(self) -> None:
        """Wake the worker and make every later ``get`` return None."""
        with self._cond:
            self._closed = True
            self._item = None
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True after ``close``."""
        return self._closed


class Worker:
    """Thread that builds the pipeline, processes mailbox frames with ``handler``, then closes it.

    Building and closing happen on the worker thread itself, so a CUDA context created by the
    backend stays current on the one thread that uses it.
    """

    def __init__(
        self,
        factory: Callable[[], Pipeline],
        handler: Callable[[Pipeline, Frame], None],
        name: str = "compactinst_worker",
    ) -> None:
        self.mailbox = Mailbox()
        self._factory = factory
        self._handler = handler
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.pipeline: Pipeline | None = None
        self._options: PostprocessOptions | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, timeout: float | None = None) -> Pipeline:
        """Start the thread, wait for the pipeline; re-raises the factory's error."""
        self._thread.start()
        if not self._ready.wait(timeout):
            self.mailbox.close()
            raise BackendError(
                f"the model did not load within {timeout} s; check the bundle and the backend"
            )
        if self._error is not None:
            self._thread.join()
            raise self._error
        assert self.pipeline is not None
        return self.pipeline

    def _run(self) -> None:
        try:
            pipeline = self.pipeline = self._factory()
        except BaseException as exc:  # handed to start() and re-raised there
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                frame = self.mailbox.get()
                if frame is None:
                    if self.mailbox.closed:
                        break
                    continue
                options = self._options  # one read per frame: a swap never splits a frame
                if options is not None:
                    pipeline.options = options
                self._handler(pipeline, frame)
        finally:
            pipeline.close()

    def update_options(self, options: PostprocessOptions) -> None:
        """Run the next frame with ``options``: a reference swap, no lock around inference."""
        self._options = options

    def stop(self, timeout: float = 10.0) -> bool:
        """Close the mailbox and join; False if the thread is still busy after ``timeout``."""
        self.mailbox.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()
