"""The Backend protocol and the name -> implementation table (imports are lazy).

A backend owns everything that runs per frame after input validation: pre-processing, the
encoder and decoder stages, and post-processing, so that the GPU backend can keep the whole
frame on the device. It reports its own stage times (CUDA events on the GPU).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import BackendError, ConfigError

if TYPE_CHECKING:
    import numpy as np

    from ..bundle import ModelBundle
    from ..spatial.lift import Instances3D, Intrinsics, LiftOptions
    from ..structures import BatchItem, FrameResult, PostprocessOptions

#: what the tensorrt backend imports (``backend: auto`` chooses it only where all of these import)
GPU_RUNTIME_MODULES = ("tensorrt", "pycuda.driver")
#: backend name -> "module:Class"; modules are imported only when chosen.
BACKENDS: dict[str, str] = {
    "onnxruntime": "compactinst_ros.backends.ort:OrtBackend",
    "tensorrt": "compactinst_ros.backends.trt:TensorRTBackend",
    "tensorrt_rtx": "compactinst_ros.backends.rtx:TensorRTRtxBackend",
    "openvino": "compactinst_ros.backends.openvino:OpenVinoBackend",
}
#: the backends that run the frame on an NVIDIA GPU (the others run it on the CPU)
GPU_BACKENDS = ("tensorrt", "tensorrt_rtx")
#: ``backend: auto``'s order: the first whose every requirement imports (a requirement is a
#: tuple of alternative module names). TensorRT first (a Jetson has only it; on a PC it is the
#: full library), then TensorRT for RTX (an RTX PC's lean runtime), then the CPU.
AUTO_ORDER: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("tensorrt", tuple((m,) for m in GPU_RUNTIME_MODULES)),
    ("tensorrt_rtx", (("tensorrt_rtx", "tensorrt_rtx_bindings"), ("pycuda.driver",))),
    ("onnxruntime", ()),
)


#: What every engine key records about the network: strongly typed, TF32 off.
NETWORK_KEY = {"network": "strongly_typed", "tf32": 0}


@dataclass(frozen=True)
class BuildOptions:
    """TensorRT builder settings that change the engine (all part of the cache key; trt_build.py
    builds with them)."""

    opt_level: int = 3
    workspace_mib: int = 1024

    def key_options(self) -> dict[str, int | str]:
        """The options as stored in the engine key."""
        return {"opt_level": self.opt_level, "workspace_mib": self.workspace_mib, **NETWORK_KEY}


@dataclass(frozen=True)
class BackendOptions:
    """How to run a backend, fixed for its lifetime; each backend reads the fields it uses."""

    #: onnxruntime, openvino: intra-op threads; None = the runtime's default (all cores)
    threads: int | None = None
    #: onnxruntime: execution providers; None = CPU
    providers: tuple[str, ...] | None = None
    #: tensorrt: CUDA device index
    device: int = 0
    #: tensorrt: engine cache folder; None = the default cache
    engine_cache_dir: str | Path | None = None
    #: tensorrt: build a missing or stale engine at construction instead of failing
    allow_build: bool = True
    #: tensorrt: optimisation level and workspace of engines built here; None = the defaults
    build_options: BuildOptions | None = None
    #: stage graph precision (bundle.PRECISIONS); None = the backend's default
    #: (onnxruntime: fp32; tensorrt: fp16 where the bundle carries its graphs, else fp32)
    precision: str | None = None
    #: onnxruntime, openvino, precision int8: which INT8 graph (bundle.INT8_GRAPHS); None = the
    #: backend's ("cpu" on onnxruntime, "tensorrt" on openvino)
    int8_graph: str | None = None
    #: the batch sizes the stages run at; a batch of n frames runs at the smallest size >= n,
    #: its spare slots padded and discarded. None = the backend's default (onnxruntime: any
    #: size, no padding; tensorrt: one static engine per size 1..max_batch)
    batch_sizes: tuple[int, ...] | None = None
    #: tensorrt: the largest batch its engines are built for when ``batch_sizes`` is None
    max_batch: int = 1
    #: how an error's remedy writes a setting: "cli" (``--precision fp32``) or "node"
    #: (``precision:=fp32``), as whoever opened the backend takes its settings
    settings: str = "cli"

    def __post_init__(self) -> None:
        if self.batch_sizes is not None and (
            not self.batch_sizes or any(int(b) < 1 for b in self.batch_sizes)
        ):
            raise ConfigError(f"batch_sizes {self.batch_sizes} must be positive sizes (or None)")
        if self.max_batch < 1:
            raise ConfigError(f"max_batch={self.max_batch} must be >= 1")
        if self.precision is not None:
            from ..bundle import PRECISIONS

            if self.precision not in PRECISIONS:
                raise ConfigError(
                    f"unknown precision '{self.precision}'; choose one of {', '.join(PRECISIONS)}"
                )
        if self.settings not in ("cli", "node"):
            raise ConfigError(f"settings='{self.settings}': choose 'cli' or 'node'")

    def setting(self, name: str, value: str) -> str:
        """Setting ``name`` to ``value`` as ``settings`` writes it, for an error's remedy:
        ``--name value`` on the command line, ``name:=value`` for the node."""
        if self.settings == "node":
            return f"{name}:={value}"
        return f"--{name.replace('_', '-')} {value}"

    @classmethod
    def of(cls, options: BackendOptions | None = None, **overrides: Any) -> BackendOptions:
        """``options`` (default: all defaults) with ``overrides`` replaced by field name.

        ConfigError names an unknown field and lists the known ones.
        """
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ConfigError(f"unknown backend options {unknown}; known: {known}")
        return replace(options or cls(), **overrides)


class Backend(Protocol):
    """What the Pipeline needs from a backend."""

    name: str

    def infer_batch(
        self, items: Sequence[BatchItem], options: PostprocessOptions
    ) -> list[FrameResult]:
        """Run validated frames as one batch (one result each, in order); every result's
        timings_ms has the batch's preprocess/encoder/decoder/postprocess times.

        ``item.outputs.overlay`` comes with ``instance`` (the Pipeline sets both); a backend
        that renders on its device keeps those frames there for ``render_overlay``.
        """
        ...

    def batch_slots(self, frames: int) -> int:
        """How many slots a batch of ``frames`` runs in (>= frames; the rest is padding);
        BackendError where no batch that large can run (the message names the fix)."""
        ...

    def render_overlay(
        self, colours: np.ndarray, alpha: float, index: int = 0
    ) -> np.ndarray | None:
        """Frame ``index`` of the last batch: its instance blend and outlines (HxWx3 bgr8)
        rendered on the device, or None where the backend has no device (the Pipeline blends on
        the CPU).

        ``colours``: (rows, 3) uint8 RGB colour of each per-frame instance id of that frame
        (track-id colours, ``palette.id_colours``); only after ``infer_batch`` with ``overlay``.
        """
        ...

    def describe(self) -> dict:
        """Backend, device and runtime versions (and GPU memory where known) for diagnostics."""
        ...

    def close(self) -> None:
        """Release sessions, engines, buffers and contexts."""
        ...


@runtime_checkable
class StagedBackend(Backend, Protocol):
    """A backend whose batch splits in two halves that may run on two threads at once: while
    one batch is in ``decode_batch``, the next one's ``encode_batch`` runs (on the CPU, where
    one thread's serial work would otherwise leave a core idle)."""

    def encode_batch(self, items: Sequence[BatchItem]) -> Any:
        """The first half of ``infer_batch`` (preprocess and encoder); its result goes to
        ``decode_batch`` once, on any thread."""
        ...

    def decode_batch(self, encoded: Any, options: PostprocessOptions) -> list[FrameResult]:
        """The second half of ``infer_batch`` (decoder and postprocess) of ``encode_batch``'s
        result."""
        ...


