"""ONNX Runtime backend (CPU): letterbox -> encoder.onnx -> decoder.onnx -> numpy post-processing.

Sessions are created once per backend. The encoder's outputs are fed to the decoder by name, so
the bundle's stage I/O names are the only contract between the two graphs. A batch runs in two
halves (``encode_batch``, ``decode_batch``: a ``StagedBackend``), so a caller with two threads
can run the next batch's encoder while this one is decoded and post-processed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bundle import DECODER_OUTPUTS, ModelBundle
from ..errors import BackendError
from ..jit import compile_lock
from ..postprocess import compiled
from ..postprocess.fast import fast_postprocess
from ..preprocess import letterbox
from ..structures import (
    BatchItem,
    FrameMeta,
    FrameResult,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)
from .base import BackendOptions

if TYPE_CHECKING:
    import onnxruntime

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)


def _import_ort() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise BackendError(
            f"onnxruntime is not installed ({exc}); pip install onnxruntime, or use the "
            "tensorrt backend"
        ) from None
    return onnxruntime


def create_session(
    path: str | Path | bytes,
    threads: int | None = None,
    providers: list[str] | tuple[str, ...] | None = None,
    optimize: bool = True,
) -> onnxruntime.InferenceSession:
    """One ONNX Runtime session for ``path`` (a file, or a graph's bytes); BackendError names the
    file and the cause.

    ``optimize=False`` runs the graph exactly as exported (no fusions), for parity checks.
    Full optimisation keeps the convolutions on ONNX Runtime's blocked-layout (NCHWc) kernels,
    the fastest on both stages (docs/benchmarks.md, "CPU path"). Pool threads spin between the
    operators of a run but stop when it returns (``session.force_spinning_stop``): the stages,
    post-processing and ROS callbacks run one after another, and workers spinning on after a run
    took the cores those need (the decoder and post-processing got 1.5-2x slower on 2 loaded
    cores), while waking sleeping workers for every operator cost 5-10 % of a 1080p frame.
    """
    ort = _import_ort()
    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    # Errors only: the FP16 graphs make the optimiser warn per session that it cannot constant
    # fold a Pow on the CPU, a line per session in every command's output that asks nothing.
    options.log_severity_level = 3
    if threads is not None:
        if threads < 1:
            raise BackendError(f"threads={threads} must be >= 1 (or None for all cores)")
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(
            path if isinstance(path, bytes) else str(path),
            sess_options=options, providers=list(providers or DEFAULT_PROVIDERS)
        )
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise BackendError(
            f"ONNX Runtime cannot load {'a graph' if isinstance(path, bytes) else path}: "
            f"{exc}; re-export the bundle with "
            "'compactinst export'"
        ) from None


#: numpy type of each ONNX Runtime input type a stage's image may have
IMAGE_TYPES = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16)}


def image_type(session: Any, name: str) -> np.dtype:
    """The numpy type ``session``'s image input ``name`` takes: float32, or float16 for an FP16
    graph (``variants.half_image_input``); BackendError for any other."""
    port = next(p for p in session.get_inputs() if p.name == name)
    if port.type not in IMAGE_TYPES:
        raise BackendError(
            f"the image input '{name}' is {port.type}; a stage graph takes it as float or "
            "float16: re-export the bundle with 'compactinst export'"
        )
    return IMAGE_TYPES[port.type]


def image_feed(session: Any, name: str, image: np.ndarray) -> dict[str, np.ndarray]:
    """``session``'s feed of ``image`` (float32) at its input ``name``, in the input's type
    (``image_type``). Numpy rounds to half to nearest even, as the Cast an FP16 graph had at its
    input did, so the outputs are the same bits as with a float input."""
    return {name: image.astype(image_type(session, name), copy=False)}


#: the INT8 graph the CPU runs: u8 activations with s8 weights (x86 VNNI kernels); the symmetric
#: s8 TensorRT graph runs on request (``BackendOptions.int8_graph``), e.g. to measure it
DEFAULT_INT8_GRAPH = "cpu"


@dataclass
class EncodedBatch:
    """A batch between the two halves: its frames, the encoder's features, the halves' times."""

    items: list[BatchItem]
    features: list[np.ndarray]
    timings_ms: dict[str, float]


class OrtBackend:
    """The Backend protocol on ONNX Runtime; CPU by default, any ORT providers on request."""

    name = "onnxruntime"
    #: the INT8 graph ``precision="int8"`` runs unless ``BackendOptions.int8_graph`` names one
    default_int8_graph = DEFAULT_INT8_GRAPH

    def __init__(self, bundle: ModelBundle, options: BackendOptions | None = None) -> None:
        """Open both stage sessions (``options.threads``, ``providers`` and ``precision``'s
        graphs; None = defaults: fp32)."""
        self.bundle = bundle
        options = options or BackendOptions()
        self.threads = options.threads
        self.precision = options.precision or "fp32"
        self.int8_graph = options.int8_graph or self.default_int8_graph
        self.batch_sizes = tuple(sorted(options.batch_sizes)) if options.batch_sizes else None
        self._runtime = self._import_runtime()
        encoder, decoder = bundle.stage("encoder"), bundle.stage("decoder")
        graphs = [
            bundle.stage_graph(s.name, self.precision, self.int8_graph).model_bytes
            if self.precision != "fp32"
            else s.path
            for s in (encoder, decoder)
        ]
        fused = self.precision != "int8" or _runs_fused(self.precision, self.int8_graph)
        self._encoder = self._open_stage(graphs[0], options, fused)
        self._decoder = self._open_stage(graphs[1], options, fused)
        image_inputs = _check_names(self._encoder, encoder.path, [t.name for t in encoder.inputs])
        if len(image_inputs) != 1:
            raise BackendError(f"{encoder.path} must have exactly one input (the image)")
        self._image_input = image_inputs[0]
        self._image_type = image_type(self._encoder, self._image_input)
        self._providers = list(self._encoder.get_providers())
        self._feature_names = [o.name for o in self._encoder.get_outputs()]
        _check_names(self._decoder, decoder.path, self._feature_names)
        decoder_outputs = {o.name for o in self._decoder.get_outputs()}
        missing = [n for n in DECODER_OUTPUTS if n not in decoder_outputs]
        if missing:
            raise BackendError(
                f"{decoder.path} lacks outputs {missing}; re-export the bundle with "
                "'compactinst export'"
            )
        self._warm_up_postprocess()

    def _import_runtime(self) -> Any:
        """The runtime module (its version goes into ``describe``)."""
        return _import_ort()

    def _open_stage(self, graph: Path | bytes, options: BackendOptions, fused: bool) -> Any:
        """One stage's session: ``run(names, feed)``, ``get_inputs()``, ``get_outputs()``,
        ``get_providers()``."""
        return create_session(graph, options.threads, options.providers, fused)

    def _warm_up_postprocess(self) -> None:
        """Compile the post-processing loops (or load them from numba's cache) on the bundle's
        first golden case, so that the first camera frame does not wait seconds for it."""
        cases = self.bundle.golden_cases()
        if not compiled.AVAILABLE or not cases:
            return
        logits, masks = (cases[0].outputs[name][0] for name in DECODER_OUTPUTS)
        h, w = self.bundle.input_h, self.bundle.input_w
        with compile_lock():
            fast_postprocess(
                RawOutputs(logits, masks, self.bundle.mask_stride),
                FrameMeta.letterbox(h, w, h, w),
                self.bundle.labels,
                PostprocessOptions(),
                OutputSet(),
            )

    def infer_batch(
        self, items: Sequence[BatchItem], options: PostprocessOptions
    ) -> list[FrameResult]:
        """Both halves on this thread: ``decode_batch(encode_batch(items))``."""
        return self.decode_batch(self.encode_batch(items), options)

    def encode_batch(self, items: Sequence[BatchItem]) -> EncodedBatch:
        """Letterbox every frame into one (n, 3, H, W) tensor (padded to ``batch_slots``) and run
        the encoder once on it."""
        t0 = time.perf_counter()
        slots = self.batch_slots(len(items))
        h, w = self.bundle.input_h, self.bundle.input_w
        tensor = np.empty((slots, 3, h, w), np.float32)
        for i, item in enumerate(items):
            letterbox(item.image, item.encoding, item.meta, self.bundle.pad_value, out=tensor[i])
        tensor[len(items) :] = tensor[0]  # padding: a real frame, so no slot sees odd values
        t1 = time.perf_counter()
        features = self.run_encoder(tensor)
        t2 = time.perf_counter()
        timings = {"preprocess": (t1 - t0) * 1e3, "encoder": (t2 - t1) * 1e3}
        return EncodedBatch(list(items), features, timings)

    def decode_batch(self, encoded: EncodedBatch, options: PostprocessOptions) -> list[FrameResult]:
        """Run the decoder once on the batch's features, then the tiled numpy post-processing per
        frame (bit-identical to the reference, ``postprocess/fast.py``)."""
        t0 = time.perf_counter()
        raws = self.run_decoder(encoded.features)
        t1 = time.perf_counter()
        results = [
            fast_postprocess(raw, item.meta, self.bundle.labels, options, item.outputs)
            for raw, item in zip(raws, encoded.items, strict=False)  # padding slots are left out
        ]
        t2 = time.perf_counter()
        timings = {
            **encoded.timings_ms,
            "decoder": (t1 - t0) * 1e3,
            "postprocess": (t2 - t1) * 1e3,
        }
        for result in results:
            result.timings_ms.update(timings)
        return results

    def batch_slots(self, frames: int) -> int:
        """``frames`` itself (the graphs' batch axis takes any size), or the smallest of
        ``batch_sizes`` that holds them."""
        if frames > 1 and not self.bundle.batched:
            raise BackendError(
                f"bundle {self.bundle.root} was exported with a fixed batch of 1, so "
                f"{frames} frames cannot run at once; re-export it with 'compactinst export'"
            )
        if self.batch_sizes is None:
            return frames
        fitting = [b for b in self.batch_sizes if b >= frames]
        if not fitting:
            raise BackendError(
                f"a batch of {frames} frames exceeds batch_sizes {list(self.batch_sizes)}; "
                "add a larger size or run fewer cameras per node"
            )
        return min(fitting)

    def render_overlay(self, colours: np.ndarray, alpha: float, index: int = 0) -> None:
        """No device to render on: the Pipeline draws the overlay on the CPU."""
        return None

    def run_encoder(self, tensor: np.ndarray) -> list[np.ndarray]:
        """Encoder stage: an (n, 3, H, W) float32 input -> the features, in output-name order
        (an FP16 graph's image is rounded to half first, as ``image_feed`` says)."""
        if self._encoder is None:
            raise BackendError(f"the {self.name} backend was closed; create a new Pipeline")
        image = tensor.astype(self._image_type, copy=False)
        return self._encoder.run(self._feature_names, {self._image_input: image})

    def run_decoder(self, features: list[np.ndarray]) -> list[RawOutputs]:
        """Decoder stage: the encoder's features -> class and mask logits, one per frame."""
        if self._decoder is None:
            raise BackendError(f"the {self.name} backend was closed; create a new Pipeline")
        feed = dict(zip(self._feature_names, features, strict=True))
        logits, masks = self._decoder.run(list(DECODER_OUTPUTS), feed)
        stride = self.bundle.mask_stride
        return [RawOutputs(lg, mk, stride) for lg, mk in zip(logits, masks, strict=True)]

    def describe(self) -> dict:
        """Backend name, onnxruntime version, providers and device."""
        providers = self._providers  # kept from construction: valid after close() too
        return {
            "backend": self.name,
            "onnxruntime_version": self._runtime.__version__,
            "providers": providers,
            "threads": self.threads,
            "device": "cuda" if "CUDAExecutionProvider" in providers else "cpu",
            "precision": self.precision,
            **({"int8_graph": self.int8_graph} if self.precision == "int8" else {}),
        }

    def close(self) -> None:
        """Drop the sessions (ONNX Runtime frees them when unreferenced)."""
        self._encoder = None  # type: ignore[assignment]
        self._decoder = None  # type: ignore[assignment]


def _runs_fused(precision: str, int8_graph: str) -> bool:
    """``variants.runs_fused``, imported only where an INT8 graph is asked for (it needs onnx)."""
    from ..variants import runs_fused

    return runs_fused(precision, int8_graph)


def _check_names(session: Any, path: Path, expected: list[str]) -> list[str]:
    """The session's input names; BackendError unless they are ``expected`` (order-free)."""
    names = [i.name for i in session.get_inputs()]
    if sorted(names) != sorted(expected):
        raise BackendError(
            f"{path} inputs {names} do not match {expected} from the bundle/encoder; "
            "the stage files come from different exports — re-export the bundle"
        )
    return names
