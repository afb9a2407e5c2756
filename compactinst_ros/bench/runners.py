"""What ``compactinst bench`` times, one runner per backend: each holds one prepared model at one
size, and ``time(iters)`` runs it ``iters`` times and returns milliseconds per run.

``onnxruntime`` and ``tensorrt`` run a bundle exported by the export module through the
runtime's own code: sessions from ``backends.ort.create_session``, engines from the engine cache
and bound by ``backends.trt.TensorRTBackend`` (its CUDA-event stage times are what is reported).
``torch-cuda`` and ``torch-cpu`` run the PyTorch model.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .models import feature_shapes, synthetic_features

if TYPE_CHECKING:
    import torch

    from ..bundle import ModelBundle

BACKEND_NAMES = ("onnxruntime", "torch-cuda", "tensorrt", "torch-cpu")
#: What a sweep times: the decoder alone, or the model (encoder + decoder).
SCOPES = ("decoder", "model")
#: The backend stage times that make up each scope.
SCOPE_STAGES = {"decoder": ("decoder",), "model": ("encoder", "decoder")}
#: Grey level of the synthetic input image (any constant frame times the same).
IMAGE_LEVEL = 120
#: Label of TensorRT-backend times that come from the CPU stand-in of the emulation tests (a
#: "device" of compute capability 0.0 whose engines run on ONNX Runtime).
STAND_IN_NOTE = "stand-in: ONNX Runtime, not TensorRT"


class Runner(Protocol):
    """One prepared inference; ``facts`` describe the runtime and device it runs on."""

    facts: dict[str, Any]

    def time(self, iters: int) -> float:
        """Mean wall (CPU) or device (CUDA events) milliseconds per run."""
        ...

    def close(self) -> None:
        """Release sessions, engines or graphs."""
        ...


@dataclass
class WallRunner:
    """Times a synchronous callable with ``time.perf_counter``."""

    fn: Callable[[], object]
    facts: dict[str, Any] = field(default_factory=dict)

    def time(self, iters: int) -> float:
        """Mean milliseconds per call."""
        start = time.perf_counter()
        for _ in range(iters):
            self.fn()
        return (time.perf_counter() - start) * 1e3 / iters

    def close(self) -> None:
        """Nothing to release (the callable's objects go with it)."""


def backend_status(name: str) -> str | None:
    """None when backend ``name`` can run here, else why not (and how to get it)."""
    if name == "onnxruntime":
        return None if importlib.util.find_spec("onnxruntime") else "onnxruntime not installed"
    if name == "torch-cpu":
        return None
    if name == "tensorrt":
        from ..backends.trt_build import import_pycuda, import_tensorrt

        try:
            import_tensorrt()
            import_pycuda()
        except Exception as exc:  # BackendError, or pycuda's driver error where no GPU is
            return str(exc)
        return None
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device (needs an NVIDIA GPU and a CUDA build of torch)"
    return None


def ort_runner(bundle: ModelBundle, scope: str, threads: int) -> WallRunner:
    """ONNX Runtime (CPU) sessions of the bundle's stages, fed preallocated inputs: N(0, 1)
    pixel-decoder maps for the decoder, a grey image for the model (encoder then decoder)."""
    import onnxruntime

    from ..backends.ort import create_session

    encoder, decoder = bundle.stage("encoder"), bundle.stage("decoder")
    facts = {"onnxruntime": onnxruntime.__version__, "threads": threads}
    decoder_session = create_session(decoder.path, threads)
    rng = np.random.default_rng(0)
    features = {
        t.name: rng.standard_normal(t.shape).astype(np.dtype(t.dtype)) for t in decoder.inputs
    }
    if scope == "decoder":
        return WallRunner(lambda: decoder_session.run(None, features), facts)
    encoder_session = create_session(encoder.path, threads)
    image = {t.name: np.full(t.shape, IMAGE_LEVEL, np.dtype(t.dtype)) for t in encoder.inputs}
    names = [t.name for t in encoder.outputs]

    def model_level() -> object:
        maps = encoder_session.run(names, image)
        return decoder_session.run(None, dict(zip(names, maps, strict=True)))

    return WallRunner(model_level, facts)


class TensorRTRunner:
    """The runtime's TensorRT backend on a grey frame of the bundle's input size; a run's time is
    the sum of the scope's CUDA-event stage times (the decoder's input is the encoder's output
    on the device, as in deployment). Engines come from ``engine_cache`` (the backend's default
    cache when None), built there on first use."""

    def __init__(self, bundle: ModelBundle, scope: str, engine_cache: Path | None) -> None:
        from ..backends.base import BackendOptions
        from ..backends.trt import TensorRTBackend
        from ..structures import BatchItem, FrameMeta, OutputSet, PostprocessOptions

        self.backend = TensorRTBackend(bundle, BackendOptions(engine_cache_dir=engine_cache))
        self.facts = self.backend.describe()
        if self.facts.get("compute_capability") == "0.0":  # no CUDA GPU has it
            self.facts["note"] = STAND_IN_NOTE
        self.stages = SCOPE_STAGES[scope]
        h, w = bundle.input_h, bundle.input_w
        frame = np.full((h, w, 3), IMAGE_LEVEL, np.uint8)
        outputs = OutputSet(instance=False, panoptic=False, semantic=False)
        self.item = BatchItem(frame, "rgb8", FrameMeta.letterbox(h, w, h, w), outputs)
        self.options = PostprocessOptions()

    def time(self, iters: int) -> float:
        """Mean device milliseconds per run of the scope's stages."""
        total = 0.0
        for _ in range(iters):
            result = self.backend.infer_batch([self.item], self.options)[0]
            total += sum(result.timings_ms[s] for s in self.stages)
        return total / iters

    def close(self) -> None:
        """Free the engines, buffers and the GPU thread."""
        self.backend.close()


class CudaGraphRunner:
    """Captures ``fn`` on static CUDA inputs once and times graph replays with CUDA events.

    Falls back to eager launches (``graphed`` = False) when the model cannot be captured.
    """

    def __init__(self, fn: Callable[[], object]) -> None:
        import torch

        self.fn = fn
        self.graph = None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        try:
            # A host sync (e.g. a pageable host->device copy in forward) would break the
            # capture and can leave CUDA in a bad state: probe for one first.
            torch.cuda.set_sync_debug_mode("error")
            with torch.no_grad():
                fn()
            torch.cuda.set_sync_debug_mode("default")
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph):
                fn()
            self.graph = graph
        except RuntimeError as exc:
            print(
                f"  not capturable as a CUDA graph ({str(exc).splitlines()[0]}); timing "
                "eager launches",
                flush=True,
            )
            with contextlib.suppress(RuntimeError):
                torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        self.graphed = self.graph is not None
        self.facts = {
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0),
            "cuda_graph": self.graphed,
        }

    def time(self, iters: int) -> float:
        """Mean device milliseconds per run between two CUDA events."""
        import torch

        step = self.graph.replay if self.graph is not None else self.fn
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.no_grad():
            start.record()
            for _ in range(iters):
                step()
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters

    def close(self) -> None:
        """Drop the captured graph."""
        self.graph = None


def torch_runner(model: torch.nn.Module, scope: str, size: tuple[int, int], device: str) -> Runner:
    """PyTorch runner: FP16 + CUDA graph on ``cuda``, FP32 eager on ``cpu``."""
    import torch

    dtype = torch.float16 if device == "cuda" else torch.float32
    model = model.to(device=device, dtype=dtype)
    torch.backends.cudnn.benchmark = device == "cuda"  # static shapes: pick the fastest convs
    if scope == "decoder":
        feats = {
            n: t.to(device=device, dtype=dtype)
            for n, t in synthetic_features(feature_shapes(model, *size)).items()
        }

        def fn() -> object:
            return model.decode(feats)
    else:
        image = torch.full((1, 3, *size), float(IMAGE_LEVEL), device=device, dtype=dtype)

        def fn() -> object:
            return model(image)

    if device == "cuda":
        return CudaGraphRunner(fn)

    def eager() -> object:
        with torch.no_grad():
            return fn()

    return WallRunner(eager, {"torch": torch.__version__, "device": "cpu"})