@runtime_checkable
class DeviceLiftBackend(Protocol):
    """A backend that can lift a frame's instances to 3-D where its instance raster already is,
    on its device (``spatial.lift_depth``'s and ``spatial.lift_cloud``'s computations; the
    Pipeline lifts on the host for any other backend, and whenever this one answers None)."""

    def lift_depth(
        self,
        result: FrameResult,
        depth_m: np.ndarray,
        colour: Intrinsics,
        depth: Intrinsics | None,
        options: LiftOptions | None,
    ) -> Instances3D | None:
        """``spatial.lift_depth`` of ``result`` (a frame of the last batch, its instance raster
        still on the device) with the depth image ``depth_m``, rows and ids those of
        ``result.instances``; None where that raster is no longer there (an older batch's
        frame, one inferred without ``OutputSet.instance``) or the frame has more instances than
        the device tables hold. The caller has checked the sizes: the raster's is the colour
        camera's, ``depth_m``'s is ``depth``'s (None: the colour camera's)."""
        ...

    def lift_cloud(
        self,
        result: FrameResult,
        xyz_camera: np.ndarray,
        colour: Intrinsics,
        options: LiftOptions | None,
    ) -> tuple[Instances3D, np.ndarray] | None:
        """``spatial.lift_cloud`` of ``result`` with the (P, 3) float32 points ``xyz_camera``
        (the camera's optical frame): the table, rows and ids those of ``result.instances``, and
        each point's instance id; None as for :meth:`lift_depth`. The caller has checked that
        the raster's size is the camera's."""
        ...


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: a container's or taskset's limit), what
    a CPU backend's threads are sized from."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: files that show an NVIDIA GPU: the L4T release file of a Jetson, the desktop driver's version
