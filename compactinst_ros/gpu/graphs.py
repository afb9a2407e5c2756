"""CUDA graphs through the driver API, which pycuda does not wrap: capture what a callable enqueues
on a stream, then replay it with one launch.

pycuda 2026.1 has no stream capture, so this binds the six driver calls it needs from the CUDA
driver library itself (``libcuda.so.1``, the one pycuda runs on; CUDA 11.4+, so JetPack 6 and 7
and every x86 driver we claim). The capture is thread-local
(``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``): the backend's other GPU thread keeps enqueueing and
allocating while one thread captures. Whatever a capture needs allocated or copied synchronously
must happen before it; the driver refuses such calls on a capturing stream.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any

from ..errors import BackendError

#: ``CUstreamCaptureMode``: only the capturing thread's own unsafe calls are refused.
CAPTURE_THREAD_LOCAL = 1

_VOID_P = ctypes.c_void_p
_HANDLE_OUT = ctypes.POINTER(ctypes.c_void_p)
#: The driver entry points used, with their C parameter types (cuda.h; each returns CUresult).
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuStreamBeginCapture_v2": (_VOID_P, ctypes.c_int),
    "cuStreamEndCapture": (_VOID_P, _HANDLE_OUT),
    "cuGraphInstantiateWithFlags": (_HANDLE_OUT, _VOID_P, ctypes.c_ulonglong),
    "cuGraphLaunch": (_VOID_P, _VOID_P),
    "cuGraphExecDestroy": (_VOID_P,),
    "cuGraphDestroy": (_VOID_P,),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
}


class GraphError(BackendError):
    """A driver call of the graph API failed; the message names the call and the driver's
    reason."""


def load_driver() -> Any:
    """The CUDA driver library (GraphError where this machine has none)."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError as exc:
        raise GraphError(f"no CUDA driver library to capture graphs with ({exc})") from exc


class CudaGraphs:
    """Capture, replay and free CUDA graphs on pycuda streams (``stream.handle``)."""

    def __init__(self, library: Any | None = None) -> None:
        """Bind the entry points of ``library`` (None: ``load_driver()``); GraphError where one
        is missing (a driver older than CUDA 11.4)."""
        library = load_driver() if library is None else library
        self._calls: dict[str, Any] = {}
        for name, argtypes in SIGNATURES.items():
            try:
                call = getattr(library, name)
            except AttributeError:
                raise GraphError(
                    f"the CUDA driver has no {name} (CUDA 11.4 or newer is needed for graphs)"
                ) from None
            call.argtypes, call.restype = argtypes, ctypes.c_int
            self._calls[name] = call

    def _check(self, name: str, *args: Any) -> None:
        status = self._calls[name](*args)
        if status != 0:
            text = ctypes.c_char_p()
            self._calls["cuGetErrorString"](status, ctypes.byref(text))
            reason = text.value.decode() if text.value else "unknown error"
            raise GraphError(f"{name} failed with CUresult {status}: {reason}")

    def capture(self, stream: Any, enqueue: Callable[[], None]) -> int:
        """The executable graph of what ``enqueue()`` enqueues on ``stream`` (nothing runs
        now); free it with ``destroy``. The capture ends even where ``enqueue`` raises."""
        handle = ctypes.c_void_p(int(stream.handle))
        self._check("cuStreamBeginCapture_v2", handle, CAPTURE_THREAD_LOCAL)
        graph = ctypes.c_void_p()
        try:
            enqueue()
        finally:
            self._check("cuStreamEndCapture", handle, ctypes.byref(graph))
        executable = ctypes.c_void_p()
        try:
            self._check("cuGraphInstantiateWithFlags", ctypes.byref(executable), graph, 0)
        finally:
            self._check("cuGraphDestroy", graph)  # the executable keeps what it needs
        return int(executable.value or 0)

    def launch(self, executable: int, stream: Any) -> None:
        """Enqueue one replay of ``executable`` on ``stream``."""
        self._check(
            "cuGraphLaunch", ctypes.c_void_p(executable), ctypes.c_void_p(int(stream.handle))
        )

    def destroy(self, executable: int) -> None:
        """Free an executable graph ``capture`` returned."""
        self._check("cuGraphExecDestroy", ctypes.c_void_p(executable))
