"""pycuda host side of the GPU kernels: fused post-processing and one-kernel pre-processing.

Everything is enqueued on the caller's stream; nothing here synchronises. Buffers are allocated
once per frame geometry. The caller must run in a thread where the CUDA context is current (the
TensorRT backend's GPU thread, or scripts/gpu_check.py). Kernels: compactinst_ros/cuda/*.cu; the
algorithm is documented and twinned in numpy in postprocess/gpu_twin.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendError
from ..labels import LabelSet
from ..structures import (
    FrameMeta,
    FrameResult,
    Instances,
    OutputSet,
    PostprocessOptions,
    Segments,
)
from .gpu_twin import ENCODING_CODES, TILE
from .resample import bilinear_taps, logit_threshold, valid_region
from .semantic import semantic_dtype

CUDA_DIR = Path(__file__).resolve().parent.parent / "cuda"
MAX_QUERIES = 256  # ci::kMaxQueries
MAX_CLASSES = 256  # ci::kMaxClasses
SEM_CHUNK = 32  # kSemChunk in postprocess.cu: classes per pp_semantic_low block row
NVCC_OPTIONS = ["-std=c++17", "-O3"]
ALIGN = 256

_Q = (MAX_QUERIES,)
#: Host mirror of ``PPTables`` in postprocess.cu (4-byte fields only, no padding).
TABLES_DTYPE = np.dtype(
    [
        ("n_inst", "<i4"),
        ("n_pan", "<i4"),
        ("n_inst_out", "<i4"),
        ("n_seg", "<i4"),
        ("mask_score", "<f4", _Q),
        ("inst_query", "<i4", _Q),
        ("inst_class", "<i4", _Q),
        ("inst_score", "<f4", _Q),
        ("pan_query", "<i4", _Q),
        ("pan_class", "<i4", _Q),
        ("pan_score", "<f4", _Q),
        ("inst_area", "<u4", _Q),
        ("inst_box", "<i4", (MAX_QUERIES, 4)),
        ("wins", "<u4", _Q),
        ("orig", "<u4", _Q),
        ("seg", "<u4", _Q),
        ("inst_lut", "<i4", (MAX_QUERIES + 1,)),
        ("pan_lut", "<i4", _Q),
        ("out_slot", "<i4", _Q),
        ("seg_id", "<i4", _Q),
        ("seg_class", "<i4", _Q),
        ("seg_score", "<f4", _Q),
        ("seg_area", "<u4", _Q),
    ]
)

WANT_INSTANCE, WANT_PANOPTIC, WANT_SEMANTIC = 1, 2, 4

#: pycuda ``prepare`` argument types of every kernel (P pointer, i int, f float, d double);
#: test/gpu/test_cuda_compile.py checks them against the kernel signatures in the .cu files.
SIGNATURES: dict[str, str] = {
    "pp_query_stats": "PiiiifP",
    "pp_select": "PiiPffiPP",
    "pp_semantic_low": "PPiiiP",
    "pp_fused": "iiPPiiiiiPPPPPPfPPPPPi",
    "pp_finalize": "PPidP",
    "pre_letterbox": "PiiiiiifffffiiP",
    "ov_instance": "PiiiiPiPffP",
    "ov_panoptic": "PiiiiPPiPffP",
}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def compile_module(name: str, cache_dir: str | None = None) -> Any:
    """pycuda SourceModule of ``cuda/<name>.cu`` for the current device (needs nvcc)."""
    from pycuda.compiler import SourceModule

    source = (CUDA_DIR / f"{name}.cu").read_text()
    return SourceModule(
        source,
        options=NVCC_OPTIONS,
        no_extern_c=True,
        include_dirs=[str(CUDA_DIR)],
        cache_dir=cache_dir,
    )


def _kernel(module: Any, name: str) -> Any:
    """A prepared kernel function of ``module``."""
    return module.get_function(name).prepare(SIGNATURES[name])


@dataclass
class _Geometry:
    """Per camera-geometry device state: taps and the output arena."""

    meta: FrameMeta
    taps: Any  # device allocation: row_i0, row_i1, row_w, col_i0, col_i1, col_w
    taps_ptr: tuple[int, ...]
    arena: Any  # device: tables, then the requested rasters back to back
    host: np.ndarray  # pinned mirror of the arena


class GpuPostprocessor:
    """Fused post-processing kernels for one model (Q queries, K classes, h x w mask grid)."""

    def __init__(
        self, labels: LabelSet, num_queries: int, mask_h: int, mask_w: int, stride: int
    ) -> None:
        if not 1 <= num_queries <= MAX_QUERIES or labels.num_classes > MAX_CLASSES:
            raise BackendError(
                f"the GPU post-processing supports 1 to {MAX_QUERIES} queries and up to "
                f"{MAX_CLASSES} classes, this model has {num_queries} and {labels.num_classes}; "
                "use the onnxruntime backend or raise kMaxQueries/kMaxClasses in cuda/common.cuh"
            )
        import pycuda.driver as cuda

        self.cuda = cuda
        self.labels = labels
        self.q, self.k = num_queries, labels.num_classes
        self.h, self.w, self.stride = mask_h, mask_w, stride
        module = compile_module("postprocess")
        self.k_stats = _kernel(module, "pp_query_stats")
        self.k_select = _kernel(module, "pp_select")
        self.k_semantic = _kernel(module, "pp_semantic_low")
        self.k_fused = _kernel(module, "pp_fused")
        self.k_finalize = _kernel(module, "pp_finalize")
        self.label_ids = cuda.to_device(labels.id_array.astype(np.int32))
        self.isthing = cuda.to_device(labels.thing_mask.astype(np.uint8))
        self.prob = cuda.mem_alloc(4 * self.q * (self.k + 1))
        self.sem = cuda.mem_alloc(4 * max(1, self.k) * self.h * self.w)
        self.sem_dtype = semantic_dtype(labels)
        self._geometry: _Geometry | None = None

    def geometry(self, meta: FrameMeta) -> _Geometry:
        """Taps and output arena for this camera geometry (allocated when it changes)."""
        if self._geometry is not None and self._geometry.meta == meta:
            return self._geometry
        cuda = self.cuda
        y0, y1, wy = bilinear_taps(meta.src_h, meta.resized_h, self.h, self.stride)
        x0, x1, wx = bilinear_taps(meta.src_w, meta.resized_w, self.w, self.stride)
        parts = [
            y0.astype(np.int32),
            y1.astype(np.int32),
            wy.astype(np.float32),
            x0.astype(np.int32),
            x1.astype(np.int32),
            wx.astype(np.float32),
        ]
        blob = np.concatenate([p.view(np.uint8) for p in parts])
        taps = cuda.to_device(blob)
        ptrs, pos = [], int(taps)
        for p in parts:
            ptrs.append(pos)
            pos += p.nbytes
        _, size = self.layout(meta, OutputSet())
        arena = cuda.mem_alloc(size)
        host = cuda.pagelocked_empty(size, np.uint8)
        self._geometry = _Geometry(meta, taps, tuple(ptrs), arena, host)
        return self._geometry

    def layout(self, meta: FrameMeta, outputs: OutputSet) -> tuple[dict[str, int], int]:
        """Byte offsets of the tables and the requested rasters, and the bytes to copy back."""
        n = meta.src_h * meta.src_w
        offsets = {"tables": 0}
        size = _align(TABLES_DTYPE.itemsize)
        for name, nbytes, wanted in (
            ("instance", 2 * n, outputs.instance),
            ("panoptic", 4 * n, outputs.panoptic),
            ("semantic", np.dtype(self.sem_dtype).itemsize * n, outputs.semantic),
        ):
            if wanted:
                offsets[name] = size
                size += _align(nbytes)
        return offsets, size

    def enqueue(
        self,
        stream: Any,
        class_logits_ptr: int,
        mask_logits_ptr: int,
        meta: FrameMeta,
        options: PostprocessOptions,
        outputs: OutputSet,
        copy: bool = True,
    ) -> None:
        """Enqueue all post-processing kernels and (``copy``) one device-to-host copy of the
        tables and requested rasters."""
        g = self.geometry(meta)
        offsets, used = self.layout(meta, outputs)
        base = int(g.arena)
        tables = base + offsets["tables"]
        want = (
            WANT_INSTANCE * outputs.instance
            + WANT_PANOPTIC * outputs.panoptic
            + WANT_SEMANTIC * outputs.semantic
        )
        threshold = np.float32(logit_threshold(options.mask_threshold))
        vh, vw = valid_region(meta, self.stride, self.h, self.w)
        hw = self.h * self.w
        self.k_stats.prepared_async_call(
            (self.q, 1), (256, 1, 1), stream,
            mask_logits_ptr, self.h, self.w, vh, vw, threshold, tables,
        )  # fmt: skip
        self.k_select.prepared_async_call(
            (1, 1), (256, 1, 1), stream,
            class_logits_ptr, self.q, self.k + 1, int(self.isthing),
            np.float32(options.score_threshold), np.float32(options.object_mask_threshold),
            options.max_instances, int(self.prob), tables,
        )  # fmt: skip
        if outputs.semantic:
            self.k_semantic.prepared_async_call(
                (-(-hw // 256), -(-self.k // SEM_CHUNK)), (256, 1, 1), stream,
                mask_logits_ptr, int(self.prob), self.q, self.k + 1, hw, int(self.sem),
            )  # fmt: skip
        grid = (-(-meta.src_w // TILE), -(-meta.src_h // TILE))
        fused_args = (
            want, mask_logits_ptr, int(self.sem), self.h, self.w, self.k, meta.src_h, meta.src_w,
            *g.taps_ptr, threshold, int(self.label_ids), tables,
            base + offsets.get("instance", 0), base + offsets.get("panoptic", 0),
            base + offsets.get("semantic", 0), int(self.sem_dtype == np.uint16),
        )  # fmt: skip
        self.k_fused.prepared_async_call(grid, (TILE, TILE, 1), stream, 0, *fused_args)
        self.k_finalize.prepared_async_call(
            (1, 1), (256, 1, 1), stream,
            int(self.label_ids), int(self.isthing), self.k,
            float(options.overlap_threshold), tables,
        )  # fmt: skip
        self.k_fused.prepared_async_call(grid, (TILE, TILE, 1), stream, 1, *fused_args)
        if copy:
            self.cuda.memcpy_dtoh_async(g.host[:used], g.arena, stream)

    def collect(self, meta: FrameMeta, outputs: OutputSet) -> FrameResult:
        """Read the host arena after the frame's final event (copies: the arena is reused)."""
        g = self.geometry(meta)
        offsets, _ = self.layout(meta, outputs)
        t = g.host[: TABLES_DTYPE.itemsize].view(TABLES_DTYPE)[0]
        n = meta.src_h * meta.src_w
        shape = (meta.src_h, meta.src_w)
        result = FrameResult(meta=meta)
        ids, thing = self.labels.id_array, self.labels.thing_mask
        if outputs.instance:
            off = offsets["instance"]
            result.instance_raster = g.host[off : off + 2 * n].view(np.uint16).reshape(shape).copy()
            slots = t["out_slot"][: int(t["n_inst_out"])]
            cls = t["inst_class"][slots].astype(np.int32)
            box = t["inst_box"][slots].astype(np.float32)
            box[:, 2:] += 1
            result.instances = Instances(
                ids=np.arange(1, len(slots) + 1, dtype=np.uint16),
                class_index=cls,
                label_id=ids[cls].astype(np.int32),
                score=t["inst_score"][slots].astype(np.float32),
                box=box.reshape(-1, 4),
                area=t["inst_area"][slots].astype(np.int64),
            )
        if outputs.panoptic:
            off = offsets["panoptic"]
            result.panoptic_raster = g.host[off : off + 4 * n].view(np.int32).reshape(shape).copy()
            m = int(t["n_seg"])
            cls = t["seg_class"][:m]
            result.segments = Segments(
                ids=t["seg_id"][:m].astype(np.int32),
                label_id=ids[cls].astype(np.int32),
                isthing=thing[cls].astype(bool),
                score=t["seg_score"][:m].astype(np.float32),
                area=t["seg_area"][:m].astype(np.int64),
            )
        if outputs.semantic:
            off = offsets["semantic"]
            size = np.dtype(self.sem_dtype).itemsize * n
            raster = g.host[off : off + size].view(self.sem_dtype).reshape(shape)
            result.semantic_raster = raster.copy()
        return result