NVIDIA_GPU_MARKERS = ("etc/nv_tegra_release", "proc/driver/nvidia/version")


def gpu_fallback_reason(
    root: str | Path = "/", modules: tuple[str, ...] = GPU_RUNTIME_MODULES
) -> str | None:
    """Why ``backend: auto`` would run on the CPU on this NVIDIA machine, or None.

    None where no marker of an NVIDIA GPU exists under ``root`` (the CPU is expected there) or
    where every GPU runtime module imports. A node should log the reason as a WARN.
    """
    markers = [m for m in NVIDIA_GPU_MARKERS if (Path(root) / m).exists()]
    if not markers:
        return None
    failed: list[str] = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            failed.append(f"{module} ({exc})")
    if not failed:
        return None
    return (
        f"this machine has an NVIDIA GPU (/{markers[0]}) but {'; '.join(failed)} failed to "
        "import, so backend auto runs on the CPU (onnxruntime); install TensorRT's Python "
        "bindings (JetPack: sudo apt install python3-libnvinfer; on an x86 PC with an RTX GPU "
        "TensorRT for RTX will do: pip install tensorrt-rtx-cu13) and pycuda (pip3 install "
        "pycuda), or set backend:=onnxruntime to choose the CPU on purpose"
    )


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def resolve_backend_name(name: str, imports: Callable[[str], bool] = _imports) -> str:
    """Map ``auto`` to the first backend of AUTO_ORDER whose modules import (``imports`` says
    whether one does), else check that ``name`` is a backend."""
    if name == "auto":
        for backend, requirements in AUTO_ORDER:
            if all(any(imports(m) for m in choice) for choice in requirements):
                return backend
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend '{name}'; choose auto, {', '.join(BACKENDS)}")
    return name


def create_backend(
    name: str, bundle: ModelBundle, options: BackendOptions | None = None, **overrides: Any
) -> Backend:
    """Instantiate backend ``name`` (or ``auto``) for ``bundle`` with ``BackendOptions.of(...)``."""
    resolved = resolve_backend_name(name)
    module_name, cls_name = BACKENDS[resolved].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(
            f"backend '{resolved}' is not available ({exc}); install its runtime or choose "
            "another backend"
        ) from exc
    return getattr(module, cls_name)(bundle, BackendOptions.of(options, **overrides))
