"""``compactinst build-engine BUNDLE``: strongly typed TensorRT engines, one per stage, cached per
device and checked against the bundle's golden outputs before they are cached.

One builder for TensorRT 10.3 (JetPack 6.1/6.2), later 10.x and 11.x: every network is created
``STRONGLY_TYPED`` from the bundle's typed graph of the chosen precision
(``ModelBundle.stage_graph``), so TensorRT runs the types written in the ONNX (FP16 tensors with
their FP32 islands, INT8 only at Q/DQ nodes) and no weak-typing flag or per-layer precision is
set; TF32 is cleared so that FP32 tensors are FP32. Static shapes: a graph with the batch axis
gets one engine per batch size b, built with ONE optimization profile whose min = opt = max is
(b, ...) for every input (docs/gpu.md, Batches); a graph without it builds batch 1 as it always
did. A persistent timing cache per device module, a progress display, and the acceptance check
(acceptance.py, at the engine's batch size) on every new engine. tensorrt and pycuda are
imported inside functions so the CPU path never needs them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle import ModelBundle, StageGraph, StageSpec
from ..errors import BackendError
from ..private_files import read_private, write_private
from . import acceptance
from .base import BuildOptions
from .engine_cache import DeviceInfo, EngineCache, EngineKey

MIN_TRT_MAJOR = 10
#: Precision of ``BackendOptions.precision=None`` where the bundle carries its typed graphs.
DEFAULT_PRECISION = "fp16"
LOG_PROGRESS_S = 5.0  # seconds between progress lines when stderr is not a terminal
def import_tensorrt(cpu_setting: str | None = None) -> Any:
    """The tensorrt module, TensorRT >= 10; BackendError with the install hint otherwise.
    ``cpu_setting``: how whoever runs the model chooses the CPU backend, as the hint's
    alternative (``backend:=onnxruntime`` in the node, ``--backend onnxruntime`` in a command;
    None for build-engine, which has no use for the CPU)."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        cpu = f"; or run on the CPU with {cpu_setting}" if cpu_setting else ""
        raise BackendError(
            f"TensorRT Python bindings are not importable ({exc}). On a Jetson (JetPack "
            "6.1/6.2) they come with 'sudo apt install python3-libnvinfer' into the system "
            "Python: run with the system python3 and install the rest with its pip3 (README, "
            "On the vehicle); on an x86 GPU machine 'pip install tensorrt'" + cpu
        ) from None
    major = int(str(trt.__version__).split(".")[0])
    if major < MIN_TRT_MAJOR:
        raise BackendError(
            f"TensorRT {trt.__version__} is too old: TensorRT >= {MIN_TRT_MAJOR} is required "
            "(named tensors, strongly typed networks). JetPack 6.0 ships TensorRT 8.6: upgrade "
            "the Jetson to JetPack 6.1 or later (6.1/6.2 ship TensorRT 10.3)"
        )
    return trt


