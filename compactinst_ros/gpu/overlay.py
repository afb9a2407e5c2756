"""Overlay launcher: palette blend and outlines of an id raster over a device-resident raw
frame (kernels/overlay.cu; numpy twin: ``twin.overlay``), on the caller's stream."""

from __future__ import annotations

from typing import Any

import numpy as np

from .launch import frame_args, load_kernels, pixel_grid


class GpuOverlay:
    """Overlay kernels on device-resident frames: instance ids or panoptic segment ids."""

    def __init__(self) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        self.k_instance, self.k_panoptic = load_kernels("overlay", "ov_instance", "ov_panoptic")
        self._tables: list[Any] = []

    def enqueue(
        self,
        stream: Any,
        *,
        ids_ptr: int,
        lut: np.ndarray,
        sorted_ids: np.ndarray | None = None,
        src_ptr: int,
        shape: tuple[int, ...],
        encoding: str,
        alpha: float,
        out_ptr: int,
    ) -> None:
        """Blend the id raster at ``ids_ptr`` (uint16 instance ids, or int32 panoptic ids with
        ``sorted_ids``) over the raw frame at ``src_ptr`` into HxWx3 RGB at ``out_ptr``; the
        host tables are uploaded first (synchronous copies). Keyword arguments: four of them are
        device pointers, easy to swap."""
        lut_dev = self.cuda.to_device(np.ascontiguousarray(lut, np.uint8))
        self._tables = [lut_dev]  # kept alive until the next call (the copy is synchronous)
        if sorted_ids is None:
            self.enqueue_instance(
                stream, src_ptr, shape, encoding, ids_ptr, int(lut_dev), len(lut), alpha, out_ptr
            )
            return
        ids_dev = self.cuda.to_device(np.ascontiguousarray(sorted_ids, np.int32))
        self._tables.append(ids_dev)
        h, w, row, code = frame_args(shape, encoding)
        self.k_panoptic.prepared_async_call(
            *pixel_grid(w, h), stream, src_ptr, h, w, row, code,
            ids_ptr, int(ids_dev), len(sorted_ids), int(lut_dev),
            np.float32(1.0 - alpha), np.float32(alpha), out_ptr,
        )  # fmt: skip

    def enqueue_instance(
        self,
        stream: Any,
        src_ptr: int,
        shape: tuple[int, ...],
        encoding: str,
        ids_ptr: int,
        lut_ptr: int,
        n_lut: int,
        alpha: float,
        out_ptr: int,
    ) -> None:
        """``ov_instance`` with an ``n_lut``-row RGB LUT already on the device: no upload, so
        nothing synchronises mid-frame (the TensorRT backend keeps one palette table)."""
        h, w, row, code = frame_args(shape, encoding)
        self.k_instance.prepared_async_call(
            *pixel_grid(w, h), stream, src_ptr, h, w, row, code,
            ids_ptr, n_lut, lut_ptr, np.float32(1.0 - alpha), np.float32(alpha), out_ptr,
        )  # fmt: skip
