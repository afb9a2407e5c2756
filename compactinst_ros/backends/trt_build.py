"""``compactinst build-engine BUNDLE``: FP16 TensorRT engines for every stage, cached per device.

TensorRT 10 Python API only (named tensors, ``build_serialized_network``), ONNX parser, FP16
builder flag with FP32 I/O, static shapes, a persistent timing cache and a progress display.
Layers that ``compactinst fp16-check`` found too close to FP16's range are pinned to FP32 from
the bundle's ``precision.json`` (matched to parsed layers by ONNX node name; part of the cache
key). tensorrt and pycuda are imported inside functions so the CPU path never needs them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bundle import STAGE_ORDER, ModelBundle, StageSpec, sha256_file
from ..errors import BackendError
from ..private_files import default_cache_dir, read_private, write_private
from .engine_cache import DeviceInfo, EngineCache, EngineKey

MIN_TRT_MAJOR = 10
LOG_PROGRESS_S = 5.0  # seconds between progress lines when stderr is not a terminal
#: Sidecar in the bundle folder naming, per stage, the ONNX nodes whose layers stay FP32.
PRECISION_FILE = "precision.json"
PRECISION_FORMAT = 1
#: Prefix of the metadata the ONNX parser (TensorRT >= 10.0) gives every layer it makes for a
#: node: "[ONNX Layer: NODE]" or "[ONNX Layer: NODE | Local Function: F]".
ONNX_LAYER_TAG = "[ONNX Layer: "


@dataclass(frozen=True)
class BuildOptions:
    """Builder settings that change the engine (all part of the cache key)."""

    precision: str = "fp16"
    opt_level: int = 3
    workspace_mib: int = 1024

    def key_options(self) -> dict[str, int | str]:
        """The options as stored in the engine key."""
        return {"opt_level": self.opt_level, "workspace_mib": self.workspace_mib}


def import_tensorrt() -> Any:
    """The tensorrt module, TensorRT >= 10; BackendError with the install hint otherwise."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BackendError(
            f"TensorRT Python bindings are not importable ({exc}); on JetPack 6 install "
            "python3-libnvinfer and create the venv with --system-site-packages, or use the "
            "onnxruntime backend"
        ) from None
    major = int(str(trt.__version__).split(".")[0])
    if major < MIN_TRT_MAJOR:
        raise BackendError(
            f"TensorRT {trt.__version__} is too old: the named-tensor API of TensorRT "
            f">= {MIN_TRT_MAJOR} (JetPack 6) is required"
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
    """Name, compute capability and SM count of CUDA device ``device`` (no context needed)."""
    cuda = import_pycuda()
    if device >= cuda.Device.count():
        raise BackendError(f"CUDA device {device} does not exist ({cuda.Device.count()} found)")
    dev = cuda.Device(device)
    major, minor = dev.compute_capability()
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    return DeviceInfo(name=dev.name(), compute_capability=f"{major}.{minor}", sm_count=int(sms))


def load_fp32_layers(bundle: ModelBundle) -> dict[str, tuple[str, ...]]:
    """Per stage, the ONNX node names whose layers an FP16 build pins to FP32, from the bundle's
    precision.json ({} without one); BackendError if it is unreadable or belongs to other ONNX."""
    path = bundle.root / PRECISION_FILE
    if not path.is_file():
        return {}
    fix = f"re-run 'compactinst fp16-check {bundle.root} --write-pins' or delete {path}"
    try:
        record = json.loads(path.read_text())
        stages = record["stages"]
        if record.get("format") != PRECISION_FORMAT or not isinstance(stages, dict):
            raise ValueError(f"format {record.get('format')!r}, expected {PRECISION_FORMAT}")
        pins = {
            name: (str(entry["onnx_sha256"]), tuple(str(n) for n in entry["fp32_layers"]))
            for name, entry in stages.items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BackendError(f"{path} is not a valid precision record ({exc!r}); {fix}") from None
    layers: dict[str, tuple[str, ...]] = {}
    for stage in bundle.stages:
        if stage.name not in pins:
            continue
        recorded, nodes = pins[stage.name]
        if recorded != sha256_file(stage.path):
            raise BackendError(
                f"{path} was written for another {stage.path.name} (sha256 {recorded[:12]}…, the "
                f"file is {sha256_file(stage.path)[:12]}…); its FP32 pins may not fit; {fix}"
            )
        layers[stage.name] = nodes
    return layers


def save_fp32_layers(
    bundle: ModelBundle, layers: dict[str, Iterable[str]], provenance: dict
) -> Path:
    """Write the bundle's precision.json: per stage the ONNX file's sha256 and the sorted node
    names to pin, plus ``provenance`` (how the pins were found); returns its path."""
    unknown = sorted(set(layers) - set(STAGE_ORDER))
    if unknown:
        raise BackendError(f"no stage named {unknown} in a bundle (stages: {list(STAGE_ORDER)})")
    record = {
        "format": PRECISION_FORMAT,
        **provenance,
        "stages": {
            stage.name: {
                "onnx_sha256": sha256_file(stage.path),
                "fp32_layers": sorted(set(layers.get(stage.name, ()))),
            }
            for stage in bundle.stages
        },
    }
    path = bundle.root / PRECISION_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def onnx_node_of_layer(layer: Any) -> str:
    """The ONNX node a parsed layer came from: the name in the parser's metadata tag, else the
    layer name (the parser names a node's first layer after the node, later ones NODE_<n>)."""
    metadata = str(layer.metadata or "")
    if metadata.startswith(ONNX_LAYER_TAG) and metadata.endswith("]"):
        return metadata[len(ONNX_LAYER_TAG) : -1].split(" | ")[0]
    return str(layer.name)


def pin_fp32(trt: Any, network: Any, nodes: Iterable[str]) -> set[str]:
    """Constrain every layer parsed from one of ``nodes`` to FP32 compute and FP32 float outputs
    (needs BuilderFlag.OBEY_PRECISION_CONSTRAINTS); returns the node names that had a layer."""
    wanted = set(nodes)
    matched: set[str] = set()
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        node = onnx_node_of_layer(layer)
        if node not in wanted:
            continue
        matched.add(node)
        layer.precision = trt.DataType.FLOAT
        for output in range(layer.num_outputs):
            if layer.get_output(output).dtype == trt.DataType.FLOAT:
                layer.set_output_type(output, trt.DataType.FLOAT)
    return matched


def engine_key(
    stage: StageSpec,
    trt_version: str,
    device: DeviceInfo,
    options: BuildOptions,
    fp32_layers: Sequence[str] = (),
) -> EngineKey:
    """Cache key of ``stage``: hashes the ONNX file itself (not the bundle's recorded hash) and,
    for FP16 builds with FP32 pins, the pinned node names."""
    key_options = options.key_options()
    if options.precision == "fp16" and fp32_layers:
        names = json.dumps(sorted(set(fp32_layers))).encode()
        key_options["fp32_layers"] = hashlib.sha256(names).hexdigest()[:16]
    return EngineKey(
        stage=stage.name,
        onnx_sha256=sha256_file(stage.path),
        trt_version=str(trt_version),
        gpu_name=device.name,
        compute_capability=device.compute_capability,
        sm_count=device.sm_count,
        precision=options.precision,
        input_shapes={t.name: list(t.shape) for t in stage.inputs},
        options=key_options,
    )


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


def build_serialized(
    stage: StageSpec,
    key: EngineKey,
    timing_cache: Path,
    options: BuildOptions,
    progress: bool = True,
    fp32_layers: Sequence[str] = (),
) -> bytes:
    """Parse ``stage``'s ONNX, build an FP16 engine with static shapes, the layers of the ONNX
    nodes ``fp32_layers`` pinned to FP32; returns plan bytes."""
    trt = import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(stage.path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BackendError(f"TensorRT cannot parse {stage.path}: {errors}")
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if any(d < 0 for d in tensor.shape):
            raise BackendError(
                f"{stage.path}: input '{tensor.name}' has dynamic shape {tuple(tensor.shape)}; "
                "export the bundle with static shapes (one engine per input size)"
            )
    config = builder.create_builder_config()
    if options.precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
        if fp32_layers:
            config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
            missing = sorted(set(fp32_layers) - pin_fp32(trt, network, fp32_layers))
            if missing:
                print(
                    f"[{key.stage}] {len(missing)} FP32-pinned ONNX nodes have no TensorRT layer "
                    f"(folded by the parser), e.g. {missing[:3]}",
                    file=sys.stderr,
                )
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
    config.builder_optimization_level = options.opt_level
    cache_bytes = read_private(timing_cache) if timing_cache.is_file() else b""
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, False)
    if progress:
        config.progress_monitor = _progress_monitor(trt, key.stage)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BackendError(
            f"TensorRT failed to build an engine for {stage.path} (see the log above); check "
            "free GPU memory (stop other GPU work) and the ONNX opset (17)"
        )
    write_private(timing_cache, bytes(config.get_timing_cache().serialize()))
    return bytes(plan)


def ensure_engines(
    bundle: ModelBundle,
    cache: EngineCache,
    deserialize: Callable[[bytes], Any],
    device: DeviceInfo,
    allow_build: bool = True,
    options: BuildOptions | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Deserialized engine per stage: from the cache, or built now (never per frame)."""
    trt = import_tensorrt()
    options = options or BuildOptions()
    fp32_by_stage = load_fp32_layers(bundle)
    engines: dict[str, Any] = {}
    for stage in bundle.stages:
        fp32_layers = fp32_by_stage.get(stage.name, ())
        key = engine_key(stage, trt.__version__, device, options, fp32_layers)

        def build(
            k: EngineKey, timing: Path, stage: StageSpec = stage, pins: Sequence[str] = fp32_layers
        ) -> bytes:
            return build_serialized(stage, k, timing, options, fp32_layers=pins)

        engines[stage.name] = cache.resolve(key, deserialize, build if allow_build else None, log)
    return engines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst build-engine``."""
    parser.add_argument("bundle", help="model bundle folder (bundle.json + stage ONNX files)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"engine cache folder (default ${'{'}COMPACTINST_ENGINE_CACHE{'}'} or "
        f"{default_cache_dir()})",
    )
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument(
        "--opt-level",
        type=int,
        default=3,
        choices=range(6),
        metavar="0-5",
        help="TensorRT builder optimization level: 0 builds fastest, 5 tries the most tactics",
    )
    parser.add_argument("--workspace-mib", type=int, default=1024, help="builder workspace cap")
    parser.add_argument("--fp32", action="store_true", help="build FP32 engines (parity checks)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")


def run(args: argparse.Namespace) -> int:
    """Build (or validate) the engines of a bundle for this GPU and print where they are."""
    bundle = ModelBundle.load(args.bundle)
    cache = EngineCache(args.cache_dir or default_cache_dir())
    trt = import_tensorrt()
    device = device_info(args.device)
    options = BuildOptions(
        precision="fp32" if args.fp32 else "fp16",
        opt_level=args.opt_level,
        workspace_mib=args.workspace_mib,
    )
    pins = load_fp32_layers(bundle)
    keys = {
        stage.name: engine_key(stage, trt.__version__, device, options, pins.get(stage.name, ()))
        for stage in bundle.stages
    }
    if args.force:
        for key in keys.values():
            for path in cache.paths(key):
                path.unlink(missing_ok=True)
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    ensure_engines(bundle, cache, runtime.deserialize_cuda_engine, device, True, options)
    print(f"TensorRT {trt.__version__} on {device.name} (sm {device.compute_capability}):")
    for stage in bundle.stages:
        path, _ = cache.paths(keys[stage.name])
        pinned = len(pins.get(stage.name, ())) if options.precision == "fp16" else 0
        note = f"  ({pinned} ONNX nodes pinned to FP32)" if pinned else ""
        print(f"  {stage.name:8s} {path}  {path.stat().st_size / 2**20:.1f} MiB{note}")
    return 0
