"""Test-only stand-in for the subset of ``pycuda.driver`` our host code uses, backed by host
memory and the CPU kernel emulator (runner.cpp), so CI executes the launchers in
compactinst_ros/gpu and scripts/gpu_check.py end to end without a GPU.

Kernels reach it the way they reach a GPU: the runtime loader (gpu/loader.py) reads a shipped
image and hands its bytes to ``module_from_buffer``. The emulated device has no CUDA
architecture (compute capability 0.0, by which reports recognise the stand-in), so ``install``
names the image through the loader's ``COMPACTINST_KERNEL_TARGET``.
The stand-in reads the image (gpu/images.py): a module offers only the kernels the image holds,
and a launch must pack its arguments at the offsets the image gives its parameters; the
emulator then runs those kernels from the same sources, which the images' manifest digests.

The emulated devices (one unless ``install`` is told more) share that host memory; a primary
context pushed makes its device current (``_context_stack``, read by the TensorRT stand-in's
builder, as TensorRT builds on the current context).
Device memory is host memory with a guard band after every allocation (checked after every
launch, so an out-of-bounds kernel write fails loudly). ``prepared_async_call`` packs the
arguments with ``struct.pack`` of the prepare string, as pycuda does, and the emulator reads that
buffer through the kernel's C++ signature.

Streams run in one of two legal schedules (``install``'s ``schedule``), the two ends of what a
GPU may do. "late" (the default): work enqueued on a stream runs only when the host waits for it
(``Stream.synchronize``, ``Event.synchronize``, a synchronous copy, which waits for every stream
as the legacy default stream does) or when a stream that waits on one of its events
(``Stream.wait_for_event``) reaches that wait. So a consumer on another stream that forgets its
wait reads what was there before, and a host buffer rewritten before its asynchronous upload ran
uploads the new contents. "early": work runs as soon as it is enqueued, unless its stream waits
on an event not reached yet. So a producer that reuses a buffer its consumer on another stream
has not read yet overwrites it first. Each fails the parity checks, where an emulator that ran
everything at enqueue in host order would hide it.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import itertools
import shutil
import struct
import subprocess
import sys
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from compactinst_ros.gpu import loader
from compactinst_ros.gpu.images import (
    KERNEL_DIR,
    ImageError,
    ImageInfo,
    param_layout,
    read_image,
)

EMU_DIR = Path(__file__).resolve().parent
#: path of a library ``build_library`` already compiled, for emulated_node.py to load instead
PREBUILT_LIBRARY_ENV = "COMPACTINST_TEST_EMU_LIBRARY"
GUARD = 256
GUARD_BYTE = 0xA5
#: Ordinals of the pushed contexts, innermost last (``install`` gives each test a new list).
_context_stack: list[int] = []
#: How many emulated devices there are (``install`` sets it).
_device_count = 1
#: what ``Device.compute_capability`` reports: no CUDA architecture, unless a test names one
_compute_capability = (0, 0)


def build_library(out_dir: Path) -> ctypes.CDLL:
    """Compile runner.cpp (the real kernel sources on the emulator) into a shared library."""
    out = out_dir / "emu.so"
    cmd = [
        str(shutil.which("g++")), "-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared",
        "-pthread", "-I", str(KERNEL_DIR), "-o", str(out), str(EMU_DIR / "runner.cpp"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return load_library(out)


def load_library(path: Path) -> ctypes.CDLL:
    """A library ``build_library`` compiled, loaded with its entry point's argument types."""
    lib = ctypes.CDLL(str(path))
    lib.emu_launch_packed.argtypes = [ctypes.c_char_p] + [ctypes.c_uint] * 5 + [
        ctypes.c_char_p, ctypes.c_size_t,
    ]  # fmt: skip
    lib.emu_launch_packed.restype = ctypes.c_int
    return lib


class DeviceAllocation:
    """Emulated device buffer: ``int()`` is its address, like pycuda's (no ``__index__``, so
    host code must convert explicitly before packing, which real pycuda always accepts)."""

    def __init__(self, nbytes: int, registry: weakref.WeakSet[DeviceAllocation]) -> None:
        self.nbytes = nbytes
        self.storage = np.full(nbytes + GUARD, GUARD_BYTE, np.uint8)
        registry.add(self)

    def __int__(self) -> int:
        return self.storage.ctypes.data

    def __del__(self) -> None:
        # pending work may still write here: keep the memory until every stream is idle
        if any(not stream._idle for stream in list(_streams.values())):
            _freed_storage.append(self.storage)

    def guard_intact(self) -> bool:
        """False once anything wrote past the end of the allocation."""
        return bool((self.storage[self.nbytes :] == GUARD_BYTE).all())


