"""Pre-processing launcher: raw camera frame (pinned upload) -> encoder input, one kernel.

Enqueued on the caller's stream, nothing synchronises; the caller's thread must have the CUDA
context current. Kernel: kernels/preprocess.cu; numpy twin: ``twin.letterbox``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..structures import FrameMeta
from .launch import frame_args, load_kernels, pixel_grid


class GpuPreprocessor:
    """Raw camera frame (pinned upload) -> encoder input buffer, one kernel."""

    def __init__(self, pad_value: tuple[float, float, float]) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        self.pad = tuple(np.float32(v) for v in pad_value)
        (self.kernel,) = load_kernels("preprocess", "pre_letterbox")
        self.capacity = 0
        self.host: np.ndarray | None = None
        self.device: Any = None

    def enqueue(
        self, stream: Any, image: np.ndarray, encoding: str, meta: FrameMeta, dst_ptr: int
    ) -> None:
        """Copy ``image`` into pinned memory, upload it once and run the letterbox kernel."""
        h, w, row, code = frame_args(image.shape, encoding)
        nbytes = h * row
        if nbytes > self.capacity:
            self.host = self.cuda.pagelocked_empty(nbytes, np.uint8)
            self.device = self.cuda.mem_alloc(nbytes)
            self.capacity = nbytes
        staging = self.host[:nbytes].reshape(image.shape)
        np.copyto(staging, image)
        self.cuda.memcpy_htod_async(self.device, self.host[:nbytes], stream)
        self.kernel.prepared_async_call(
            *pixel_grid(meta.input_w, meta.input_h), stream,
            int(self.device), h, w, row, code, meta.resized_h, meta.resized_w,
            np.float32(h / meta.resized_h), np.float32(w / meta.resized_w),
            *self.pad, meta.input_h, meta.input_w, dst_ptr,
        )  # fmt: skip
