"""Pre-processing launcher: raw camera frame (pinned upload) -> encoder input, one kernel.

Enqueued on the caller's stream, nothing synchronises; the caller's thread must have the CUDA
context current. A batch uploads each frame into a slot of its own (pinned staging and device
copy), so that no upload waits for another's and every raw frame stays on the device until the
slot is next used (the overlay reads it). Kernel: kernels/preprocess.cu; numpy twin:
``twin.letterbox``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..structures import FrameMeta
from .launch import frame_args, load_kernels, pixel_grid

#: letterbox kernel by the encoder input's type: FP16 engines take the image in half
KERNELS = {np.dtype(np.float32): "pre_letterbox", np.dtype(np.float16): "pre_letterbox_half"}


class GpuPreprocessor:
    """Raw camera frame (pinned upload) -> encoder input buffer, one kernel."""

    def __init__(
        self, pad_value: tuple[float, float, float], dtype: np.dtype | type = np.float32
    ) -> None:
        """``dtype``: the encoder input's type, float32 or float16 (``KERNELS``); the half
        kernel rounds what the float one writes to nearest even, as a Cast to FP16 does."""
        import pycuda.driver as cuda

        self.cuda = cuda
        self.pad = tuple(np.float32(v) for v in pad_value)
        if np.dtype(dtype) not in KERNELS:
            raise ValueError(f"no letterbox kernel writes {np.dtype(dtype)}: {list(KERNELS)}")
        (self.kernel,) = load_kernels("preprocess", KERNELS[np.dtype(dtype)])
        #: per slot: (capacity in bytes, pinned staging, device copy of the raw frame)
        self.slots: list[tuple[int, np.ndarray, Any]] = []

    def device(self, slot: int = 0) -> int:
        """Address of slot ``slot``'s raw frame on the device (its last upload)."""
        return int(self.slots[slot][2])

    def stage(self, image: np.ndarray, encoding: str, slot: int = 0) -> None:
        """Copy ``image`` into slot ``slot``'s pinned memory: host work, which a caller timing
        the device with events does before it records the first one."""
        h, _, row, _ = frame_args(image.shape, encoding)
        nbytes = h * row
        while len(self.slots) <= slot:
            self.slots.append((0, np.empty(0, np.uint8), None))
        if nbytes > self.slots[slot][0]:
            pinned = self.cuda.pagelocked_empty(nbytes, np.uint8)
            self.slots[slot] = (nbytes, pinned, self.cuda.mem_alloc(nbytes))
        np.copyto(self.slots[slot][1][:nbytes].reshape(image.shape), image)

    def enqueue(
        self,
        stream: Any,
        image: np.ndarray,
        encoding: str,
        meta: FrameMeta,
        dst_ptr: int,
        slot: int = 0,
        staged: bool = False,
    ) -> None:
        """Upload ``image`` from slot ``slot``'s pinned memory once (``stage`` it first unless
        ``staged``) and run the letterbox kernel into ``dst_ptr``."""
        if not staged:
            self.stage(image, encoding, slot)
        h, w, row, code = frame_args(image.shape, encoding)
        _, host, device = self.slots[slot]
        self.cuda.memcpy_htod_async(device, host[: h * row], stream)
        self.kernel.prepared_async_call(
            *pixel_grid(meta.input_w, meta.input_h), stream,
            int(device), h, w, row, code, meta.resized_h, meta.resized_w,
            np.float32(h / meta.resized_h), np.float32(w / meta.resized_w),
            *self.pad, meta.input_h, meta.input_w, dst_ptr,
        )  # fmt: skip