#: Serialises the emulated device: one operation at a time, whichever host thread enqueued it.
_device_lock = threading.RLock()
#: Stream handles, as ``execute_async_v3`` receives them, to their streams (``stream_of``).
_streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
_handles = itertools.count(1)
#: Storage of allocations freed while work was pending, kept until every stream is idle.
_freed_storage: list[np.ndarray] = []
#: When stream work runs (``install`` sets it): "late", when something waits for it, or
#: "early", as soon as enqueued unless its stream waits on an event not reached yet.
SCHEDULES = ("late", "early")
_schedule = "late"


class _Wait:
    """A stream's wait on one record of an event (``Stream.wait_for_event``)."""

    def __init__(self, marker: _Marker) -> None:
        self.marker = marker


class Stream:
    """Emulated stream: a queue of operations, run in order by the schedule's rule."""

    def __init__(self, flags: int = 0) -> None:
        self.handle = next(_handles)
        self._pending: deque[Callable[[], None] | _Wait] = deque()
        #: the operations of an ongoing graph capture (``EmulatedDriverLibrary``), else None
        self._captured: list[Callable[[], None] | _Wait] | None = None
        self._capture_broken: str | None = None
        _streams[self.handle] = self

    def _enqueue(self, operation: Callable[[], None] | _Wait) -> None:
        """Append ``operation`` (to the graph being captured, if any); the early schedule then
        runs whatever can run."""
        with _device_lock:
            if self._captured is not None:
                self._captured.append(operation)
                return
            self._pending.append(operation)
            if _schedule == "early":
                _run_ready()

    def _step(self, force: bool) -> bool:
        """Run the next operation; a wait first runs (``force``) or needs its event's stream up
        to the record. False when blocked on a wait."""
        head = self._pending[0]
        if isinstance(head, _Wait):
            if force:
                head.marker._reach()
            elif head.marker.at is None:
                return False
            self._pending.popleft()
        else:
            self._pending.popleft()()
        return True

    def _run_until(self, done: Callable[[], bool]) -> None:
        with _device_lock:
            while self._pending and not done():
                self._step(force=True)

    def synchronize(self) -> None:
        """Run everything enqueued so far (LogicError while capturing, as the driver's
        ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``)."""
        if self._captured is not None:
            self._capture_broken = "the stream was synchronised while capturing"
            raise LogicError(f"cuStreamSynchronize failed: {self._capture_broken}")
        self._run_until(lambda: False)

    def wait_for_event(self, event: Event) -> None:
        """Later work waits for ``event``'s latest record, as ``cuStreamWaitEvent``."""
        if event.marker is not None:
            self._enqueue(_Wait(event.marker))

    @property
    def _idle(self) -> bool:
        """True when nothing is pending."""
        return not self._pending


def _run_ready() -> None:
    """The early schedule: run every stream's work until each is idle or waits on a record
    that is not reached."""
    progress = True
    while progress:
        progress = False
        for stream in list(_streams.values()):
            while stream._pending and stream._step(force=False):
                progress = True


def stream_of(handle: int) -> Stream:
    """The stream with ``handle`` (0: the default stream, whose work runs at once)."""
    if handle == 0:
        return _DEFAULT
    try:
        return _streams[handle]
    except KeyError:
        raise LogicError(f"invalid stream handle {handle}") from None


class _DefaultStream(Stream):
    """The legacy default stream: its work waits for every stream, then runs at once."""

    def _enqueue(self, operation: Callable[[], None] | _Wait) -> None:
        """Run every stream's pending work, then ``operation``; LogicError while a stream
        captures a graph (it would wait for the capturing stream: the driver's
        ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``, which also ends that capture as failed)."""
        with _device_lock:
            capturing = [s for s in list(_streams.values()) if s._captured is not None]
            for stream in capturing:
                stream._capture_broken = "a legacy-stream operation waited for it"
            if capturing:
                raise LogicError(
                    "synchronous operation failed: it would wait for a stream that is "
                    "capturing a graph (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)"
                )
            synchronize_all()
            if not isinstance(operation, _Wait):
                operation()


