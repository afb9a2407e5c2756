"""The Backend protocol and the name -> implementation table (imports are lazy).

A backend owns everything that runs per frame after input validation: pre-processing, the
encoder and decoder stages, and post-processing, so that the GPU backend can keep the whole
frame on the device. It reports its own stage times (CUDA events on the GPU).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from ..errors import BackendError, ConfigError

if TYPE_CHECKING:
    import numpy as np

    from ..bundle import ModelBundle
    from ..structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions

#: backend name -> "module:Class"; modules are imported only when chosen.
BACKENDS: dict[str, str] = {
    "onnxruntime": "compactinst_ros.backends.ort:OrtBackend",
    "tensorrt": "compactinst_ros.backends.trt:TensorRTBackend",
}


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
        """Run one validated frame; fills timings_ms for preprocess/encoder/decoder/postprocess."""
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


def create_backend(name: str, bundle: ModelBundle, **kwargs: object) -> Backend:
    """Instantiate backend ``name`` (or ``auto``) for ``bundle``."""
    resolved = resolve_backend_name(name)
    module_name, cls_name = BACKENDS[resolved].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(
            f"backend '{resolved}' is not available ({exc}); install its runtime or choose "
            "another backend"
        ) from exc
    return getattr(module, cls_name)(bundle, **kwargs)
