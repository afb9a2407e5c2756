"""Post-processing launcher: the fused kernels (kernels/postprocess.cu) for one model, three
launches a frame (``pp_stats``, ``pp_tiles``, ``pp_remap``; two when only the semantic raster is
asked for). ``enqueue_batch`` replays a batch's launches and copies as one CUDA graph where the
driver offers graphs (gpu/graphs.py), captured at the first batch of each shape.

Everything is enqueued on the caller's stream; nothing here synchronises. Buffers are allocated
once per frame geometry and batch slot: each slot of a batch has its own output arena (read back
after the batch's one wait), while the scratch buffers are shared, as the slots run one after
another on the one stream. The caller's thread must have the CUDA context current (the TensorRT
backend's GPU thread, or scripts/gpu_check.py). The algorithm is documented and executed step
for step in numpy by ``twin.TwinFrame``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendError
from ..labels import LabelSet
from ..postprocess.resample import bilinear_taps, logit_threshold, valid_region
from ..postprocess.semantic import semantic_dtype
from ..structures import (
    FrameMeta,
    FrameResult,
    Instances,
    OutputSet,
    PostprocessOptions,
    Segments,
)
from .constants import (
    MAX_CLASSES,
    MAX_QUERIES,
    PP_BLOCK,
    REMAP_PIXELS,
    SEM_CHUNK,
    TABLES_DTYPE,
    TILE,
    WANT_INSTANCE,
    WANT_PANOPTIC,
    WANT_SEMANTIC,
)
from .graphs import CudaGraphs, GraphError
from .launch import load_kernels

#: Byte alignment of each part of the output arena.
ALIGN = 256
#: Captured graphs kept (batch shapes: cameras' geometries, outputs and options); the least
#: recently used one is freed beyond this.
GRAPHS_KEPT = 8


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def result_from_tables(
    tables: np.void, labels: LabelSet, meta: FrameMeta, rasters: dict[str, np.ndarray]
) -> FrameResult:
    """FrameResult of one frame's ``PPTables`` record and its rasters by output name
    (``instance``, ``panoptic``, ``semantic``: the requested ones, owned by the result)."""
    result = FrameResult(
        meta=meta,
        instance_raster=rasters.get("instance"),
        panoptic_raster=rasters.get("panoptic"),
        semantic_raster=rasters.get("semantic"),
    )
    ids, thing = labels.id_array, labels.thing_mask
    if "instance" in rasters:
        slots = tables["out_slot"][: int(tables["n_inst_out"])]
        cls = tables["inst_class"][slots].astype(np.int32)
        box = tables["inst_box"][slots].astype(np.float32)
        box[:, 2:] += 1  # the kernels keep inclusive maxima
        result.instances = Instances(
            ids=np.arange(1, len(slots) + 1, dtype=np.uint16),
            class_index=cls,
            label_id=ids[cls].astype(np.int32),
            score=tables["inst_score"][slots].astype(np.float32),
            box=box.reshape(-1, 4),
            area=tables["inst_area"][slots].astype(np.int64),
        )
    if "panoptic" in rasters:
        m = int(tables["n_seg"])
        cls = tables["seg_class"][:m]
        result.segments = Segments(
            ids=tables["seg_id"][:m].astype(np.int32),
            label_id=ids[cls].astype(np.int32),
            isthing=thing[cls].astype(bool),
            score=tables["seg_score"][:m].astype(np.float32),
            area=tables["seg_area"][:m].astype(np.int64),
        )
    return result


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
        self,
        labels: LabelSet,
        num_queries: int,
        mask_h: int,
        mask_w: int,
        stride: int,
        graphs: CudaGraphs | None = None,
        graphs_off: str | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        """Kernels and buffers for one model; ``graphs``: replay ``enqueue_batch`` as CUDA graphs
        (None: launch one by one, ``graphs_off`` saying why); ``log`` says once why graphs were
        given up later, if they are."""
        if not 1 <= num_queries <= MAX_QUERIES or labels.num_classes > MAX_CLASSES:
            raise BackendError(
                f"the GPU post-processing supports 1 to {MAX_QUERIES} queries and up to "
                f"{MAX_CLASSES} classes, this model has {num_queries} and {labels.num_classes}; "
                "use the onnxruntime backend or raise kMaxQueries/kMaxClasses in "
                "gpu/kernels/common.cuh"
            )
        import pycuda.driver as cuda

        self.cuda = cuda
        self.labels = labels
        self.q, self.k = num_queries, labels.num_classes
        self.h, self.w, self.stride = mask_h, mask_w, stride
        self.k_stats, self.k_tiles, self.k_remap = load_kernels(
            "postprocess", "pp_stats", "pp_tiles", "pp_remap"
        )
        self.label_ids = cuda.to_device(labels.id_array.astype(np.int32))
        self.isthing = cuda.to_device(labels.thing_mask.astype(np.uint8))
        self.prob = cuda.mem_alloc(4 * self.q * (self.k + 1))
        self.sem = cuda.mem_alloc(4 * max(1, self.k) * self.h * self.w)
        self.sem_dtype = semantic_dtype(labels)
        #: Raster element type per output, in arena order.
        self.raster_dtypes = {
            "instance": np.uint16,
            "panoptic": np.int32,
            "semantic": self.sem_dtype,
        }
        self._geometry: dict[int, _Geometry] = {}
        self.graphs = graphs
        self._log = log
        #: why ``enqueue_batch`` launches one by one (None while it replays graphs)
        self.graphs_off = None if graphs else graphs_off or "no CUDA graph API given"
        self._captured: OrderedDict[tuple, int] = OrderedDict()

    def geometry(self, meta: FrameMeta, slot: int = 0) -> _Geometry:
        """Taps and output arena of batch slot ``slot`` for this camera geometry (allocated
        when it changes)."""
        known = self._geometry.get(slot)
        if known is not None and known.meta == meta:
            return known
        self.release_graphs()  # they hold the addresses of the slot's arena and taps
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
        # the tables' block counters start at 0; the kernels leave them at 0 after every frame
        cuda.memcpy_htod(arena, np.zeros(TABLES_DTYPE.itemsize, np.uint8))
        host = cuda.pagelocked_empty(size, np.uint8)
        self._geometry[slot] = _Geometry(meta, taps, tuple(ptrs), arena, host)
        return self._geometry[slot]

    def layout(self, meta: FrameMeta, outputs: OutputSet) -> tuple[dict[str, int], int]:
        """Byte offsets of the tables and the requested rasters, and the bytes to copy back."""
        n = meta.src_h * meta.src_w
        offsets = {"tables": 0}
        size = _align(TABLES_DTYPE.itemsize)
        for name, dtype in self.raster_dtypes.items():
            if getattr(outputs, name):
                offsets[name] = size
                size += _align(np.dtype(dtype).itemsize * n)
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
        slot: int = 0,
    ) -> None:
        """Enqueue all post-processing kernels into slot ``slot``'s arena and (``copy``) one
        device-to-host copy of the tables and requested rasters."""
        g = self.geometry(meta, slot)
        offsets, _ = self.layout(meta, outputs)
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
        sem_cols = -(-hw // PP_BLOCK)
        sem_blocks = sem_cols * -(-self.k // SEM_CHUNK) if outputs.semantic else 0
        self.k_stats.prepared_async_call(
            (self.q + sem_blocks, 1), (PP_BLOCK, 1, 1), stream,
            mask_logits_ptr, class_logits_ptr, self.q, self.k + 1, self.h, self.w, vh, vw,
            threshold, int(self.isthing), np.float32(options.score_threshold),
            np.float32(options.object_mask_threshold), options.max_instances, sem_cols,
            int(self.prob), int(self.sem), tables,
        )  # fmt: skip
        inst = base + offsets.get("instance", 0)
        pan = base + offsets.get("panoptic", 0)
        self.k_tiles.prepared_async_call(
            (-(-meta.src_w // TILE), -(-meta.src_h // TILE)), (TILE, TILE, 1), stream,
            want, mask_logits_ptr, int(self.sem), self.h, self.w, self.k, meta.src_h, meta.src_w,
            *g.taps_ptr, threshold, int(self.label_ids), int(self.isthing),
            float(options.overlap_threshold), max(1, options.min_area), tables, inst, pan,
            base + offsets.get("semantic", 0), int(self.sem_dtype == np.uint16),
        )  # fmt: skip
        if outputs.instance or outputs.panoptic:
            n = meta.src_h * meta.src_w
            self.k_remap.prepared_async_call(
                (-(-n // (REMAP_PIXELS * PP_BLOCK)), 1), (PP_BLOCK, 1, 1), stream,
                want, n, tables, inst, pan,
            )  # fmt: skip
        if copy:
            self.enqueue_copy(stream, meta, outputs, slot)

    def enqueue_batch(
        self,
        stream: Any,
        frames: Sequence[tuple[int, int, FrameMeta, OutputSet]],
        options: PostprocessOptions,
    ) -> None:
        """A batch's post-processing: every frame slot's kernels (``frames[i]``: class and mask
        logits addresses, meta and outputs of slot i), then every slot's copy back, so no copy
        waits between two slots' kernels. Replayed as one CUDA graph per batch shape (captured
        at its first batch, its arenas allocated before); where a capture fails, said once,
        launched one by one from then on."""
        frames = tuple(frames)

        def enqueue() -> None:
            for slot, (logits, masks, meta, outputs) in enumerate(frames):
                self.enqueue(stream, logits, masks, meta, options, outputs, copy=False, slot=slot)
            for slot, (_, _, meta, outputs) in enumerate(frames):
                self.enqueue_copy(stream, meta, outputs, slot)

        for slot, (_, _, meta, _) in enumerate(frames):
            self.geometry(meta, slot)  # allocations and their zeroing: never inside a capture
        if self.graphs is None or self.graphs_off is not None:  # the first implies the second
            enqueue()
            return
        key = (frames, options)
        executable = self._captured.get(key)
        if executable is None:
            try:
                executable = self.graphs.capture(stream, enqueue)
            except GraphError as exc:
                self.graphs_off = f"a graph capture failed ({exc})"
                self._log(
                    f"GPU post-processing launches its kernels one by one from now on: "
                    f"{self.graphs_off}"
                )
                enqueue()
                return
            self._captured[key] = executable
            while len(self._captured) > GRAPHS_KEPT:
                self.graphs.destroy(self._captured.popitem(last=False)[1])
        self._captured.move_to_end(key)
        self.graphs.launch(executable, stream)

    def release_graphs(self) -> None:
        """Free every captured graph (before the context goes)."""
        while self._captured and self.graphs is not None:
            self.graphs.destroy(self._captured.popitem()[1])

    def enqueue_copy(self, stream: Any, meta: FrameMeta, outputs: OutputSet, slot: int = 0) -> None:
        """One device-to-host copy of slot ``slot``'s tables and requested rasters."""
        g = self.geometry(meta, slot)
        _, used = self.layout(meta, outputs)
        self.cuda.memcpy_dtoh_async(g.host[:used], g.arena, stream)

    def collect(self, meta: FrameMeta, outputs: OutputSet, slot: int = 0) -> FrameResult:
        """Read slot ``slot``'s host arena after the batch's final event (copies: the arena is
        reused)."""
        g = self.geometry(meta, slot)
        offsets, _ = self.layout(meta, outputs)
        shape = (meta.src_h, meta.src_w)
        rasters = {}
        for name, dtype in self.raster_dtypes.items():
            if name in offsets:
                size = np.dtype(dtype).itemsize * meta.src_h * meta.src_w
                raw = g.host[offsets[name] : offsets[name] + size]
                rasters[name] = raw.view(dtype).reshape(shape).copy()
        tables = g.host[: TABLES_DTYPE.itemsize].view(TABLES_DTYPE)[0]
        return result_from_tables(tables, self.labels, meta, rasters)