def synchronize_all() -> None:
    """Run every stream's pending work (what a synchronous copy waits for)."""
    with _device_lock:
        while busy := [s for s in list(_streams.values()) if not s._idle]:
            for stream in busy:
                stream.synchronize()
        _freed_storage.clear()


def _on(stream: Stream | None) -> Stream:
    return _DEFAULT if stream is None else stream


class _Marker:
    """One record of an event: reached once its stream ran up to it."""

    def __init__(self, stream: Stream) -> None:
        self.stream: Stream = stream
        self.at: float | None = None
        stream._enqueue(self._stamp)

    def _stamp(self) -> None:
        self.at = time.perf_counter()

    def _reach(self) -> None:
        """Run the recording stream up to this record."""
        self.stream._run_until(lambda: self.at is not None)


class Event:
    """Emulated event: a marker in its stream's queue, stamped with the host clock when reached."""

    def __init__(self, flags: int = 0) -> None:
        self.marker: _Marker | None = None

    def record(self, stream: Stream | None = None) -> Event:
        """Enqueue a marker on ``stream``."""
        self.marker = _Marker(_on(stream))
        return self

    def synchronize(self) -> Event:
        """Run the recording stream up to the latest record."""
        if self.marker is not None:
            self.marker._reach()
        return self

    def query(self) -> bool:
        """True when the latest record was reached (nothing here runs work)."""
        return self.marker is None or self.marker.at is not None

    def time_till(self, other: Event) -> float:
        """Milliseconds between two reached records (emulator time, not GPU time); LogicError
        if either was not reached, as ``cuEventElapsedTime``'s not-ready error."""
        ends = [e.marker.at if e.marker is not None else None for e in (self, other)]
        if None in ends:
            raise LogicError("cuEventElapsedTime failed: an event was not recorded or not reached")
        return (ends[1] - ends[0]) * 1e3


_DEFAULT = _DefaultStream()


class Error(Exception):
    """``pycuda.driver.Error``: the base of the driver's errors."""


class LogicError(Error):
    """``pycuda.driver.LogicError``: what a bad image or an unknown kernel name raises."""


class Context:
    """A device's primary context: push makes it current, pop undoes the innermost push."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    @staticmethod
    def get_device() -> Device:
        """The device of the current context; device 0 with none pushed (the launchers' tests
        call them without a context, which the real driver would refuse)."""
        return Device(_context_stack[-1] if _context_stack else 0)

    def push(self) -> None:
        """Make this context current."""
        _context_stack.append(self.ordinal)

    def pop(self) -> None:
        """Release the current context, which must be this one."""
        if not _context_stack or _context_stack[-1] != self.ordinal:
            raise LogicError(f"context of device {self.ordinal} popped but not current")
        _context_stack.pop()


class Device:
    """An emulated device (all run the kernels on the CPU emulator)."""

    def __init__(self, ordinal: int) -> None:
        if not 0 <= ordinal < _device_count:
            raise LogicError(f"cuDeviceGet failed: invalid device ordinal {ordinal}")
        self.ordinal = ordinal

    @staticmethod
    def count() -> int:
        """The number of emulated devices."""
        return _device_count

    def name(self) -> str:
        """Says what runs the kernels."""
        return "CPU kernel emulator"

    def retain_primary_context(self) -> Context:
        """This device's primary context (not yet current)."""
        return Context(self.ordinal)

    def total_memory(self) -> int:
        """Bytes of device memory: the nominal 1 GiB of ``mem_get_info``."""
        return 1 << 30

    def compute_capability(self) -> tuple[int, int]:
        """(0, 0), no CUDA architecture, unless ``install`` was given one."""
        return _compute_capability

    def get_attribute(self, attribute: str) -> int:
        """One "multiprocessor" (the emulator runs blocks one after another)."""
        if attribute != device_attribute.MULTIPROCESSOR_COUNT:
            raise NotImplementedError(attribute)
        return 1


device_attribute = types.SimpleNamespace(MULTIPROCESSOR_COUNT="MULTIPROCESSOR_COUNT")
event_flags = types.SimpleNamespace(BLOCKING_SYNC=1)


