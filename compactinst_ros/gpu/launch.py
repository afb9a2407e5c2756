"""What every launcher needs: its kernels loaded (gpu/loader.py: shipped image or nvcc) and
prepared with their parameter lists, and the launch shape of a one-thread-per-pixel kernel."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from .constants import ENCODING_CODES, SIGNATURES
from .loader import load_module


def load_kernels(source: str, *names: str) -> list[Any]:
    """Kernels ``names`` of ``kernels/<source>.cu``, prepared with their SIGNATURES."""
    module = load_module(source)
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
