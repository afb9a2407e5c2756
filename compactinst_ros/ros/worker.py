"""One worker thread that owns the Pipeline; callbacks hand it only each camera's newest frame.

Every camera has a one-slot mailbox: putting a frame while one waits replaces it and counts a
drop for that camera, so no queue grows and the worker always runs on the freshest images. The
worker takes the frames as rounds (``Batcher``), one batch per round, so N cameras share one
inference.

The batching policy: a round opens when the worker is free and a frame waits (at the frame's
arrival, or when the worker came back from the previous round if the frame waited for it). It
closes as soon as every subscribed camera has a frame, or ``window_s`` after it opened, whichever
comes first, and takes the newest frame of every camera that has one then. A late, stalled or
gone camera is left out of that round and costs the others at most the window; its frame, when
it comes, opens or joins the next round.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
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


@dataclass(frozen=True)
class Round:
    """The frames of one batch, as (camera index, frame) in camera order, and how long the round
    waited for them (open to close, seconds)."""

    frames: list[tuple[int, Frame]]
    wait_s: float


def round_wait(
    filled: Sequence[bool], expected: Sequence[bool], opened: float, now: float, window_s: float
) -> float:
    """Seconds a round opened at ``opened`` still waits at ``now``: 0 when every ``expected``
    (subscribed) camera has a frame (``filled``) or the window is over."""
    if all(has or not wanted for has, wanted in zip(filled, expected, strict=True)):
        return 0.0
    return max(0.0, opened + window_s - now)


class Batcher:
    """Per-camera one-slot, latest-wins mailboxes under one condition, taken as rounds.

    Thread-safe: callbacks ``put`` on the executor thread, the worker ``take``s. ``poll`` is
    the non-blocking step at an explicit time, so the policy is testable without threads.
    """

    def __init__(
        self, cameras: int, window_s: float, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._cond = threading.Condition()
        self._slots: list[Frame | None] = [None] * cameras
        self._expected = [False] * cameras
        self._free_at: float | None = None
        self._opened: float | None = None
        self._closed = False
        self._clock = clock
        self.window_s = window_s

    def put(self, camera: int, frame: Frame) -> bool:
        """Store ``camera``'s newest frame; True when it replaced one not taken yet (a drop)."""
        with self._cond:
            replaced = self._slots[camera] is not None
            self._slots[camera] = frame
            self._cond.notify()
        return replaced

    def expect(self, camera: int, subscribed: bool) -> None:
        """Whether a round waits for ``camera`` (it is subscribed) or never does (it is not)."""
        with self._cond:
            self._expected[camera] = subscribed
            self._cond.notify()

    def set_window(self, window_s: float) -> None:
        """Rounds opened from now on wait at most ``window_s``."""
        with self._cond:
            self.window_s = window_s

    def clear(self, camera: int) -> bool:
        """Drop ``camera``'s waiting frame (deactivation); True if there was one."""
        with self._cond:
            had, self._slots[camera] = self._slots[camera] is not None, None
            return had

    def close(self) -> None:
        """Wake the worker and make every later ``take`` return None."""
        with self._cond:
            self._closed = True
            self._slots = [None] * len(self._slots)
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True after ``close``."""
        return self._closed

    def _due(self, now: float) -> float | None:
        """Seconds until the round is taken (0: now); None while no frame waits. Lock held.

        The round opens at its first frame's arrival, or when the worker came back for it
        (its first look since the previous round) if the frame was already waiting."""
        if self._free_at is None:
            self._free_at = now
        waiting = [slot.received for slot in self._slots if slot is not None]
        if not waiting:
            return None
        if self._opened is None:
            self._opened = max(self._free_at, min(waiting))
        filled = [slot is not None for slot in self._slots]
        return round_wait(filled, self._expected, self._opened, now, self.window_s)

    def _take(self, now: float) -> Round:
        """Empty every slot into a round. Lock held."""
        frames = [(i, frame) for i, frame in enumerate(self._slots) if frame is not None]
        opened = now if self._opened is None else self._opened
        self._slots = [None] * len(self._slots)
        self._opened = self._free_at = None
        return Round(frames, max(0.0, now - opened))

    def poll(self, now: float | None = None) -> Round | None:
        """The round if it is due at ``now`` (default the clock), else None; never blocks."""
        with self._cond:
            now = self._clock() if now is None else now
            due = self._due(now)
            return self._take(now) if due == 0.0 and not self._closed else None

    def take(self) -> Round | None:
        """Wait for the next round; None once closed."""
        with self._cond:
            while not self._closed:
                now = self._clock()
                due = self._due(now)
                if due == 0.0:
                    return self._take(now)
                self._cond.wait(due)
            return None


#: weight of the newest round in the halves' running mean durations
DURATION_WEIGHT = 0.2


def running_mean(mean: float | None, value: float) -> float:
    """``mean`` moved ``DURATION_WEIGHT`` of the way to ``value`` (``value`` itself at first)."""
    return value if mean is None else mean + DURATION_WEIGHT * (value - mean)


class Finisher:
    """The second thread of a staged worker: finishes started rounds in their order.

    A hand-over waits until the previous round is finished, so at most two rounds are in
    flight (one finishing, one started). ``free_in`` says when the round being finished is due
    to end, so the worker can take its next round just in time and keep frames fresh.
    """

    def __init__(self, finish: Callable[[Any], None], name: str) -> None:
        self._finish = finish
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._free = threading.Semaphore(1)
        self._began: float | None = None
        self.mean_s: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (started := self._queue.get()) is not None:
            began = self._began = time.perf_counter()
            try:
                self._finish(started)
            finally:
                self.mean_s = running_mean(self.mean_s, time.perf_counter() - began)
                self._began = None
                self._free.release()

    def free_in(self, now: float | None = None) -> float:
        """Seconds until the round being finished is expected to end (0 when idle)."""
        began, mean = self._began, self.mean_s
        if began is None or mean is None:
            return 0.0
        return max(0.0, began + mean - (time.perf_counter() if now is None else now))

    def put(self, started: Any) -> None:
        """Hand over a started round once the previous one is finished."""
        while self._thread.is_alive():
            if self._free.acquire(timeout=0.1):
                self._queue.put(started)
                return
        raise BackendError(
            "the finishing thread stopped (its error is in the log); restart the node"
        )

    def close(self) -> None:
        """Finish what was handed over, then end the thread."""
        with contextlib.suppress(BackendError):
            self.put(None)
        self._thread.join()


class Worker:
    """Thread that builds the pipeline, runs ``start`` then ``finish`` on each round, then closes
    it.

    Building and closing happen on the worker thread itself. With ``overlap`` and a Pipeline
    that ``splits_stages`` (ONNX Runtime, OpenVINO, TensorRT), ``finish`` runs on a second
    thread (``Finisher``): the next round's conversion and encoder overlap this round's decoder,
    post-processing and publishing, the two halves a frame's work splits into (on TensorRT also
    two CUDA streams, so the GPU overlaps them too). The worker takes that next
    round when its first half (running mean) will end as the second half of the previous one is
    due to, so a frame waits in its mailbox, where a newer one replaces it, not for the
    hand-over.
    """

    def __init__(
        self,
        factory: Callable[[], Pipeline],
        start: Callable[[Pipeline, Round], Any],
        finish: Callable[[Pipeline, Any], None] | None = None,
        cameras: int = 1,
        window_s: float = 0.0,
        overlap: bool = False,
        name: str = "compactinst_worker",
    ) -> None:
        """``start`` returns the round's started work (None: nothing to finish) and ``finish``
        completes it."""
        self.batcher = Batcher(cameras, window_s)
        self._factory = factory
        self._start = start
        self._finish = finish
        self._overlap = overlap
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.pipeline: Pipeline | None = None
        self.staged = False
        self._options: PostprocessOptions | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, timeout: float | None = None) -> Pipeline:
        """Start the thread, wait for the pipeline; re-raises the factory's error."""
        self._thread.start()
        if not self._ready.wait(timeout):
            self.batcher.close()
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
        finish = self._finish
        self.staged = self._overlap and finish is not None and pipeline.splits_stages
        finisher = (
            Finisher(lambda started: finish(pipeline, started), f"{self._thread.name}_finish")
            if self.staged and finish is not None
            else None
        )
        self._ready.set()
        start_s: float | None = None
        try:
            while True:
                if finisher is not None and start_s is not None:
                    # take the round when its first half will end as the previous second half
                    # does: started earlier, its frames would only age waiting for the hand-over
                    time.sleep(min(max(0.0, finisher.free_in() - start_s), 1.0))
                if (batch := self.batcher.take()) is None:
                    break
                options = self._options  # one read per round: a swap never splits a batch
                if options is not None:
                    pipeline.options = options
                began = time.perf_counter()
                started = self._start(pipeline, batch)
                if started is None or finish is None:
                    continue
                if finisher is not None:
                    start_s = running_mean(start_s, time.perf_counter() - began)
                    finisher.put(started)
                else:
                    finish(pipeline, started)
        finally:
            if finisher is not None:
                finisher.close()
            pipeline.close()

    def update_options(self, options: PostprocessOptions) -> None:
        """Run the next round with ``options``: a reference swap, no lock around inference."""
        self._options = options

    def stop(self, timeout: float = 10.0) -> bool:
        """Close the batcher and join; False if the thread is still busy after ``timeout``."""
        self.batcher.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()
