"""TensorRT + pycuda backend: the whole batch stays on the GPU, one synchronisation per batch,
and a batch's two halves on two streams, so the next batch's first half runs under this one's
second half.

Threading: the backend owns two GPU threads, one per half. It retains the device's primary
context and pushes it in both; engines, buffers, streams and events are created on the first at
construction (node configure time, which is also when missing engines are built). ``encode_batch``
runs on the first thread, ``decode_batch`` (and the overlay and lifting of its frames) on the
second, and ``close`` frees everything before popping the context on both. Callers on any thread
(an rclpy executor may hop threads) hand frames over and wait for the result; ``infer_batch`` is
the two halves one after the other.

Batches: a static-batch engine per stage and batch size (trt_build.py), one execution context
each with ``set_input_shape`` at its size. The I/O buffers are sized for the largest batch and
shared by every size (slot i at offset i x frame bytes). The encoder's and the decoder's contexts
each share one activation allocation, the largest their stage needs at any size: the two stages
may run at once, each stage's sizes never do.

Overlap: up to ``RING`` batches are in flight, one being decoded while the next is encoded (the
node's staged worker, ros/worker.Finisher, hands over at most two). Each ring slot has its own
pinned staging and raw frames on the device, and its own copy of the encoder's outputs, so the
next batch's uploads, preprocessing and encoder run on the encode stream while this batch's
decoder, post-processing and device-to-host copies run on the decode stream:
- encode stream, batch n at ring slot r: each frame's pinned upload and preprocessing kernel into
  its batch slot -> spare slots filled with a device copy of slot 0 -> encoder engine (its
  outputs bound to ring slot r's copy);
- decode stream: wait for batch n's encoder -> decoder engine (its inputs bound to ring slot r's
  copy) -> the fused post-processing per frame slot (an output arena each) -> every slot's
  device-to-host copy.
A ring slot is claimed again only once its previous batch is decoded, whose end the host waited
for, so nothing on either stream still reads it; an overlay drawn from a batch's raw frames
refuses once a newer batch has claimed their slot. The host waits once per batch, for its
results. CUDA events between the stages give the batch's stage times,
which every result reports. Frames inferred with ``OutputSet.overlay`` keep their raw frame and
instance raster on the device for ``render_overlay``: once the Pipeline knows each instance's
track id it uploads the per-frame-id colour table (a few hundred bytes) and the overlay kernel
blends, a second short wait per such frame. Likewise frames inferred with
``OutputSet.instance`` keep their instance raster on the device until the next batch is decoded,
for ``lift_depth`` and ``lift_cloud``: the depth image or the cloud's points are uploaded and the
lift kernels (gpu/lift.py) read the raster where the post-processing wrote it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendError
from ..private_files import default_cache_dir
from . import acceptance
from .base import BackendOptions
from .engine_cache import EngineCache
from .trt_build import (
    BuildOptions,
    device_info,
    engine_precision,
    ensure_engines,
    import_pycuda,
    import_tensorrt,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..bundle import ModelBundle, StageSpec
    from ..spatial.lift import Instances3D, Intrinsics, LiftOptions
    from ..structures import BatchItem, FrameMeta, FrameResult, OutputSet, PostprocessOptions

#: Stage-time keys reported per frame, as the CPU backend's.
TIMED_STAGES = ("preprocess", "encoder", "decoder", "postprocess")
#: The types the GPU kernels read and write the engines' image and outputs in: the FP16 engines
#: take the image in half (``variants.half_image_input``), the letterbox kernel writes it so.
GPU_IO_TYPES = {
    "image": (np.dtype(np.float32), np.dtype(np.float16)),
    "pred_logits": (np.dtype(np.float32),),
    "pred_masks": (np.dtype(np.float32),),
}
#: Batches in flight at once: one in ``decode_batch`` while the next is in ``encode_batch``.
RING = 2


@dataclass
class EncodedBatch:
    """A batch between ``encode_batch`` and ``decode_batch``: its frames, the batch size it runs
    at, its ring slot and its place in encoding order, the encode stream's events (start,
    preprocessed, encoded) and the host milliseconds of its pinned copies and of its first half."""

    items: list[BatchItem]
    slots: int
    ring: int
    sequence: int
    events: tuple[Any, Any, Any]
    host_copy_ms: float
    enqueue_ms: float


def batch_sizes(bundle: ModelBundle, options: BackendOptions) -> tuple[int, ...]:
    """The engines' batch sizes, ascending: ``options.batch_sizes``, else 1..max_batch;
    BackendError where the bundle has no batch axis and a size above 1 is asked for."""
    sizes = options.batch_sizes or range(1, options.max_batch + 1)
    chosen = tuple(sorted({int(b) for b in sizes}))
    if chosen != (1,) and not bundle.batched:
        raise BackendError(
            f"bundle {bundle.root} was exported with a fixed batch of 1, so it cannot build "
            f"engines for batch sizes {list(chosen)}; re-export it with 'compactinst export' "
            "(it writes the batch axis) or run batch size 1"
        )
    return chosen


class TensorRTBackend:
    """Backend protocol implementation on strongly typed TensorRT 10.3+ engines and pycuda."""

    name = "tensorrt"

    def __init__(self, bundle: ModelBundle, options: BackendOptions | None = None) -> None:
        """Load (or build) the engines on the encode thread as ``options`` say (None: defaults)."""
        options = options or BackendOptions()
        self._trt = self._import_runtime(options.setting("backend", "onnxruntime"))
        self._cuda = import_pycuda()
        self.bundle = bundle
        self.device = options.device
        self.sizes = batch_sizes(bundle, options)
        self.cache = EngineCache(options.engine_cache_dir or default_cache_dir())
        self._remedy = acceptance.tensorrt_remedy(options)  # in the opener's syntax
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactinst-gpu")
        self._decode_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="compactinst-gpu-decode"
        )
        self._ctx: Any = None
        self._closed = False
        try:
            self._run(
                self._setup,
                options.allow_build,
                options.build_options or BuildOptions(),
                options.precision,
            )
            self._run_decode(self._push_decode)
        except BaseException:
            self.close()
            raise

    # -- what a subclass on another TensorRT changes (rtx.py) -------------------------------
    def _import_runtime(self, cpu_setting: str) -> Any:
        """The TensorRT module the engines are built and run with."""
        return import_tensorrt(cpu_setting)

    def _engine_source(self) -> dict[str, Any]:
        """``ensure_engines``' ``trt`` and ``build_plan``: TensorRT's own builder here."""
        return {}

    def _new_context(self, engine: Any) -> Any:
        """An execution context of ``engine`` whose activation memory we give it."""
        return engine.create_execution_context(
            self._trt.ExecutionContextAllocationStrategy.USER_MANAGED
        )

    def _before_teardown(self) -> None:
        """Encode thread, before anything is freed: what a subclass keeps (nothing here)."""

    # -- thread plumbing ------------------------------------------------------------------
    def _run(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the encode thread (the one that made everything)."""
        if self._closed:
            raise BackendError("the TensorRT backend is closed; create a new one")
        return self._executor.submit(fn, *args).result()

    def _run_decode(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the decode thread."""
        if self._closed:
            raise BackendError("the TensorRT backend is closed; create a new one")
        return self._decode_executor.submit(fn, *args).result()

    def _setup(self, allow_build: bool, options: BuildOptions, precision: str | None) -> None:
        """Encode thread: context, engines per batch size (built from the ``precision`` typed
        graphs), contexts, buffers, kernels, stream and events."""
        from ..gpu.constants import MAX_QUERIES
        from ..gpu.overlay import GpuOverlay
        from ..gpu.postprocess import GpuPostprocessor
        from ..gpu.preprocess import GpuPreprocessor
        from ..palette import palette

        cuda, trt = self._cuda, self._trt
        self.info = device_info(self.device)
        self._ctx = cuda.Device(self.device).retain_primary_context()
        self._ctx.push()
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self.precision = engine_precision(self.bundle, precision)
        self._boundary = self.bundle.boundary_tensors
        self._engines: dict[int, list[Any]] = {}
        for batch in self.sizes:
            engines = ensure_engines(
                self.bundle, self.cache, self._runtime.deserialize_cuda_engine, self.info,
                self.precision, allow_build, options, batch=batch, remedy=self._remedy,
                **self._engine_source(),
            )  # fmt: skip
            self._engines[batch] = [engines[s.name] for s in self.bundle.stages]
        self._memory = {
            f"{stage.name}@{batch}": int(engine.device_memory_size_v2)
            for batch, engines in self._engines.items()
            for stage, engine in zip(self.bundle.stages, engines, strict=True)
        }
        # a stage's sizes run one at a time on its stream; the two stages may run at once
        activation = [
            max(1, *(self._memory[f"{stage.name}@{batch}"] for batch in self.sizes))
            for stage in self.bundle.stages
        ]
        self._activation_bytes = activation
        self._activation = [cuda.mem_alloc(size) for size in activation]
        self._contexts: dict[int, list[Any]] = {}
        # tensor name -> (one device buffer per ring slot for the tensors one stage hands the
        # next, else one; per-frame shape; dtype)
        self._buffers: dict[str, tuple[list[Any], tuple[int, ...], np.dtype]] = {}
        for batch in reversed(self.sizes):  # the largest first: it sizes the shared buffers
            self._contexts[batch] = []
            for index, (stage, engine) in enumerate(
                zip(self.bundle.stages, self._engines[batch], strict=True)
            ):
                context = self._new_context(engine)
                context.set_device_memory(int(self._activation[index]), activation[index])
                self._bind(stage, engine, context, batch)
                self._contexts[batch].append(context)
        image = self.bundle.image_tensor
        self._image_ptr, self._image_bytes = self._slot(image)
        (self._logits_ptr, self._logits_bytes), (self._masks_ptr, self._masks_bytes) = (
            self._slot(n) for n in ("pred_logits", "pred_masks")
        )
        q, mask_h, mask_w = self._buffers["pred_masks"][1][-3:]
        self._pre = GpuPreprocessor(self.bundle.pad_value, self._buffers[image][2])
        self._encode_stream, self._stream = cuda.Stream(), cuda.Stream()  # _stream: decode
        graphs, graphs_off = self._graphs_that_work()
        self._post = GpuPostprocessor(
            self.bundle.labels, q, mask_h, mask_w, self.bundle.mask_stride,
            graphs=graphs, graphs_off=graphs_off,
        )  # fmt: skip
        self._overlay = GpuOverlay()
        self._palette_rows = MAX_QUERIES + 1  # per-frame instance ids are 1..number of queries
        self._palette_host = cuda.pagelocked_empty((self._palette_rows, 3), np.uint8)
        self._palette = cuda.to_device(palette(self._palette_rows))  # RGB row per instance id
        self._overlay_bufs: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}
        # the last decoded batch's frames with an overlay, and (its ring slot, its sequence)
        self._overlay_frames: list[tuple[tuple[int, ...], str, FrameMeta, OutputSet] | None] = []
        self._overlay_batch = (0, -1)
        # the last batch's frames with an instance raster in their arena: (result, slot, meta,
        # outputs, per-frame ids), matched by identity, so that a result of an older batch,
        # whose arena now holds another frame, is never lifted from it
        self._lift_frames: list[tuple[FrameResult, int, FrameMeta, OutputSet, np.ndarray]] = []
        self._lift: Any = None  # GpuLift, made at the first lift (most nodes have no depth)
        self._lift_input: tuple[Any, np.ndarray] | None = None  # depth or points: device, pinned
        # per ring slot: start, preprocessed, encoded (encode stream)
        self._encode_events = [tuple(cuda.Event() for _ in range(3)) for _ in range(RING)]
        # decode stream: decoder start, decoded, done (the one the host waits on)
        self._decode_events = (
            cuda.Event(), cuda.Event(), cuda.Event(cuda.event_flags.BLOCKING_SYNC),
        )  # fmt: skip
        # batches encoded and decoded so far, and the batch each ring slot's inputs belong to;
        # the lock makes claiming a ring slot and drawing from its frames exclusive
        self._encoded = self._decoded = 0
        self._ring_owner = [-1] * RING
        self._ring_lock = threading.Lock()

    def _graphs_that_work(self) -> tuple[Any, str | None]:
        """Encode thread: (the driver's graph API, None), tried once on a one-byte copy
        (capture, replay, free), or (None, why) where it fails, which is said once here and
        in ``describe``."""
        from ..gpu.graphs import CudaGraphs, GraphError

        cuda, stream = self._cuda, self._stream
        try:
            graphs = CudaGraphs()
            scratch = cuda.mem_alloc(2)
            trial = graphs.capture(
                stream, lambda: cuda.memcpy_dtod_async(scratch, int(scratch) + 1, 1, stream)
            )
            graphs.launch(trial, stream)
            stream.synchronize()
            graphs.destroy(trial)
        except GraphError as exc:
            print(f"GPU post-processing launches its kernels one by one: {exc}")
            return None, str(exc)
        return graphs, None

    def _slot(self, name: str) -> tuple[int, int]:
        """Device address of tensor ``name``'s slot 0 and the bytes of one slot."""
        buffers, frame, dtype = self._buffers[name]
        return int(buffers[0]), int(np.prod(frame)) * dtype.itemsize

    def _bind_ring(self, stage: StageSpec, context: Any, ring: int) -> None:
        """Point ``context``'s tensors that one stage hands the next at ring slot ``ring``'s
        copy (TensorRT reads the addresses when the stage is enqueued)."""
        for tensor in (*stage.inputs, *stage.outputs):
            if tensor.name in self._boundary:
                context.set_tensor_address(tensor.name, int(self._buffers[tensor.name][0][ring]))

    def _bind(self, stage: StageSpec, engine: Any, context: Any, batch: int) -> None:
        """Give ``context`` its input shapes at ``batch`` and bind every I/O tensor to its
        shared buffer (allocated at the first, largest batch; reused for an earlier stage's
        output)."""
        trt, cuda = self._trt, self._cuda
        inputs = {t.name: t for t in stage.inputs}
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            if name in inputs and any(d < 0 for d in engine.get_tensor_shape(name)):
                shape = inputs[name].batch_shape(batch)
                if not context.set_input_shape(name, shape):
                    raise BackendError(
                        f"the {stage.name} engine for batch {batch} refuses input '{name}' of "
                        f"shape {shape}; rebuild it (compactinst build-engine --force)"
                    )
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            shape = tuple(context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            if any(d < 0 for d in shape) or shape[0] != batch:
                raise BackendError(
                    f"engine tensor '{name}' of stage '{stage.name}' has shape {shape} at batch "
                    f"{batch}; rebuild the engines from a bundle with static frame shapes"
                )
            frame = (1, *shape[1:])
            if name in self._buffers:
                _, known_frame, known_dtype = self._buffers[name]
                if (known_frame, known_dtype) != (frame, dtype):
                    raise BackendError(
                        f"tensor '{name}' is {known_frame} {known_dtype} per frame where "
                        f"produced but {frame} {dtype} where consumed; re-export the bundle"
                    )
            else:
                allowed = GPU_IO_TYPES.get(name)
                if allowed is not None and dtype not in allowed:
                    raise BackendError(
                        f"engine tensor '{name}' is {dtype}; the GPU path takes it as "
                        f"{' or '.join(map(str, allowed))} (build without I/O precision "
                        "overrides)"
                    )
                nbytes = int(np.prod(shape)) * dtype.itemsize
                copies = RING if name in self._boundary else 1
                buffers = [cuda.mem_alloc(max(1, nbytes)) for _ in range(copies)]
                self._buffers[name] = (buffers, frame, dtype)
            context.set_tensor_address(name, int(self._buffers[name][0][0]))

    # -- Backend protocol -------------------------------------------------------------------
    def infer_batch(
        self, items: Sequence[BatchItem], options: PostprocessOptions
    ) -> list[FrameResult]:
        """Run validated frames as one batch: ``decode_batch(encode_batch(items))``; stage
        times come from CUDA events."""
        return self.decode_batch(self.encode_batch(items), options) if items else []

    def encode_batch(self, items: Sequence[BatchItem]) -> EncodedBatch:
        """The first half, enqueued on the encode stream without waiting for it: uploads,
        preprocessing and the encoder into the next ring slot. BackendError when ``RING``
        batches are already encoded and not yet decoded (decode the oldest first)."""
        self.batch_slots(len(items))
        return self._run(self._encode, list(items))

    def decode_batch(self, encoded: EncodedBatch, options: PostprocessOptions) -> list[FrameResult]:
        """The second half of ``encode_batch``'s batch, in the order they were encoded: decoder,
        post-processing and the copies back on the decode stream, one wait, then the results."""
        return self._run_decode(self._decode, encoded, options)

    def batch_slots(self, frames: int) -> int:
        """The smallest built batch size that holds ``frames``."""
        fitting = [b for b in self.sizes if b >= frames]
        if not fitting:
            raise BackendError(
                f"a batch of {frames} frames exceeds the TensorRT engines' batch sizes "
                f"{list(self.sizes)}; build larger ones (batch_sizes, or max_batch) or run "
                "fewer cameras per node"
            )
        return fitting[0]

    def _encode(self, items: list[BatchItem]) -> EncodedBatch:
        """Encode thread: claim the next ring slot (its previous batch is decoded, so nothing
        on either stream still reads it), copy the frames into its pinned staging, then enqueue
        the first half. Where that fails, the claim is undone once the work already enqueued
        has ended, so the next batch takes the slot and the sequence."""
        with self._ring_lock:
            if self._encoded - self._decoded >= RING:
                raise BackendError(
                    f"{RING} batches are already encoded and not decoded; decode_batch the "
                    "oldest before encoding another"
                )
            sequence = self._encoded
            ring = sequence % RING
            owner, self._ring_owner[ring] = self._ring_owner[ring], sequence  # overlays refuse
            self._encoded += 1
        try:
            return self._enqueue_encode(items, ring, sequence)
        except BaseException:
            self._encode_stream.synchronize()
            with self._ring_lock:
                self._encoded -= 1
                self._ring_owner[ring] = owner
            raise

    def _enqueue_encode(self, items: list[BatchItem], ring: int, sequence: int) -> EncodedBatch:
        """Encode thread: the first half of a batch claimed at ring slot ``ring``."""
        slots = self.batch_slots(len(items))
        stream, cuda = self._encode_stream, self._cuda
        start = time.perf_counter()
        events = self._encode_events[ring]
        for slot, item in enumerate(items):  # host copies first: not inside "preprocess"
            self._pre.stage(item.image, item.encoding, self._pre_slot(ring, slot))
        host_copy_ms = (time.perf_counter() - start) * 1e3
        events[0].record(stream)
        for slot, item in enumerate(items):
            dst = self._image_ptr + slot * self._image_bytes
            self._pre.enqueue(
                stream, item.image, item.encoding, item.meta, dst, self._pre_slot(ring, slot),
                staged=True,
            )  # fmt: skip
        for slot in range(len(items), slots):  # padding: slot 0's input, outputs discarded
            dst = self._image_ptr + slot * self._image_bytes
            cuda.memcpy_dtod_async(dst, self._image_ptr, self._image_bytes, stream)
        events[1].record(stream)
        self._execute(0, slots, ring, stream)
        events[2].record(stream)
        enqueue_ms = (time.perf_counter() - start) * 1e3
        return EncodedBatch(items, slots, ring, sequence, events, host_copy_ms, enqueue_ms)

    def _pre_slot(self, ring: int, slot: int) -> int:
        """The preprocessor's slot (pinned staging, raw frame on the device) of batch slot
        ``slot`` in ring slot ``ring``."""
        return ring * self.sizes[-1] + slot

    def _execute(self, index: int, slots: int, ring: int, stream: Any) -> None:
        """Enqueue stage ``index``'s engine at batch ``slots`` on ``stream``, bound to ring slot
        ``ring``."""
        stage, context = self.bundle.stages[index], self._contexts[slots][index]
        self._bind_ring(stage, context, ring)
        if not context.execute_async_v3(stream.handle):
            raise BackendError(f"TensorRT failed to enqueue stage '{stage.name}' at batch {slots}")

    def _decode(self, encoded: EncodedBatch, options: PostprocessOptions) -> list[FrameResult]:
        """Decode thread: the second half on the decode stream after the batch's encoder, one
        wait, then the results. A batch whose second half fails counts as decoded once its
        work on both streams has ended: its error goes to the caller, the next batch runs."""
        if encoded.sequence != self._decoded:
            raise BackendError(
                f"decode_batch got batch {encoded.sequence} but batch {self._decoded} is next: "
                "decode batches in the order they were encoded, each once"
            )
        try:
            return self._enqueue_decode(encoded, options)
        except BaseException:
            encoded.events[2].synchronize()
            self._stream.synchronize()
            raise
        finally:
            self._decoded += 1

    def _enqueue_decode(
        self, encoded: EncodedBatch, options: PostprocessOptions
    ) -> list[FrameResult]:
        """Decode thread: the second half of ``encoded``, its wait and its results."""
        items, slots, ring = encoded.items, encoded.slots, encoded.ring
        stream, ev = self._stream, self._decode_events
        start = time.perf_counter()
        stream.wait_for_event(encoded.events[2])
        ev[0].record(stream)
        self._execute(1, slots, ring, stream)
        ev[1].record(stream)
        frames = [
            (
                self._logits_ptr + slot * self._logits_bytes,
                self._masks_ptr + slot * self._masks_bytes,
                item.meta,
                item.outputs,
            )
            for slot, item in enumerate(items)
        ]
        self._post.enqueue_batch(stream, frames, options)
        ev[2].record(stream)
        enqueue_ms = encoded.enqueue_ms + (time.perf_counter() - start) * 1e3
        ev[2].synchronize()
        marks = (*encoded.events, *ev)  # start, preprocessed, encoded, decoder start, ...
        timings = {
            "preprocess": marks[0].time_till(marks[1]),
            "encoder": marks[1].time_till(marks[2]),
            "decoder": marks[3].time_till(marks[4]),
            "postprocess": marks[4].time_till(marks[5]),
        }
        results = []
        for slot, item in enumerate(items):
            result = self._post.collect(item.meta, item.outputs, slot)
            result.timings_ms.update(timings)
            result.timings_ms["enqueue"] = enqueue_ms
            result.timings_ms["host_copy"] = encoded.host_copy_ms
            results.append(result)
        self._overlay_frames = [
            (item.image.shape, item.encoding, item.meta, item.outputs)
            if item.outputs.overlay
            else None
            for item in items
        ]
        self._overlay_batch = (ring, encoded.sequence)
        self._lift_frames = [
            (result, slot, item.meta, item.outputs, result.instances.ids.copy())
            for slot, (item, result) in enumerate(zip(items, results, strict=True))
            if item.outputs.instance
        ]
        return results

    def render_overlay(self, colours: np.ndarray, alpha: float, index: int = 0) -> np.ndarray:
        """Frame ``index`` of the last batch: its overlay rendered on the GPU in ``colours``
        (RGB row per per-frame instance id), bgr8; BackendError unless that frame was inferred
        with the overlay."""
        return self._run_decode(self._render_overlay, colours, alpha, index)

    def _render_overlay(self, colours: np.ndarray, alpha: float, index: int) -> np.ndarray:
        """Decode thread: upload the colour table, blend, copy back, wait. The blend reads the
        frame's ring slot, so it refuses once a newer batch has claimed that slot."""
        frames = self._overlay_frames
        if not 0 <= index < len(frames) or frames[index] is None:
            raise BackendError(
                f"render_overlay needs frame {index} of the last batch ({len(frames)} frames) "
                "on the device: infer it with OutputSet(overlay=True) first"
            )
        ring, sequence = self._overlay_batch
        rows = min(len(colours), self._palette_rows)
        self._palette_host[:] = 0
        self._palette_host[:rows] = colours[:rows]
        with self._ring_lock:
            if self._ring_owner[ring] != sequence:
                raise BackendError(
                    f"render_overlay of batch {sequence}: its frames were replaced on the device "
                    f"by batch {self._ring_owner[ring]}; draw a batch's overlays before "
                    f"encoding {RING} more batches"
                )
            self._cuda.memcpy_htod_async(self._palette, self._palette_host, self._stream)
            host = self._enqueue_overlay(index, ring, alpha)
            self._stream.synchronize()  # before the slot can be claimed again
        return host[..., ::-1].copy()  # RGB -> bgr8, off pinned

    def _enqueue_overlay(self, index: int, ring: int, alpha: float) -> np.ndarray:
        """Decode thread: blend slot ``index``'s instance raster over its raw frame in ring slot
        ``ring``, then one D2H copy into the pinned buffer returned."""
        cuda = self._cuda
        shape, encoding, meta, outputs = self._overlay_frames[index]
        size = (meta.src_h, meta.src_w)
        if size not in self._overlay_bufs:
            self._overlay_bufs[size] = (
                cuda.mem_alloc(3 * meta.src_h * meta.src_w),
                cuda.pagelocked_empty((*size, 3), np.uint8),
            )
        device, host = self._overlay_bufs[size]
        offsets, _ = self._post.layout(meta, outputs)
        ids_ptr = int(self._post.geometry(meta, index).arena) + offsets["instance"]
        self._overlay.enqueue_instance(
            self._stream, self._pre.device(self._pre_slot(ring, index)), shape, encoding, ids_ptr,
            int(self._palette), self._palette_rows, alpha, int(device),
        )  # fmt: skip
        cuda.memcpy_dtoh_async(host, device, self._stream)
        return host

    def lift_depth(
        self,
        result: FrameResult,
        depth_m: np.ndarray,
        colour: Intrinsics,
        depth: Intrinsics | None = None,
        options: LiftOptions | None = None,
    ) -> Instances3D | None:
        """``spatial.lift_depth`` of ``result`` on the GPU, from its instance raster still in
        the arena of the last batch (``DeviceLiftBackend``); None where ``result`` is not a frame
        of that batch inferred with ``OutputSet.instance``."""
        return self._run_decode(self._lift_depth, result, depth_m, colour, depth, options)

    def _lift_depth(
        self,
        result: FrameResult,
        depth_m: np.ndarray,
        colour: Intrinsics,
        depth: Intrinsics | None,
        options: LiftOptions | None,
    ) -> Instances3D | None:
        """Decode thread: upload the depth, lift the slot's raster by its per-frame ids, wait; the
        rows carry ``result.instances``' ids (track ids, where the Pipeline tracks)."""
        frame = self._lift_frame(result)
        if frame is None:
            return None
        raster, frame_ids = frame
        depth_ptr = self._upload_float32(depth_m)
        lifter = self._lifter()
        lifter.enqueue(
            self._stream, raster_ptr=raster, ids=frame_ids, depth_ptr=depth_ptr, colour=colour,
            depth=depth, options=options,
        )  # fmt: skip
        self._stream.synchronize()
        return replace(lifter.collect(), ids=np.asarray(result.instances.ids, np.uint16))

    def lift_cloud(
        self,
        result: FrameResult,
        xyz_camera: np.ndarray,
        colour: Intrinsics,
        options: LiftOptions | None = None,
    ) -> tuple[Instances3D, np.ndarray] | None:
        """``spatial.lift_cloud`` of ``result`` on the GPU, from its instance raster still in
        the arena of the last batch (``DeviceLiftBackend``); None as for :meth:`lift_depth`."""
        return self._run_decode(self._lift_cloud, result, xyz_camera, colour, options)

    def _lift_frame(self, result: FrameResult) -> tuple[int, np.ndarray] | None:
        """Decode thread: (device address of the instance raster, its per-frame ids) of a frame of
        the last batch that the lift kernels can take, else None."""
        from ..gpu.constants import MAX_QUERIES

        frame = next((f for f in self._lift_frames if f[0] is result), None)
        ids = result.instances.ids
        if frame is None or len(frame[4]) != len(ids) or len(ids) > MAX_QUERIES:
            return None
        _, slot, meta, outputs, frame_ids = frame
        offsets, _ = self._post.layout(meta, outputs)
        return int(self._post.geometry(meta, slot).arena) + offsets["instance"], frame_ids

    def _upload_float32(self, values: np.ndarray) -> int:
        """Decode thread: ``values`` as contiguous float32 through the pinned buffer into the lift
        input buffer (grown when needed), enqueued on the stream; its device address."""
        cuda = self._cuda
        flat = np.ascontiguousarray(values, np.float32).reshape(-1)
        if self._lift_input is None or self._lift_input[1].size < flat.size:
            self._lift_input = (
                cuda.mem_alloc(max(flat.nbytes, 4)),
                cuda.pagelocked_empty(max(flat.size, 1), np.float32),
            )
        device, pinned = self._lift_input
        pinned[: flat.size] = flat
        cuda.memcpy_htod_async(device, pinned[: flat.size], self._stream)
        return int(device)

    def _lifter(self) -> Any:
        """Decode thread: the lift kernels, loaded at the first lift (most nodes have no depth)."""
        from ..gpu.lift import GpuLift

        if self._lift is None:
            self._lift = GpuLift()
        return self._lift

    def _lift_cloud(
        self,
        result: FrameResult,
        xyz_camera: np.ndarray,
        colour: Intrinsics,
        options: LiftOptions | None,
    ) -> tuple[Instances3D, np.ndarray] | None:
        """Decode thread: upload the points, lift the slot's raster by its per-frame ids, label
        the points with ``result.instances``' ids (track ids, where the Pipeline tracks), wait."""
        frame = self._lift_frame(result)
        if frame is None:
            return None
        raster, frame_ids = frame
        ids = np.asarray(result.instances.ids, np.uint16)
        points = self._upload_float32(xyz_camera)
        lifter = self._lifter()
        lifter.enqueue_cloud(
            self._stream, raster_ptr=raster, ids=frame_ids, points_ptr=points,
            n_points=len(xyz_camera), colour=colour, point_ids=ids, options=options,
        )  # fmt: skip
        self._stream.synchronize()
        lifted, labels = lifter.collect_cloud()
        return replace(lifted, ids=ids), labels

    def describe(self) -> dict:
        """Backend, GPU, TensorRT version, batch sizes, engine cache, each engine's activation
        memory and what is allocated (per stage, its largest: the stages may run at once) and
        free/total GPU memory."""
        info: dict[str, Any] = {"backend": self.name, "tensorrt": self._trt.__version__}
        if self._closed or self._ctx is None:
            return info
        free, total = self._run(self._cuda.mem_get_info)
        info.update(
            {
                "device": self.info.name,
                "compute_capability": self.info.compute_capability,
                "precision": self.precision,
                "batch_sizes": list(self.sizes),
                "engine_cache": str(self.cache.root),
                "engine_memory_mib": {k: round(v / 2**20, 1) for k, v in self._memory.items()},
                "activation_memory_mib": round(sum(self._activation_bytes) / 2**20, 1),
                "postprocess_launch": (
                    "one CUDA graph per batch"
                    if self._post.graphs_off is None
                    else f"three kernels per frame: {self._post.graphs_off}"
                ),
                "gpu_memory_free_mib": free // 2**20,
                "gpu_memory_total_mib": total // 2**20,
            }
        )
        return info

    def _push_decode(self) -> None:
        """Decode thread: make the context current here too."""
        self._ctx.push()
        self._decode_ctx = self._ctx

    def _pop_decode(self) -> None:
        """Decode thread: pop what ``_push_decode`` pushed."""
        if getattr(self, "_decode_ctx", None) is not None:
            self._decode_ctx.pop()
            self._decode_ctx = None

    def close(self) -> None:
        """Free TensorRT objects and buffers, then pop the context, on each GPU thread."""
        if self._closed:
            return
        try:
            self._decode_executor.submit(self._pop_decode).result()
            self._executor.submit(self._teardown).result()
        finally:
            self._closed = True
            self._decode_executor.shutdown(wait=True)
            self._executor.shutdown(wait=True)

    def _teardown(self) -> None:
        """Encode thread: reverse creation order (contexts, their memory, engines, runtime), then
        the context."""
        if self._ctx is not None:
            self._before_teardown()
        if hasattr(self, "_post"):
            self._post.release_graphs()
        for name in (
            "_contexts", "_activation", "_engines", "_runtime", "_buffers", "_pre", "_post",
            "_overlay", "_palette", "_palette_host", "_overlay_bufs", "_overlay_frames",
            "_lift_frames", "_lift", "_lift_input", "_encode_events", "_decode_events",
            "_encode_stream", "_stream",
        ):  # fmt: skip
            if hasattr(self, name):
                delattr(self, name)
        if self._ctx is not None:
            self._ctx.pop()
            self._ctx = None  # dropping the last reference releases the retained context