class GpuPreprocessor:
    """Raw camera frame (pinned upload) -> encoder input buffer, one kernel."""

    def __init__(self, pad_value: tuple[float, float, float]) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        self.pad = tuple(np.float32(v) for v in pad_value)
        self.kernel = _kernel(compile_module("preprocess"), "pre_letterbox")
        self.capacity = 0
        self.host: np.ndarray | None = None
        self.device: Any = None

    def enqueue(
        self, stream: Any, image: np.ndarray, encoding: str, meta: FrameMeta, dst_ptr: int
    ) -> None:
        """Copy ``image`` into pinned memory, upload it once and run the letterbox kernel."""
        h, w = image.shape[:2]
        row = int(np.prod(image.shape[1:]))
        nbytes = h * row
        if nbytes > self.capacity:
            self.host = self.cuda.pagelocked_empty(nbytes, np.uint8)
            self.device = self.cuda.mem_alloc(nbytes)
            self.capacity = nbytes
        staging = self.host[:nbytes].reshape(image.shape)
        np.copyto(staging, image)
        self.cuda.memcpy_htod_async(self.device, self.host[:nbytes], stream)
        grid = (-(-meta.input_w // 32), -(-meta.input_h // 8))
        self.kernel.prepared_async_call(
            grid, (32, 8, 1), stream,
            int(self.device), h, w, row, ENCODING_CODES[encoding.lower()],
            meta.resized_h, meta.resized_w,
            np.float32(h / meta.resized_h), np.float32(w / meta.resized_w),
            *self.pad, meta.input_h, meta.input_w, dst_ptr,
        )  # fmt: skip


class GpuOverlay:
    """Overlay kernels on device-resident frames: instance ids or panoptic segment ids."""

    def __init__(self) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        module = compile_module("overlay")
        self.k_instance = _kernel(module, "ov_instance")
        self.k_panoptic = _kernel(module, "ov_panoptic")
        self._tables: list[Any] = []

    def enqueue(
        self,
        stream: Any,
        src_ptr: int,
        shape: tuple[int, ...],
        encoding: str,
        ids_ptr: int,
        lut: np.ndarray,
        alpha: float,
        out_ptr: int,
        sorted_ids: np.ndarray | None = None,
    ) -> None:
        """Blend the id raster at ``ids_ptr`` (uint16 instance ids, or int32 panoptic ids with
        ``sorted_ids``) over the raw frame at ``src_ptr`` into HxWx3 RGB at ``out_ptr``."""
        h, w = shape[:2]
        row = int(np.prod(shape[1:]))
        lut_dev = self.cuda.to_device(np.ascontiguousarray(lut, np.uint8))
        self._tables = [lut_dev]  # kept alive until the next call (the copy is synchronous)
        weights = (np.float32(1.0 - alpha), np.float32(alpha))
        grid, block = (-(-w // 32), -(-h // 8)), (32, 8, 1)
        code = ENCODING_CODES[encoding.lower()]
        if sorted_ids is None:
            self.enqueue_instance(
                stream, src_ptr, shape, encoding, ids_ptr, int(lut_dev), len(lut), alpha, out_ptr
            )
            return
        ids_dev = self.cuda.to_device(np.ascontiguousarray(sorted_ids, np.int32))
        self._tables.append(ids_dev)
        self.k_panoptic.prepared_async_call(
            grid, block, stream, src_ptr, h, w, row, code,
            ids_ptr, int(ids_dev), len(sorted_ids), int(lut_dev), *weights, out_ptr,
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
        h, w = shape[:2]
        row = int(np.prod(shape[1:]))
        self.k_instance.prepared_async_call(
            (-(-w // 32), -(-h // 8)), (32, 8, 1), stream,
            src_ptr, h, w, row, ENCODING_CODES[encoding.lower()],
            ids_ptr, n_lut, lut_ptr, np.float32(1.0 - alpha), np.float32(alpha), out_ptr,
        )  # fmt: skip
