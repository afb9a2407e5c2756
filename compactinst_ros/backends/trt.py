"""TensorRT + pycuda backend: the whole frame stays on the GPU, one synchronisation per frame.

Threading: the backend owns one GPU thread. It retains the device's primary context and pushes
it in that thread; engines, buffers, streams and events are created there at construction (node
configure time, which is also when missing engines are built), every ``infer`` runs there, and
``close`` frees everything there before popping the context. Callers on any thread (an rclpy
executor may hop threads) hand frames over and wait for the result.

Per frame, on one stream: pinned upload of the raw image -> preprocessing kernel -> encoder
engine -> decoder engine (inputs bound to the encoder's output buffers) -> fused
post-processing -> device-to-host copies; CUDA events between the stages give the stage times;
the host waits once, on the last (blocking-sync) event. With ``OutputSet.overlay`` the raw frame
and the instance raster stay on the device for ``render_overlay``: once the Pipeline knows each
instance's track id it uploads the per-frame-id colour table (a few hundred bytes) and the
overlay kernel blends, a second short wait per frame.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendError
from ..private_files import default_cache_dir
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

    from ..bundle import ModelBundle
    from ..structures import BatchItem, FrameMeta, FrameResult, OutputSet, PostprocessOptions

#: Stage-time keys reported per frame, as the CPU backend's.
TIMED_STAGES = ("preprocess", "encoder", "decoder", "postprocess")


class TensorRTBackend:
    """Backend protocol implementation on strongly typed TensorRT 10.3+ engines and pycuda."""

    name = "tensorrt"

    def __init__(self, bundle: ModelBundle, options: BackendOptions | None = None) -> None:
        """Load (or build) the engines on the GPU thread, as ``options`` (None = defaults) say."""
        options = options or BackendOptions()
        self._trt = import_tensorrt()
        self._cuda = import_pycuda()
        self.bundle = bundle
        self.device = options.device
        self.cache = EngineCache(options.engine_cache_dir or default_cache_dir())
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactinst-gpu")
        self._ctx: Any = None
        self._closed = False
        try:
            self._run(
                self._setup,
                options.allow_build,
                options.build_options or BuildOptions(),
                options.precision,
            )
        except BaseException:
            self.close()
            raise

    # -- thread plumbing ------------------------------------------------------------------
    def _run(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            raise BackendError("the TensorRT backend is closed; create a new one")
        return self._executor.submit(fn, *args).result()

    def _setup(self, allow_build: bool, options: BuildOptions, precision: str | None) -> None:
        """GPU thread: context, engines (built from the ``precision`` typed graphs), buffers,
        kernels, stream and events."""
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
        engines = ensure_engines(
            self.bundle,
            self.cache,
            self._runtime.deserialize_cuda_engine,
            self.info,
            self.precision,
            allow_build,
            options,
        )
        self._engines = [engines[s.name] for s in self.bundle.stages]
        self._contexts = [e.create_execution_context() for e in self._engines]
        self._buffers: dict[str, Any] = {}
        for engine, context in zip(self._engines, self._contexts, strict=True):
            self._bind(engine, context)
        image = self.bundle.stages[0].inputs[0].name
        self._image_ptr = int(self._buffers[image][0])
        logits_ptr, masks_ptr = (int(self._buffers[n][0]) for n in ("pred_logits", "pred_masks"))
        self._logits_ptr, self._masks_ptr = logits_ptr, masks_ptr
        q, mask_h, mask_w = self._buffers["pred_masks"][1][-3:]
        self._pre = GpuPreprocessor(self.bundle.pad_value)
        self._post = GpuPostprocessor(
            self.bundle.labels, q, mask_h, mask_w, self.bundle.mask_stride
        )
        self._overlay = GpuOverlay()
        self._palette_rows = MAX_QUERIES + 1  # per-frame instance ids are 1..number of queries
        self._palette_host = cuda.pagelocked_empty((self._palette_rows, 3), np.uint8)
        self._palette = cuda.to_device(palette(self._palette_rows))  # RGB row per instance id
        self._overlay_buf: tuple[tuple[int, int], Any, np.ndarray] | None = None
        self._overlay_frame: tuple[tuple[int, ...], str, FrameMeta, OutputSet] | None = None
        self._stream = cuda.Stream()
        self._events = [cuda.Event() for _ in TIMED_STAGES] + [
            cuda.Event(cuda.event_flags.BLOCKING_SYNC)
        ]

    def _bind(self, engine: Any, context: Any) -> None:
        """Allocate (or reuse, for an earlier stage's output) a device buffer per I/O tensor."""
        trt, cuda = self._trt, self._cuda
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            shape = tuple(context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            if any(d < 0 for d in shape):
                raise BackendError(
                    f"engine tensor '{name}' has dynamic shape {shape}; rebuild from a bundle "
                    "exported with static shapes"
                )
            if name in self._buffers:
                _, known_shape, known_dtype = self._buffers[name]
                if (known_shape, known_dtype) != (shape, dtype):
                    raise BackendError(
                        f"tensor '{name}' is {known_shape} {known_dtype} where produced but "
                        f"{shape} {dtype} where consumed; re-export the bundle"
                    )
            else:
                if name in ("image", "pred_logits", "pred_masks") and dtype != np.float32:
                    raise BackendError(
                        f"engine tensor '{name}' is {dtype}; the GPU path needs FP32 I/O "
                        "(build without I/O precision overrides)"
                    )
                nbytes = int(np.prod(shape)) * dtype.itemsize
                self._buffers[name] = (cuda.mem_alloc(max(1, nbytes)), shape, dtype)
            context.set_tensor_address(name, int(self._buffers[name][0]))

    # -- Backend protocol -------------------------------------------------------------------
    def infer_batch(
        self, items: Sequence[BatchItem], options: PostprocessOptions
    ) -> list[FrameResult]:
        """Run validated frames on the GPU thread; stage times come from CUDA events."""
        self.batch_slots(len(items))
        item = items[0]
        return [
            self._run(self._infer, item.image, item.encoding, item.meta, options, item.outputs)
        ]

    def batch_slots(self, frames: int) -> int:
        """Engines are built for batch 1."""
        if frames != 1:
            raise BackendError(f"the TensorRT engines run one frame at a time, not {frames}")
        return 1

    def _infer(
        self,
        image: np.ndarray,
        encoding: str,
        meta: FrameMeta,
        options: PostprocessOptions,
        outputs: OutputSet,
    ) -> FrameResult:
        stream, ev = self._stream, self._events
        start = time.perf_counter()
        ev[0].record(stream)
        self._pre.enqueue(stream, image, encoding, meta, self._image_ptr)
        ev[1].record(stream)
        for stage, context, event in zip(self.bundle.stages, self._contexts, ev[2:4], strict=True):
            if not context.execute_async_v3(stream.handle):
                raise BackendError(f"TensorRT failed to enqueue stage '{stage.name}'")
            event.record(stream)
        self._post.enqueue(stream, self._logits_ptr, self._masks_ptr, meta, options, outputs)
        self._overlay_frame = (image.shape, encoding, meta, outputs) if outputs.overlay else None
        ev[4].record(stream)
        enqueue_ms = (time.perf_counter() - start) * 1e3
        ev[4].synchronize()
        result = self._post.collect(meta, outputs)
        result.timings_ms.update(
            {name: ev[i].time_till(ev[i + 1]) for i, name in enumerate(TIMED_STAGES)}
        )
        result.timings_ms["enqueue"] = enqueue_ms
        return result

    def render_overlay(self, colours: np.ndarray, alpha: float, index: int = 0) -> np.ndarray:
        """The last frame's overlay rendered on the GPU in ``colours`` (RGB row per per-frame
        instance id), bgr8; BackendError unless that frame was inferred with the overlay."""
        return self._run(self._render_overlay, colours, alpha)

    def _render_overlay(self, colours: np.ndarray, alpha: float) -> np.ndarray:
        """GPU thread: upload the colour table, blend, copy back, wait."""
        if self._overlay_frame is None:
            raise BackendError(
                "render_overlay needs the frame on the device: infer it with "
                "OutputSet(overlay=True) first"
            )
        rows = min(len(colours), self._palette_rows)
        self._palette_host[:] = 0
        self._palette_host[:rows] = colours[:rows]
        self._cuda.memcpy_htod_async(self._palette, self._palette_host, self._stream)
        shape, encoding, meta, outputs = self._overlay_frame
        self._enqueue_overlay(shape, encoding, meta, outputs, alpha)
        self._stream.synchronize()
        return self._overlay_buf[2][..., ::-1].copy()  # RGB -> bgr8, off pinned

    def _enqueue_overlay(
        self,
        shape: tuple[int, ...],
        encoding: str,
        meta: FrameMeta,
        outputs: OutputSet,
        alpha: float,
    ) -> None:
        """GPU thread: blend the instance raster over the uploaded raw frame, then one D2H copy."""
        cuda = self._cuda
        size = (meta.src_h, meta.src_w)
        if self._overlay_buf is None or self._overlay_buf[0] != size:
            self._overlay_buf = (
                size,
                cuda.mem_alloc(3 * meta.src_h * meta.src_w),
                cuda.pagelocked_empty((*size, 3), np.uint8),
            )
        _, device, host = self._overlay_buf
        offsets, _ = self._post.layout(meta, outputs)
        ids_ptr = int(self._post.geometry(meta).arena) + offsets["instance"]
        self._overlay.enqueue_instance(
            self._stream, int(self._pre.device), shape, encoding, ids_ptr,
            int(self._palette), self._palette_rows, alpha, int(device),
        )  # fmt: skip
        cuda.memcpy_dtoh_async(host, device, self._stream)

    def describe(self) -> dict:
        """Backend, GPU, TensorRT version, engine cache and free/total GPU memory."""
        info: dict[str, Any] = {"backend": self.name, "tensorrt": self._trt.__version__}
        if self._closed or self._ctx is None:
            return info
        free, total = self._run(self._cuda.mem_get_info)
        info.update(
            {
                "device": self.info.name,
                "compute_capability": self.info.compute_capability,
                "precision": self.precision,
                "engine_cache": str(self.cache.root),
                "gpu_memory_free_mib": free // 2**20,
                "gpu_memory_total_mib": total // 2**20,
            }
        )
        return info

    def close(self) -> None:
        """Free TensorRT objects and buffers, then pop the context, all on the GPU thread."""
        if self._closed:
            return
        try:
            self._executor.submit(self._teardown).result()
        finally:
            self._closed = True
            self._executor.shutdown(wait=True)

    def _teardown(self) -> None:
        """GPU thread: reverse creation order (contexts, engines, runtime), then the context."""
        for name in (
            "_contexts", "_engines", "_runtime", "_buffers", "_pre", "_post",
            "_overlay", "_palette", "_palette_host", "_overlay_buf", "_overlay_frame", "_events",
        ):  # fmt: skip
            if hasattr(self, name):
                delattr(self, name)
        if hasattr(self, "_stream"):
            del self._stream
        if self._ctx is not None:
            self._ctx.pop()
            self._ctx = None  # dropping the last reference releases the retained context