def _host_buffer(array: np.ndarray) -> tuple[int, int]:
    """Address and byte size of a contiguous host array."""
    if not array.flags.c_contiguous:
        raise ValueError("host buffer is not contiguous")
    return array.ctypes.data, array.nbytes


class EmulatedDriver(types.ModuleType):
    """``pycuda.driver`` as far as the launchers in compactinst_ros/gpu and scripts/gpu_check.py
    use it."""

    Stream, Event, Device, Context = Stream, Event, Device, Context
    Error, LogicError = Error, LogicError
    device_attribute, event_flags = device_attribute, event_flags
    __version__ = "emulated"

    def __init__(self, lib: ctypes.CDLL) -> None:
        super().__init__("pycuda.driver")
        self.__spec__ = importlib.machinery.ModuleSpec("pycuda.driver", None)
        self.lib = lib
        self.allocations: weakref.WeakSet[DeviceAllocation] = weakref.WeakSet()  # live ones
        self.launches: list[str] = []

    def init(self) -> None:
        """Nothing to initialise."""

    def get_driver_version(self) -> int:
        """No CUDA driver behind the emulator."""
        return 0

    def module_from_buffer(self, buffer: bytes) -> EmulatedModule:
        """The kernels of a cubin or a NUL-terminated PTX image; LogicError for other bytes, as
        the driver's ``cuModuleLoadDataEx`` (which reads PTX as a C string)."""
        data = bytes(buffer)
        try:
            image = read_image(data)
        except ImageError as exc:
            raise LogicError(f"cuModuleLoadDataEx: device kernel image is invalid ({exc})") from exc
        if image.kind == "ptx" and not data.endswith(b"\0"):
            raise LogicError("cuModuleLoadDataEx: PTX must end with a NUL byte")
        return EmulatedModule(self, image=image)

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes: what the live allocations leave of a nominal 1 GiB."""
        used = sum(a.nbytes for a in self.allocations)
        return max(0, (1 << 30) - used), 1 << 30

    def mem_alloc(self, nbytes: int) -> DeviceAllocation:
        """Uninitialised device memory (filled with the guard byte)."""
        return DeviceAllocation(int(nbytes), self.allocations)

    def to_device(self, array: np.ndarray) -> DeviceAllocation:
        """A new allocation holding a copy of ``array`` (a synchronous copy)."""
        array = np.ascontiguousarray(array)
        alloc = self.mem_alloc(array.nbytes)
        self.memcpy_htod(alloc, array)
        return alloc

    def pagelocked_empty(self, shape: Any, dtype: Any) -> np.ndarray:
        """Host memory (pinning has no meaning here)."""
        return np.empty(shape, dtype)

    def memcpy_htod(self, dest: Any, src: np.ndarray) -> None:
        """Host to device, ``src.nbytes`` bytes, after every stream's pending work."""
        self.memcpy_htod_async(dest, src, None)

    def memcpy_dtoh(self, dest: np.ndarray, src: Any) -> None:
        """Device to host, ``dest.nbytes`` bytes, after every stream's pending work."""
        self.memcpy_dtoh_async(dest, src, None)

    def memcpy_htod_async(self, dest: Any, src: np.ndarray, stream: Stream | None = None) -> None:
        """Host to device when the stream gets there: it reads ``src`` then, not now."""
        address, nbytes = _host_buffer(src)
        target = int(dest)
        _on(stream)._enqueue(lambda: ctypes.memmove(target, address, nbytes))

    def memcpy_dtoh_async(self, dest: np.ndarray, src: Any, stream: Stream | None = None) -> None:
        """Device to host when the stream gets there."""
        address, nbytes = _host_buffer(dest)
        source = int(src)
        _on(stream)._enqueue(lambda: ctypes.memmove(address, source, nbytes))

    def memcpy_dtod_async(
        self, dest: Any, src: Any, nbytes: int, stream: Stream | None = None
    ) -> None:
        """Device to device, ``nbytes`` bytes, when the stream gets there."""
        target, source = int(dest), int(src)
        _on(stream)._enqueue(lambda: ctypes.memmove(target, source, nbytes))

    def launch(
        self,
        name: str,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        buf: bytes,
        stream: Stream | None = None,
    ) -> None:
        """Enqueue kernel ``name`` on ``stream``; when it runs on the emulator, every
        allocation's guard band is checked after it."""
        self.launches.append(name)
        _on(stream)._enqueue(lambda: self._run_kernel(name, grid, block, buf))

    def _run_kernel(
        self, name: str, grid: tuple[int, ...], block: tuple[int, ...], buf: bytes
    ) -> None:
        gx, gy = (*grid, 1)[:2]
        status = self.lib.emu_launch_packed(name.encode(), gx, gy, *block, buf, len(buf))
        if status != 0:
            raise RuntimeError(f"emulated launch of {name} failed with status {status}")
        broken = [a for a in self.allocations if not a.guard_intact()]
        for alloc in broken:
            alloc.storage[alloc.nbytes :] = GUARD_BYTE  # report each overflow once
        if broken:
            sizes = [a.nbytes for a in broken]
            raise RuntimeError(f"{name} wrote past the end of allocations of {sizes} bytes")


