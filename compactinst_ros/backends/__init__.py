"""Inference backends behind one interface: ONNX Runtime (CPU) and TensorRT + pycuda (GPU)."""

from .base import (
    BACKENDS,
    GPU_RUNTIME_MODULES,
    NVIDIA_GPU_MARKERS,
    Backend,
    BackendOptions,
    StagedBackend,
    create_backend,
    gpu_fallback_reason,
    resolve_backend_name,
    usable_cores,
)

__all__ = [
    "BACKENDS",
    "GPU_RUNTIME_MODULES",
    "NVIDIA_GPU_MARKERS",
    "Backend",
    "BackendOptions",
    "StagedBackend",
    "create_backend",
    "gpu_fallback_reason",
    "resolve_backend_name",
    "usable_cores",
]
