"""Inference backends behind one interface: ONNX Runtime (CPU) and TensorRT + pycuda (GPU)."""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import BACKENDS, Backend, BackendOptions, create_backend, resolve_backend_name

#: files that show an NVIDIA GPU: the L4T release file of a Jetson, the desktop driver's version
NVIDIA_GPU_MARKERS = ("etc/nv_tegra_release", "proc/driver/nvidia/version")
#: what the tensorrt backend imports (``backend: auto`` chooses it only where all of these import)
GPU_RUNTIME_MODULES = ("tensorrt", "pycuda.driver")


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
        "bindings (JetPack: sudo apt install python3-libnvinfer) and pycuda (pip3 install "
        "pycuda), or set backend:=onnxruntime to choose the CPU on purpose"
    )


__all__ = [
    "BACKENDS",
    "GPU_RUNTIME_MODULES",
    "NVIDIA_GPU_MARKERS",
    "Backend",
    "BackendOptions",
    "create_backend",
    "gpu_fallback_reason",
    "resolve_backend_name",
]