class PreparedFunction:
    """A kernel after ``prepare``: packs arguments like pycuda and launches on the emulator."""

    def __init__(self, driver: EmulatedDriver, name: str, arg_format: str, params: tuple) -> None:
        self.driver, self.name, self.arg_format, self.params = driver, name, arg_format, params

    def prepared_async_call(
        self, grid: tuple[int, ...], block: tuple[int, ...], stream: Stream, *args: Any
    ) -> None:
        """struct.pack the arguments (a count or type mismatch raises, as in pycuda), check the
        packing against the image's parameter offsets and sizes, and run."""
        buf = struct.pack(self.arg_format, *args)
        if param_layout(self.arg_format) != self.params:
            raise RuntimeError(
                f"{self.name}: prepare('{self.arg_format}') packs {param_layout(self.arg_format)}"
                f", the image's parameters are {self.params}"
            )
        self.driver.launch(self.name, grid, block, buf, stream)


class KernelFunction:
    """``module.get_function(name)``."""

    def __init__(self, driver: EmulatedDriver, name: str, params: tuple) -> None:
        self.driver, self.name, self.params = driver, name, params

    def prepare(self, arg_format: str) -> PreparedFunction:
        """The prepared kernel."""
        return PreparedFunction(self.driver, self.name, arg_format, self.params)


class EmulatedModule:
    """A module ``module_from_buffer`` loaded: the kernels of that ``image``, with their
    parameter layouts."""

    def __init__(self, driver: EmulatedDriver, image: ImageInfo) -> None:
        self.driver, self.image = driver, image

    def get_function(self, name: str) -> KernelFunction:
        """The kernel ``name``: LogicError if the image lacks it, as the driver's
        ``cuModuleGetFunction``."""
        if name not in self.image.params:
            raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({name})")
        return KernelFunction(self.driver, name, self.image.params[name])


_GRAPH_CALL = ctypes.CFUNCTYPE
_VOID_P, _HANDLE_OUT = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
#: CUresult codes the emulated graph calls return.
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE = 0, 1
CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 900, 901