def import_pycuda() -> Any:
    """pycuda.driver, initialised; BackendError with the install hint otherwise."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise BackendError(
            f"pycuda is not importable ({exc}); install it with 'pip install pycuda' (needs "
            "nvcc and the CUDA headers on PATH), or use the onnxruntime backend"
        ) from None
    cuda.init()
    return cuda


def device_info(device: int = 0) -> DeviceInfo:
    """Name, compute capability, SM count, memory and CUDA driver of device ``device`` (no
    context needed): name and compute capability alone do not tell the Orin modules apart."""
    cuda = import_pycuda()
    if device >= cuda.Device.count():
        raise BackendError(f"CUDA device {device} does not exist ({cuda.Device.count()} found)")
    dev = cuda.Device(device)
    major, minor = dev.compute_capability()
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    return DeviceInfo(
        name=dev.name(),
        compute_capability=f"{major}.{minor}",
        sm_count=int(sms),
        memory_mib=int(dev.total_memory()) // 2**20,
        cuda_driver=int(cuda.get_driver_version()),
    )


@contextmanager
def current_device(cuda: Any, device: int) -> Iterator[Any]:
    """Device ``device``'s primary context made current for the block (TensorRT builds and
    runs on the current context), popped afterwards."""
    context = cuda.Device(device).retain_primary_context()
    context.push()
    try:
        yield context
    finally:
        context.pop()


def engine_precision(
    bundle: ModelBundle, requested: str | None, log: Callable[[str], None] = print
) -> str:
    """The precision to build: ``requested``, or DEFAULT_PRECISION where the bundle carries its
    graphs, else fp32 (said in the log: a bundle without typed graphs has no FP16 to build)."""
    if requested is not None:
        return requested
    if DEFAULT_PRECISION in bundle.precisions:
        return DEFAULT_PRECISION
    log(
        f"bundle {bundle.root} has no {DEFAULT_PRECISION} graphs, so the TensorRT engines are "
        f"fp32; add typed graphs with 'compactinst quantize' for {DEFAULT_PRECISION} engines"
    )
    return "fp32"


def engine_key(
    graph: StageGraph,
    stage: StageSpec,
    trt_version: str,
    device: DeviceInfo,
    options: BuildOptions,
    batch: int = 1,
) -> EngineKey:
    """Cache key of ``stage`` built from ``graph`` for ``batch`` frames: the typed graph's sha256
    and precision, the input shapes at that batch (dim 0), the TensorRT version, the device
    module and the build options."""
    return EngineKey(
        stage=stage.name,
        onnx_sha256=graph.sha256,
        trt_version=str(trt_version),
        gpu_name=device.name,
        compute_capability=device.compute_capability,
        sm_count=device.sm_count,
        precision=graph.precision,
        input_shapes={t.name: list(t.batch_shape(batch)) for t in stage.inputs},
        options=options.key_options(),
        gpu_memory_mib=device.memory_mib,
        cuda_driver=device.cuda_driver,
    )


def _batch_profile(
    builder: Any, network: Any, stage: StageSpec, batch: int, where: str
) -> Any:
    """The one optimization profile of a batch-axis network: min = opt = max = the input's
    shape at ``batch``; None for a network with static inputs (built as before the axis).
    BackendError for any other dynamic dim (one engine per input size)."""
    specs = {t.name: t for t in stage.inputs}
    profile = None
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = tuple(tensor.shape)
        spec = specs.get(tensor.name)
        if not any(d < 0 for d in dims):
            continue
        if spec is None or not spec.batched or any(d < 0 for d in dims[1:]):
            raise BackendError(
                f"{where}: input '{tensor.name}' has dynamic shape {dims}; only the batch axis "
                "(dim 0) may be dynamic: export the bundle with static frame shapes"
            )
        shape = spec.batch_shape(batch)
        profile = profile or builder.create_optimization_profile()
        profile.set_shape(tensor.name, shape, shape, shape)
    return profile


def _progress_monitor(trt: Any, label: str, stream: Any = None) -> Any:
    """An IProgressMonitor showing builder phases and steps on ``stream`` (stderr): one line
    rewritten in place on a terminal; in a log (the node building at start) a line per top-level
    phase and at most one progress line every LOG_PROGRESS_S seconds."""
    out = stream or sys.stderr
    tty = out.isatty()

    class Monitor(trt.IProgressMonitor):
        """TensorRT calls these from its builder threads; output is serialised by a lock."""

        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._lock = threading.Lock()
            self._steps: dict[str, int] = {}
            self._start = self._last_line = time.monotonic()

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            """A builder phase began; top-level phases get a line of their own."""
            with self._lock:
                self._steps[phase_name] = num_steps
                if parent_phase is None:
                    out.write(f"[{label}] {phase_name} ({num_steps} steps)\n")
                    out.flush()

        def step_complete(self, phase_name: str, step: int) -> bool:
            """One step done: show it; True lets the build continue."""
            with self._lock:
                total = self._steps.get(phase_name, 0)
                now = time.monotonic()
                text = f"[{label}] {phase_name}: {step + 1}/{total}  {now - self._start:5.0f} s"
                if tty:
                    out.write(f"\r{text}")
                elif now - self._last_line >= LOG_PROGRESS_S:
                    out.write(f"{text}\n")
                    self._last_line = now
                out.flush()
            return True

        def phase_finish(self, phase_name: str) -> None:
            """A phase ended; end the progress line when no phase is open."""
            with self._lock:
                self._steps.pop(phase_name, None)
                if not self._steps:
                    elapsed = time.monotonic() - self._start
                    out.write("\n" if tty else f"[{label}] built in {elapsed:.0f} s\n")
                    out.flush()

    return Monitor()


def _open_timing_cache(config: Any, path: Path, label: str) -> None:
    """Give the build the timing cache at ``path``; one TensorRT rejects (written on another
    device or TensorRT build) is moved aside to ``<path>.rejected`` and the build starts from an
    empty cache, instead of failing now or after the build."""
    blob = read_private(path) if path.is_file() else b""
    try:
        cache = config.create_timing_cache(blob)
    except (RuntimeError, TypeError, ValueError):  # bytes that are no timing cache at all
        cache = None
    if cache is not None and config.set_timing_cache(cache, False):
        return
    if blob:
        aside = path.with_name(f"{path.name}.rejected")
        os.replace(path, aside)
        print(
            f"[{label}] TensorRT rejected the timing cache {path} (written on another device or "
            f"TensorRT build); moved it to {aside} and building with an empty one",
            file=sys.stderr,
        )
    if not config.set_timing_cache(config.create_timing_cache(b""), False):
        raise BackendError(f"TensorRT rejected an empty timing cache for {path}")


def parser_bytes(graph: StageGraph | bytes) -> bytes:
    """The ONNX bytes the parser gets for a stage graph (or a graph's bytes): the graph with
    its layer norms written out (``variants.parser_form``; it changes the FP32 graphs, the typed
    ones are derived so), since a strongly typed network rejects the setComputePrecision call of
    the LayerNormalization importer of the 10.x parsers that make it
    (test/fixtures/tensorrt_rules). Without onnx (not a ``[vehicle]`` install) the bytes go as
    they are."""
    data = graph if isinstance(graph, bytes) else graph.model_bytes
    try:
        from .. import variants
    except ImportError:
        return data
    return variants.parser_form(data)


def parser_errors(parser: Any) -> list[str]:
    """The parser's errors, each naming the ONNX node and its operator where the parser knows
    them: the words TensorRT itself uses, so the fix can be looked up."""
    errors = []
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        node, op = error.node_name(), error.node_operator()
        where = f"node '{node}' ({op}): " if node else ""
        # an operator check that fails says only "false": its code and check name say what
        code = str(error.code()).rsplit(".", 1)[-1]
        detail = f" ({code} in {error.func()})" if code != "SUCCESS" and error.func() else ""
        errors.append(where + error.desc().strip() + detail)
    return errors


def parser_log(trt: Any, model_bytes: bytes, logger: Any = None) -> list[str]:
    """Every error TensorRT's ONNX parser (of module ``trt``) reports for ``model_bytes`` in a
    strongly typed network, as ``parser_errors`` words them (empty: it parsed)."""
    logger = logger or trt.Logger(trt.Logger.WARNING)
    network = trt.Builder(logger).create_network(
        1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    )
    parser = trt.OnnxParser(network, logger)
    return [] if parser.parse(model_bytes) else parser_errors(parser)


def build_serialized(
    graph: StageGraph,
    stage: StageSpec,
    timing_cache: Path | None,
    options: BuildOptions,
    progress: bool = True,
    batch: int = 1,
    *,
    trt: Any = None,
    logger: Any = None,
    configure: Callable[[Any], None] | None = None,
) -> bytes:
    """Parse ``graph`` (the stage's typed ONNX) into a strongly typed network and build an
    engine with static shapes (a batch-axis input fixed at ``batch`` by one profile) and TF32
    off; returns plan bytes. ``trt``: the module that builds (None: ``import_tensorrt()``;
    TensorRT for RTX's has the same builder API), ``logger`` its ILogger (None: warnings
    only), ``configure`` a last say on the builder config (RTX: the compute capabilities), and
    ``timing_cache`` None builds without a persistent cache. A graph the parser refuses raises
    BackendError with the parser's own words, node and operator named."""
    trt = trt or import_tensorrt()
    where = f"the {graph.precision} graph of stage '{stage.name}' ({stage.path.name})"
    logger = logger or trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(parser_bytes(graph)):
        raise BackendError(f"TensorRT cannot parse {where}: " + "; ".join(parser_errors(parser)))
    config = builder.create_builder_config()
    profile = _batch_profile(builder, network, stage, batch, where)
    if profile is not None:
        config.add_optimization_profile(profile)
    config.clear_flag(trt.BuilderFlag.TF32)  # on by default: FP32 tensors would round to TF32
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
    config.builder_optimization_level = options.opt_level
    if timing_cache is not None:
        _open_timing_cache(config, timing_cache, stage.name)
    if progress:
        config.progress_monitor = _progress_monitor(trt, stage.name)
    if configure is not None:
        configure(config)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BackendError(
            f"TensorRT failed to build an engine from {where} (see the log above); check "
            "free GPU memory (stop other GPU work) and the ONNX opset (17)"
        )
    cache = config.get_timing_cache() if timing_cache is not None else None
    if cache is not None:
        write_private(timing_cache, bytes(cache.serialize()))
    return bytes(plan)


#: how ensure_engines makes a missing engine: (graph, stage, timing cache, options, batch) -> plan
PlanBuilder = Callable[[StageGraph, StageSpec, Path, BuildOptions, int], bytes]


def _build_with_timing_cache(
    graph: StageGraph, stage: StageSpec, timing: Path, options: BuildOptions, batch: int
) -> bytes:
    return build_serialized(graph, stage, timing, options, batch=batch)


def runtime_version(trt: Any) -> str:
    """The version an engine key records for module ``trt``: TensorRT's own, ``rtx-<version>``
    for TensorRT for RTX (whose 1.x numbers would otherwise read as an old TensorRT)."""
    rtx = str(getattr(trt, "__name__", "")).startswith("tensorrt_rtx")
    return f"rtx-{trt.__version__}" if rtx else str(trt.__version__)


def run_engine(
    engine: Any, feeds: Mapping[str, np.ndarray], trt: Any = None
) -> dict[str, np.ndarray]:
    """Outputs of one synchronous run of ``engine`` on host ``feeds`` (by input name), on the
    current CUDA context: the acceptance check's runner, not the frame path. ``trt``: the
    module that made the engine (None: ``import_tensorrt()``)."""
    trt, cuda = trt or import_tensorrt(), import_pycuda()
    context = engine.create_execution_context()
    stream = cuda.Stream()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    for name in names:
        dynamic = any(d < 0 for d in engine.get_tensor_shape(name))
        if name in feeds and dynamic and not context.set_input_shape(name, feeds[name].shape):
            raise BackendError(
                    f"the engine refuses input '{name}' of shape {feeds[name].shape} (outside "
                    "its optimization profile)"
                )
    host: dict[str, np.ndarray] = {}
    device = {}
    for name in names:
        shape = tuple(context.get_tensor_shape(name))
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
        if name in feeds:
            host[name] = np.ascontiguousarray(feeds[name], dtype).reshape(shape)
        else:
            host[name] = np.empty(shape, dtype)
        device[name] = cuda.mem_alloc(max(1, host[name].nbytes))
        context.set_tensor_address(name, int(device[name]))
    outputs = [name for name in names if name not in feeds]
    for name in names:
        if name in feeds:
            cuda.memcpy_htod_async(device[name], host[name], stream)
    if not context.execute_async_v3(stream.handle):
        raise BackendError("TensorRT failed to enqueue an engine for the acceptance check")
    for name in outputs:
        cuda.memcpy_dtoh_async(host[name], device[name], stream)
    stream.synchronize()
    return {name: host[name] for name in outputs}


def ensure_engines(
    bundle: ModelBundle,
    cache: EngineCache,
    deserialize: Callable[[bytes], Any],
    device: DeviceInfo,
    precision: str | None = None,
    allow_build: bool = True,
    options: BuildOptions | None = None,
    log: Callable[[str], None] = print,
    batch: int = 1,
    remedy: str | None = None,
    *,
    trt: Any = None,
    build_plan: PlanBuilder | None = None,
) -> dict[str, Any]:
    """Deserialized engine per stage for ``batch`` frames: from the cache, or built now (never
    per frame) from the ``precision`` typed graphs (None: ``engine_precision``'s choice). A new
    engine is cached only after it passes the acceptance check on the bundle's golden cases at
    that batch (stage by stage: the decoder is fed by the encoder's engine, run only when a
    later stage is built; ``slot_cases`` fills the slots); a failing one raises BackendError,
    and when the decoder fails, an encoder engine built in the same call is removed from the
    cache too. ``remedy``: what the error advises (None: ``acceptance.tensorrt_remedy``'s, on
    the command line). ``trt`` and
    ``build_plan``: the module whose engines these are and how a missing one is made (None:
    TensorRT's, ``build_serialized`` with the timing cache); TensorRT for RTX passes its own
    (rtx.py), whose key version starts with ``rtx-``."""
    trt = trt or import_tensorrt()
    build_plan = build_plan or _build_with_timing_cache
    options = options or BuildOptions()
    precision = engine_precision(bundle, precision, log)
    cases = bundle.golden_cases(precision)
    if not cases:
        log(f"bundle {bundle.root} has no {precision} golden cases: new engines go unchecked")
    engines: dict[str, Any] = {}
    built: list[EngineKey] = []
    slots = acceptance.slot_cases(len(cases), batch)
    image = bundle.image_tensor
    inputs = [{image: np.concatenate([cases[i].image for i in run])} for run in slots]
    for stage in bundle.stages:
        graph = bundle.stage_graph(stage.name, precision)
        key = engine_key(graph, stage, runtime_version(trt), device, options, batch)

        def build(
            k: EngineKey, timing: Path, graph: StageGraph = graph, stage: StageSpec = stage
        ) -> bytes:
            built.append(k)
            return build_plan(graph, stage, timing, options, batch)

        def accept(
            engine: Any, stage: StageSpec = stage, before: tuple = tuple(engines.values())
        ) -> None:
            feeds = inputs
            for earlier in before:  # the golden inputs run through the stages before this one
                feeds = [run_engine(earlier, f, trt) for f in feeds]
            outputs = [run_engine(engine, f, trt) for f in feeds]
            try:
                acceptance.check(stage.name, precision, cases, outputs, slots, remedy=remedy)
            except BackendError:
                for earlier in built[:-1]:
                    cache.discard(earlier)
                raise

        engine = cache.resolve(
            key, deserialize, build if allow_build else None, log, accept if cases else None
        )
        engines[stage.name] = engine
    return engines
