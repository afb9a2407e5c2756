"""What every launcher needs: the kernel sources compiled with pycuda (nvcc on PATH at run time),
prepared with their parameter lists, and the launch shape of a one-thread-per-pixel kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .constants import ENCODING_CODES, SIGNATURES

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
NVCC_OPTIONS = ["-std=c++17", "-O3"]


def compile_module(name: str, cache_dir: str | None = None) -> Any:
    """pycuda SourceModule of ``kernels/<name>.cu`` for the current device."""
    from pycuda.compiler import SourceModule

    source = (KERNEL_DIR / f"{name}.cu").read_text()
    return SourceModule(
        source,
        options=NVCC_OPTIONS,
        no_extern_c=True,
        include_dirs=[str(KERNEL_DIR)],
        cache_dir=cache_dir,
    )


def load_kernels(source: str, *names: str) -> list[Any]:
    """Kernels ``names`` of ``kernels/<source>.cu``, prepared with their SIGNATURES."""
    module = compile_module(source)
    return [module.get_function(name).prepare(SIGNATURES[name]) for name in names]


def pixel_grid(width: int, height: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """(grid, block) of a one-thread-per-pixel launch over ``width`` x ``height``, 32x8 blocks."""
    return (-(-width // 32), -(-height // 8)), (32, 8, 1)


def frame_args(shape: tuple[int, ...], encoding: str) -> tuple[int, int, int, int]:
    """(height, width, bytes per row, ``ci::Encoding`` code) of a raw HxWxC camera frame."""
    code = ENCODING_CODES.get(encoding.lower())
    if code is None:
        raise InputError(
            f"unsupported image encoding '{encoding}' for the GPU kernels; "
            f"publish one of {sorted(ENCODING_CODES)}"
        )
    return shape[0], shape[1], int(np.prod(shape[1:])), code
