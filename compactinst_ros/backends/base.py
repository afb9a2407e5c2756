"""The Backend protocol and the name -> implementation table (imports are lazy).

A backend owns everything that runs per frame after input validation: pre-processing, the
encoder and decoder stages, and post-processing, so that the GPU backend can keep the whole
frame on the device. It reports its own stage times (CUDA events on the GPU).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BackendError, ConfigError

if TYPE_CHECKING:
    import numpy as np

    from ..bundle import ModelBundle
    from ..structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions
    from .trt_build import BuildOptions

#: backend name -> "module:Class"; modules are imported only when chosen.
BACKENDS: dict[str, str] = {
    "onnxruntime": "compactinst_ros.backends.ort:OrtBackend",
    "tensorrt": "compactinst_ros.backends.trt:TensorRTBackend",
}


@dataclass(frozen=True)
class BackendOptions:
    """How to run a backend, fixed for its lifetime; each backend reads the fields it uses."""

    #: onnxruntime: intra-op threads; None = the runtime's default (all cores)
    threads: int | None = None
    #: onnxruntime: execution providers; None = CPU
    providers: tuple[str, ...] | None = None
    #: tensorrt: CUDA device index
    device: int = 0
    #: tensorrt: engine cache folder; None = the default cache
    engine_cache_dir: str | Path | None = None
    #: tensorrt: build a missing or stale engine at construction instead of failing
    allow_build: bool = True
    #: tensorrt: precision and workspace of engines built here; None = the defaults
    build_options: BuildOptions | None = None

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

    def infer(
        self,
        image: np.ndarray,
        encoding: str,
        meta: FrameMeta,
        options: PostprocessOptions,
        outputs: OutputSet,
    ) -> FrameResult:
        """Run one validated frame; fills timings_ms for preprocess/encoder/decoder/postprocess.

        ``outputs.overlay`` comes with ``outputs.instance`` (the Pipeline sets both); a backend
        that renders on its device keeps the frame there for ``render_overlay``.
        """
        ...

    def render_overlay(self, colours: np.ndarray, alpha: float) -> np.ndarray | None:
        """The last frame's instance blend and outlines (HxWx3 bgr8) rendered on the device, or
        None where the backend has no device (the Pipeline blends on the CPU).

        ``colours``: (rows, 3) uint8 RGB colour of each per-frame instance id of that frame
        (track-id colours, ``palette.id_colours``); only after ``infer`` with ``overlay``.
        """
        ...

    def describe(self) -> dict:
        """Backend, device and runtime versions (and GPU memory where known) for diagnostics."""
        ...

    def close(self) -> None:
        """Release sessions, engines, buffers and contexts."""
        ...


def resolve_backend_name(name: str) -> str:
    """Map ``auto`` to tensorrt where TensorRT and pycuda import, else onnxruntime."""
    if name == "auto":
        try:
            importlib.import_module("tensorrt")
            importlib.import_module("pycuda.driver")
        except ImportError:
            return "onnxruntime"
        return "tensorrt"
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