class EmulatedDriverLibrary:
    """The CUDA driver library's graph entry points (what ``compactinst_ros.gpu.graphs`` binds
    with ctypes), as C function pointers over the emulated streams, so the arguments cross the
    same ctypes boundary as with ``libcuda.so.1``. A capture diverts a stream's operations into a
    list; an instantiated graph is a copy of it; a launch enqueues its operations again, the
    arguments fixed at capture as in a graph's kernel nodes."""

    def __init__(self) -> None:
        self._graphs: dict[int, list] = {}
        #: executable graphs not yet destroyed, by handle (tests look for leaks)
        self.executables: dict[int, list] = {}
        self._ids = itertools.count(0x1000)
        self.graph_launches = 0
        #: captures the driver still begins (None: all); then CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        self.captures_allowed: int | None = None
        prototypes = {
            "cuStreamBeginCapture_v2": (self._begin, (_VOID_P, ctypes.c_int)),
            "cuStreamEndCapture": (self._end, (_VOID_P, _HANDLE_OUT)),
            "cuGraphInstantiateWithFlags": (
                self._instantiate, (_HANDLE_OUT, _VOID_P, ctypes.c_ulonglong)
            ),
            "cuGraphLaunch": (self._launch, (_VOID_P, _VOID_P)),
            "cuGraphExecDestroy": (self._destroy_executable, (_VOID_P,)),
            "cuGraphDestroy": (self._destroy_graph, (_VOID_P,)),
            "cuGetErrorString": (
                self._error_string, (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
            ),
        }  # fmt: skip
        self._keep = []  # the C pointers of the functions and strings handed out
        for name, (function, argtypes) in prototypes.items():
            pointer = _GRAPH_CALL(ctypes.c_int, *argtypes)(function)
            self._keep.append(pointer)
            setattr(self, name, pointer)

    def _begin(self, handle: int | None, mode: int) -> int:
        stream = stream_of(handle or 0)
        if stream is _DEFAULT or stream._captured is not None or mode not in (0, 1, 2):
            return CUDA_ERROR_INVALID_VALUE
        if self.captures_allowed is not None:
            if self.captures_allowed == 0:
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            self.captures_allowed -= 1
        stream._captured, stream._capture_broken = [], None
        return CUDA_SUCCESS

    def _end(self, handle: int | None, graph_out: Any) -> int:
        stream = stream_of(handle or 0)
        operations, stream._captured = stream._captured, None
        if operations is None:
            return CUDA_ERROR_INVALID_VALUE
        if stream._capture_broken is not None:
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        graph = next(self._ids)
        self._graphs[graph] = operations
        graph_out[0] = graph
        return CUDA_SUCCESS

    def _instantiate(self, executable_out: Any, graph: int | None, flags: int) -> int:
        if graph not in self._graphs or flags != 0:
            return CUDA_ERROR_INVALID_VALUE
        executable = next(self._ids)
        self.executables[executable] = list(self._graphs[graph])
        executable_out[0] = executable
        return CUDA_SUCCESS

    def _launch(self, executable: int | None, handle: int | None) -> int:
        if executable not in self.executables:
            return CUDA_ERROR_INVALID_VALUE
        stream = stream_of(handle or 0)
        self.graph_launches += 1
        for operation in self.executables[executable]:
            stream._enqueue(operation)
        return CUDA_SUCCESS

    def _destroy_executable(self, executable: int | None) -> int:
        return CUDA_SUCCESS if self.executables.pop(executable, None) is not None else 1

    def _destroy_graph(self, graph: int | None) -> int:
        return CUDA_SUCCESS if self._graphs.pop(graph, None) is not None else 1

    def _error_string(self, status: int, text_out: Any) -> int:
        text = ctypes.c_char_p(f"emulated CUresult {status}".encode())
        self._keep.append(text)
        text_out[0] = text.value
        return CUDA_SUCCESS


def install(
    monkeypatch: Any,
    lib: ctypes.CDLL,
    target: str = "sm_87",
    devices: int = 1,
    compute_capability: tuple[int, int] = (0, 0),
    schedule: str = "late",
    graphs: bool = True,
) -> EmulatedDriver:
    """Make ``pycuda.driver`` use the emulator for one test, with ``devices`` emulated devices
    reporting ``compute_capability``, streams run in ``schedule`` (``SCHEDULES``) and the loader
    told to hand over the shipped image for ``target``. There is no ``pycuda.compiler``: nothing
    here may need nvcc, which a stock Jetson lacks on PATH. ``graphs``: the driver library
    offers the graph API (``driver.library``, an ``EmulatedDriverLibrary``); without it, loading
    the library fails as on a machine without a CUDA driver."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SCHEDULES}")
    monkeypatch.setattr(sys.modules[__name__], "_schedule", schedule)
    monkeypatch.setattr(sys.modules[__name__], "_context_stack", [])
    monkeypatch.setattr(sys.modules[__name__], "_device_count", devices)
    monkeypatch.setattr(sys.modules[__name__], "_compute_capability", compute_capability)
    driver = EmulatedDriver(lib)
    package = types.ModuleType("pycuda")
    package.__spec__ = importlib.machinery.ModuleSpec("pycuda", None, is_package=True)
    package.__version__ = "emulated"  # type: ignore[attr-defined]
    package.driver = driver  # type: ignore[attr-defined]
    for name, module in (("pycuda", package), ("pycuda.driver", driver)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv(loader.TARGET_ENV, target)
    from compactinst_ros.gpu import graphs as graph_api

    driver.library = EmulatedDriverLibrary() if graphs else None

    def load_driver() -> EmulatedDriverLibrary:
        if driver.library is None:
            raise graph_api.GraphError("no CUDA driver library to capture graphs with (emulated)")
        return driver.library

    monkeypatch.setattr(graph_api, "load_driver", load_driver)
    return driver
