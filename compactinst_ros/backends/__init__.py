"""Inference backends behind one interface: ONNX Runtime (CPU) and TensorRT + pycuda (GPU)."""

from .base import BACKENDS, Backend, BackendOptions, create_backend, resolve_backend_name

__all__ = ["BACKENDS", "Backend", "BackendOptions", "create_backend", "resolve_backend_name"]
