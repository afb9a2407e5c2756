"""Inference backends behind one interface: ONNX Runtime and OpenVINO (CPU), TensorRT or TensorRT
for RTX + pycuda (GPU)."""

from .base import (
    AUTO_ORDER,
    BACKENDS,
    GPU_BACKENDS,
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
    "AUTO_ORDER",
    "BACKENDS",
    "GPU_BACKENDS",
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
