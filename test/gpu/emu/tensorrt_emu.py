"""Test-only stand-in for the part of the TensorRT 10.3-11 Python API our builder and backend use,
so CI executes trt_build.py and trt.py end to end: a "plan" is the typed ONNX graph's bytes
behind a header, and an engine runs that graph with ONNX Runtime on the emulated device memory
of pycuda_emu (host addresses). It checks how the API is driven (strongly typed networks only,
TF32 cleared, named tensors, every I/O address set before execute_async_v3, the timing cache round
trip and its rejection, progress callbacks, the CUDA device current at builder creation), not
TensorRT itself. Dynamic dims (the stage graphs' batch axis) need an optimization profile at build
time; the engine reports them as -1 until a context's ``set_input_shape`` picks a shape inside
the profile (one outside is refused, as TensorRT does), and a context created ``USER_MANAGED``
runs only once ``set_device_memory`` gave it at least ``device_memory_size_v2`` bytes.
test_api_names.py checks that every name used is real TensorRT 10.3 and 11.x.

What TensorRT 11 removed (weak typing: the precision builder flags, per-layer precision and
output types, INT8 calibrators; NVIDIA's "Removed Python APIs and Replacements") is refused with
an error naming the removal, so a weak-typing call fails CI. ``perturb`` lets a test make an
engine's outputs wrong (the acceptance check must refuse it).

Parsed layers follow the ONNX parser of TensorRT 10 (onnx-tensorrt ``registerLayer``): one layer
per non-Constant node, named after the node (``node_of_<output 0>`` when unnamed; a repeated name
gets ``_<n>`` from one counter shared by the whole network) with the metadata
``[ONNX Layer: <node name>]``. The real parser may make several or helper layers for a node.
The parser refuses, with one error per node, what TensorRT's types refuse on the installed
version (test/fixtures/tensorrt_rules, ``compactinst_ros.export.tensorrt_rules.type_issues``):
INT32 dequantization, a LayerNormalization whose importer calls setComputePrecision on a
strongly typed network, FP16 normalisations; and what the parser's rules refuse
(``tensorrt_rules.parser_issues``): operators outside the support matrix, their attribute
rules, non-zero zero points, scales not positive or not one per channel. Where it differs from
NVIDIA's own parser, test/export/test_parser_agreement.py names why.
"""

from __future__ import annotations

import ctypes
import enum
import json
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

PLAN_MAGIC = b"EMUPLAN1"
#: TensorRT's type rules per version (scripts/tensorrt_rules_fixture.py writes them)
RULES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "tensorrt_rules"
#: The rules of the installed version (``install``); None for a version without a fixture.
type_rules: dict | None = None
#: What the last execute_async_v3 read from device memory, per input tensor (tests look).
last_inputs: dict[str, np.ndarray] = {}
#: The network and config of the last build_serialized_network (tests look).
last_build: dict[str, Any] = {}
TIMING_MAGIC = b"EMUTIMING"
#: Output name -> function applied to that output by every execute_async_v3 (tests set it).
perturb: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
#: Names TensorRT 11 removed, with what replaces them (weak typing and implicit quantization).
REMOVED_IN_TRT11 = {
    **dict.fromkeys(
        ("FP16", "BF16", "INT8", "FP8", "INT4", "FP4"),
        "typed graphs: FP16 from the ONNX tensor types, INT8 from Q/DQ nodes",
    ),
    **dict.fromkeys(
        ("OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS", "precision",
         "set_output_type", "reset_precision", "reset_output_type", "precision_is_set"),
        "strong typing (types come from the graph)",
    ),
    **dict.fromkeys(
        ("int8_calibrator", "IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator",
         "IInt8EntropyCalibrator", "IInt8LegacyCalibrator", "set_calibration_profile",
         "get_calibration_profile", "set_quantization_flag", "quantization_flags",
         "platform_has_fast_fp16", "platform_has_fast_int8"),
        "explicit quantization with Q/DQ nodes",
    ),
}  # fmt: skip


def removed(name: str) -> AttributeError:
    """The error for a name TensorRT 11 removed."""
    return AttributeError(
        f"'{name}' was removed in TensorRT 11 (weak typing); use {REMOVED_IN_TRT11[name]}"
    )


class _RefusesRemoved(enum.EnumMeta):
    """Enum members TensorRT 11 removed raise ``removed`` instead of a bare AttributeError."""

    def __getattr__(cls, name: str) -> Any:
        if name in REMOVED_IN_TRT11:
            raise removed(name)
        raise AttributeError(name)


class DataType(enum.Enum):
    """The tensor types the bundles use."""

    FLOAT = np.float32
    HALF = np.float16  # the features the FP16 stages hand on
    INT64 = np.int64
    BOOL = np.bool_


ONNX_TYPES = {onnx.TensorProto.FLOAT: DataType.FLOAT, onnx.TensorProto.BOOL: DataType.BOOL}


def nptype(trt_type: DataType) -> type:
    """numpy type of a DataType, as ``tensorrt.nptype``."""
    return trt_type.value


class Logger:
    """Severity holder; messages are not produced by the stand-in."""

    WARNING = 2

    def __init__(self, severity: int = WARNING) -> None:
        self.severity = severity


class BuilderFlag(enum.IntEnum, metaclass=_RefusesRemoved):
    """Builder flags used (TF32 is on by default, NvInfer.h); ints, as pybind11 enums."""

    TF32 = 6


class NetworkDefinitionCreationFlag(enum.IntEnum):
    """Network creation flags: strongly typed (TensorRT 11: always, the flag kept and ignored)."""

    STRONGLY_TYPED = 1


class MemoryPoolType(enum.Enum):
    """Memory pools used."""

    WORKSPACE = 0


class ExecutionContextAllocationStrategy(enum.IntEnum):
    """Who allocates a context's activation memory (TensorRT's default is its own, static)."""

    USER_MANAGED = 2


class IOptimizationProfile:
    """min/opt/max shapes per dynamic input."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        """Shapes of input ``input``: smallest, the one tuned for, largest (same rank)."""
        shapes = tuple(tuple(int(d) for d in s) for s in (min, opt, max))
        if len({len(s) for s in shapes}) != 1 or any(
            lo > hi for lo, hi in zip(shapes[0], shapes[2], strict=True)
        ):
            raise ValueError(f"profile shapes of '{input}' are inconsistent: {shapes}")
        self.shapes[input] = shapes

    def get_shape(self, input: str) -> list[tuple[int, ...]]:
        """[min, opt, max] of input ``input`` (empty when unset)."""
        return list(self.shapes.get(input, ()))


class IProgressMonitor:
    """Base class of progress monitors; the builder calls the subclass's methods."""

    def __init__(self) -> None:
        pass


class Tensor:
    """A network tensor: name, static shape (-1 where unknown) and type."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: DataType = DataType.FLOAT) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype


class Layer:
    """A parsed layer: name, parser metadata and outputs. Its types come from the graph: setting a
    precision or an output type is refused (strongly typed networks; removed in TensorRT 11)."""

    def __init__(self, name: str, metadata: str, outputs: list[Tensor]) -> None:
        self.name, self.metadata = name, metadata
        self._outputs = outputs

    @property
    def num_outputs(self) -> int:
        """Number of output tensors."""
        return len(self._outputs)

    def get_output(self, index: int) -> Tensor:
        """Output tensor ``index``."""
        return self._outputs[index]

    @property
    def precision(self) -> DataType:
        """Refused: a strongly typed network has no layer precision."""
        raise removed("precision")

    @precision.setter
    def precision(self, dtype: DataType) -> None:
        raise removed("precision")

    def set_output_type(self, index: int, dtype: DataType) -> None:
        """Refused: a strongly typed network has no output type constraints."""
        raise removed("set_output_type")


def _value_shape(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(
        d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim
    )


class Network:
    """Filled by OnnxParser.parse; strongly typed."""

    def __init__(self) -> None:
        self.onnx_bytes = b""
        self.inputs: list[Tensor] = []
        self.layers: list[Layer] = []

    @property
    def num_inputs(self) -> int:
        """Number of graph inputs."""
        return len(self.inputs)

    def get_input(self, index: int) -> Tensor:
        """Graph input ``index``."""
        return self.inputs[index]

    @property
    def num_layers(self) -> int:
        """Number of layers."""
        return len(self.layers)

    def get_layer(self, index: int) -> Layer:
        """Layer ``index``, in parse order."""
        return self.layers[index]


def _parsed_layers(model: onnx.ModelProto) -> list[Layer]:
    """The layers the ONNX parser would name for ``model`` (see the module docstring)."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {
        v.name: ONNX_TYPES.get(v.type.tensor_type.elem_type, DataType.INT64)
        for v in [*inferred.value_info, *inferred.output]
    }
    taken: set[str] = set()
    suffix = 0
    layers = []
    for node in model.graph.node:
        if node.op_type == "Constant":
            continue
        base = node.name or f"node_of_{node.output[0]}"
        name = base
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        outputs = [Tensor(o, (-1,), types.get(o, DataType.FLOAT)) for o in node.output]
        layers.append(Layer(name, f"[ONNX Layer: {base}]", outputs))
    return layers


class ParserError:
    """One parse error: what is wrong, and the node and operator where the parser knows them."""

    def __init__(self, desc: str, node_name: str = "", node_operator: str = "") -> None:
        self._desc, self._node_name, self._node_operator = desc, node_name, node_operator

    def desc(self) -> str:
        """What the parser found wrong."""
        return self._desc

    def node_name(self) -> str:
        """The ONNX node's name ("" for a whole-model error)."""
        return self._node_name

    def node_operator(self) -> str:
        """The ONNX node's operator ("" for a whole-model error)."""
        return self._node_operator

    def code(self) -> str:
        """The error code's name (the real one is an ErrorCode member)."""
        return "ErrorCode.INVALID_NODE" if self._node_name else "ErrorCode.INVALID_GRAPH"

    def func(self) -> str:
        """The importer function that raised it ("" here: the stand-in has none)."""
        return ""


class OnnxParser:
    """Reads an ONNX file into a Network; records errors like TensorRT's parser."""

    def __init__(self, network: Network, logger: Logger) -> None:
        self.network = network
        self.errors: list[ParserError] = []

    @property
    def num_errors(self) -> int:
        """Errors of the last parse."""
        return len(self.errors)

    def get_error(self, index: int) -> ParserError:
        """Error ``index`` of the last parse."""
        return self.errors[index]

    def parse(self, model: bytes, path: str | None = None) -> bool:
        """True when ``model`` (serialized ONNX) is a valid ONNX model; ``path`` would locate
        external weights, which the bundles do not have."""
        try:
            blob = bytes(model)
            model = onnx.load_from_string(blob)
            onnx.checker.check_model(model)
        except Exception as exc:  # onnx raises DecodeError, ValidationError, OSError
            self.errors = [ParserError(f"{type(exc).__name__}: {exc}")]
            return False
        if type_rules is not None:  # what the real parser and layers of that version refuse
            from compactinst_ros.export.tensorrt_rules import parser_issues, type_issues

            issues = type_issues(model, type_rules) + parser_issues(model)
            self.errors = [ParserError(issue) for issue in issues]
            if self.errors:
                return False
        initialisers = {i.name for i in model.graph.initializer}
        self.network.onnx_bytes = blob
        self.network.inputs = [
            Tensor(v.name, _value_shape(v)) for v in model.graph.input if v.name not in initialisers
        ]
        self.network.layers = _parsed_layers(model)
        return True


class TimingCache:
    """Opaque bytes: the device it was measured on, then one entry per build."""

    def __init__(self, blob: bytes, device: bytes) -> None:
        if blob and not blob.startswith(TIMING_MAGIC):
            raise ValueError("not a timing cache")
        body = blob[len(TIMING_MAGIC) :]
        self.device, _, entries = body.partition(b":") if blob else (device, b"", b"")
        self.entries = entries.count(b"+")

    def serialize(self) -> bytes:
        """Bytes to store and pass to create_timing_cache later."""
        return TIMING_MAGIC + self.device + b":" + b"+" * self.entries


def current_device() -> int:
    """The device of the current emulated CUDA context (0 with none, as the CUDA runtime)."""
    stack = getattr(sys.modules.get("pycuda_emu"), "_context_stack", None)
    return stack[-1] if stack else 0


class BuilderConfig:
    """Records what the builder code asks for; refuses what TensorRT 11 removed."""

    _FIELDS = frozenset(
        {"flags", "pools", "builder_optimization_level", "progress_monitor", "timing_cache",
         "device", "profiles"}
    )  # fmt: skip

    def __init__(self, device: bytes) -> None:
        self.flags: set[BuilderFlag] = {BuilderFlag.TF32}
        self.pools: dict[MemoryPoolType, int] = {}
        self.builder_optimization_level = 3
        self.progress_monitor: IProgressMonitor | None = None
        self.timing_cache: TimingCache | None = None
        self.device = device
        self.profiles: list[IOptimizationProfile] = []

    def __setattr__(self, name: str, value: Any) -> None:
        if name in REMOVED_IN_TRT11:
            raise removed(name)
        if name not in self._FIELDS:
            raise AttributeError(f"the stand-in's builder config has no attribute '{name}'")
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        if name in REMOVED_IN_TRT11:
            raise removed(name)
        raise AttributeError(name)

    def set_flag(self, flag: BuilderFlag) -> None:
        """Enable a builder flag."""
        self.flags.add(flag)

    def clear_flag(self, flag: BuilderFlag) -> None:
        """Disable a builder flag."""
        self.flags.discard(flag)

    def get_flag(self, flag: BuilderFlag) -> bool:
        """Whether a builder flag is set."""
        return flag in self.flags

    def set_memory_pool_limit(self, pool: MemoryPoolType, size: int) -> None:
        """Cap a memory pool."""
        self.pools[pool] = size

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        """Add ``profile``; returns its index."""
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, blob: bytes) -> TimingCache:
        """A timing cache from serialised bytes (empty: a new cache for this device)."""
        return TimingCache(blob, self.device)

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
        """Use ``cache`` for this build; False (and no cache) when it was measured on another
        device, unless ``ignore_mismatch``."""
        if cache.device != self.device and not ignore_mismatch:
            self.timing_cache = None
            return False
        self.timing_cache = cache
        return True

    def get_timing_cache(self) -> TimingCache | None:
        """The cache in use; None when none was accepted."""
        return self.timing_cache


class Builder:
    """Builds a "plan": the ONNX bytes behind a header naming the FP32 math (fp32 or tf32), on
    the CUDA device current when the builder was created."""

    def __init__(self, logger: Logger) -> None:
        self.logger = logger
        self.device = current_device()

    def __getattr__(self, name: str) -> Any:
        if name in REMOVED_IN_TRT11:
            raise removed(name)
        raise AttributeError(name)

    def create_network(self, flags: int = 0) -> Network:
        """Only strongly typed networks: a weakly typed one is what TensorRT 11 removed."""
        if flags != 1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED.value):
            raise ValueError(
                f"network creation flags {flags}: only strongly typed networks are built here "
                "(1 << STRONGLY_TYPED); TensorRT 11 removed weakly typed networks"
            )
        return Network()

    def create_optimization_profile(self) -> IOptimizationProfile:
        """An empty optimization profile."""
        return IOptimizationProfile()

    def create_builder_config(self) -> BuilderConfig:
        """A fresh builder config for this builder's device."""
        return BuilderConfig(f"emulated-{self.device}".encode())

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> bytes | None:
        """Report progress like TensorRT (two phases, nested), then return the plan."""
        last_build.update(network=network, config=config, device=self.device)
        profiles = [_profile_of(network, p) for p in config.profiles]
        dynamic = [t for t in network.inputs if any(d < 0 for d in t.shape)]
        if not network.onnx_bytes or None in profiles or (dynamic and not profiles):
            return None  # TensorRT logs the error and returns no plan
        monitor = config.progress_monitor
        if monitor is not None:
            monitor.phase_start("Building engine", None, 2)
            for step in range(2):
                monitor.phase_start("Tactic selection", "Building engine", 3)
                for tactic in range(3):
                    if not monitor.step_complete("Tactic selection", tactic):
                        return None
                monitor.phase_finish("Tactic selection")
                if not monitor.step_complete("Building engine", step):
                    return None
            monitor.phase_finish("Building engine")
        if config.timing_cache is not None:
            config.timing_cache.entries += 1
        math = b"tf32" if BuilderFlag.TF32 in config.flags else b"fp32"
        header = json.dumps(profiles).encode()
        return PLAN_MAGIC + math + struct.pack("<I", len(header)) + header + network.onnx_bytes


def _profile_of(network: Network, profile: IOptimizationProfile) -> dict | None:
    """A profile as the plan stores it (input -> [min, opt, max]); None where it misses a
    dynamic input or contradicts a static dim (TensorRT refuses the build)."""
    stored = {}
    for tensor in network.inputs:
        shapes = profile.shapes.get(tensor.name)
        if shapes is None:
            if any(d < 0 for d in tensor.shape):
                return None
            continue
        if any(
            len(s) != len(tensor.shape)
            or any(0 <= d != v for d, v in zip(tensor.shape, s, strict=True))
            for s in shapes
        ):
            return None
        stored[tensor.name] = [list(s) for s in shapes]
    return stored


class ExecutionContext:
    """Runs the engine's graph on ONNX Runtime between emulated device addresses."""

    def __init__(self, engine: Engine, strategy: int | None) -> None:
        self.engine = engine
        self.addresses: dict[str, int] = {}
        self.input_shapes: dict[str, tuple[int, ...]] = {}
        self.user_memory = strategy == ExecutionContextAllocationStrategy.USER_MANAGED
        self.memory: tuple[int, int] | None = None

    def set_input_shape(self, name: str, shape: Any) -> bool:
        """Pick the shape of input ``name``; False (nothing set) outside the profile's range."""
        shape = tuple(int(d) for d in shape)
        low, _, high = self.engine.get_tensor_profile_shape(name, 0)
        if len(shape) != len(low) or any(
            not lo <= d <= hi for d, lo, hi in zip(shape, low, high, strict=True)
        ):
            return False
        self.input_shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        """Shape of I/O tensor ``name`` in this context: -1 where a dynamic dim has no shape yet
        (an input's until ``set_input_shape``, an output's until every input has one)."""
        if name in self.input_shapes:
            return self.input_shapes[name]
        symbols = {}
        for inp in self.engine.input_names:
            for symbol, value in zip(
                self.engine.symbols[inp], self.input_shapes.get(inp, ()), strict=False
            ):
                symbols[symbol] = value
        return tuple(
            d if d >= 0 else symbols.get(sym, -1)
            for d, sym in zip(self.engine.shapes[name], self.engine.symbols[name], strict=True)
        )

    def set_tensor_address(self, name: str, address: int) -> bool:
        """Bind I/O tensor ``name`` to device memory."""
        if name not in self.engine.shapes:
            raise KeyError(f"engine has no tensor '{name}'")
        self.addresses[name] = int(address)
        return True

    def set_device_memory(self, memory: int, size: int) -> None:
        """Activation memory of a ``USER_MANAGED`` context (at least device_memory_size_v2)."""
        if int(size) < self.engine.device_memory_size_v2:
            raise ValueError(
                f"device memory of {size} bytes is below the engine's "
                f"{self.engine.device_memory_size_v2}"
            )
        self.memory = (int(memory), int(size))

    def _view(self, name: str) -> np.ndarray:
        shape, dtype = self.get_tensor_shape(name), np.dtype(self.engine.dtypes[name].value)
        count = int(np.prod(shape))
        raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(self.addresses[name])
        return np.frombuffer(raw, dtype).reshape(shape)

    def execute_async_v3(self, stream_handle: int) -> bool:
        """Enqueue the graph on the emulated stream ``stream_handle`` (pycuda_emu's deferred
        streams; at once without them), at the addresses bound now, as TensorRT reads them at
        enqueue; False if an address, an input shape or (``USER_MANAGED``) the activation
        memory is missing."""
        if set(self.addresses) != set(self.engine.shapes):
            return False
        if any(d < 0 for n in self.engine.shapes for d in self.get_tensor_shape(n)):
            return False
        if self.user_memory and self.memory is None:
            return False
        views = {name: self._view(name) for name in self.engine.shapes}
        emulated_cuda = sys.modules.get("pycuda_emu")
        if emulated_cuda is None:
            self._execute(views)
        else:
            emulated_cuda.stream_of(stream_handle)._enqueue(lambda: self._execute(views))
        return True

    def _execute(self, views: dict[str, np.ndarray]) -> None:
        feeds = {name: views[name].copy() for name in self.engine.input_names}
        last_inputs.update(feeds)
        results = self.engine.session.run(self.engine.output_names, feeds)
        for name, value in zip(self.engine.output_names, results, strict=True):
            views[name][...] = perturb[name](value) if name in perturb else value


class Engine:
    """A deserialised plan: I/O tensor names in graph order (inputs first), shapes (-1 for a
    dynamic dim), types, and the optimization profile it was built with."""

    def __init__(self, onnx_bytes: bytes, profiles: list[dict]) -> None:
        import onnxruntime

        self.session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.profiles = profiles
        types_ = {
            "tensor(float)": DataType.FLOAT,
            "tensor(float16)": DataType.HALF,
            "tensor(int64)": DataType.INT64,
        }
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.symbols: dict[str, tuple[str | None, ...]] = {}
        self.dtypes: dict[str, DataType] = {}
        for value in [*self.session.get_inputs(), *self.session.get_outputs()]:
            dims = tuple(value.shape)
            self.shapes[value.name] = tuple(d if isinstance(d, int) else -1 for d in dims)
            self.symbols[value.name] = tuple(None if isinstance(d, int) else d for d in dims)
            self.dtypes[value.name] = types_[value.type]

    @property
    def num_io_tensors(self) -> int:
        """Inputs plus outputs."""
        return len(self.shapes)

    @property
    def num_optimization_profiles(self) -> int:
        """Profiles built into the engine (at least one, as TensorRT counts a static engine's)."""
        return max(1, len(self.profiles))

    @property
    def device_memory_size_v2(self) -> int:
        """Nominal activation bytes: every output at the profile's largest shapes."""
        largest = {n: s[2] for p in self.profiles for n, s in p.items()}
        context = ExecutionContext(self, None)
        context.input_shapes = {n: tuple(largest.get(n, self.shapes[n])) for n in self.input_names}
        return sum(
            int(np.prod(context.get_tensor_shape(n))) * np.dtype(self.dtypes[n].value).itemsize
            for n in self.output_names
        )

    def get_tensor_name(self, index: int) -> str:
        """I/O tensor ``index``."""
        return [*self.input_names, *self.output_names][index]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        """Shape of I/O tensor ``name``: -1 for a dynamic dim."""
        return self.shapes[name]

    def get_tensor_dtype(self, name: str) -> DataType:
        """Type of I/O tensor ``name``."""
        return self.dtypes[name]

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        """[min, opt, max] of input ``name`` in profile ``profile_index`` (a static input's own
        shape three times)."""
        if name not in self.input_names:
            raise ValueError(f"'{name}' is not an input of the engine")
        if self.profiles:
            stored = self.profiles[profile_index].get(name)
            if stored is not None:
                return [tuple(s) for s in stored]
        return [self.shapes[name]] * 3

    def create_execution_context(self, strategy: int | None = None) -> ExecutionContext:
        """A context with no addresses bound yet; ``USER_MANAGED``: no activation memory either
        (the caller gives it with ``set_device_memory``)."""
        return ExecutionContext(self, strategy)


class Runtime:
    """Deserialises plans; None for bytes that are not one (as TensorRT does)."""

    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def deserialize_cuda_engine(self, plan: bytes) -> Engine | None:
        """The engine of ``plan``, or None when the plan is not valid."""
        return _engine_of(plan, Engine)


def _engine_of(plan: bytes, make: Callable[[bytes, list[dict]], Engine]) -> Engine | None:
    """``make(onnx bytes, profiles)`` of a stand-in plan, or None when it is not one."""
    start = len(PLAN_MAGIC) + 4
    if not plan.startswith(PLAN_MAGIC):
        return None
    try:
        (size,) = struct.unpack("<I", plan[start : start + 4])
        profiles = json.loads(plan[start + 4 : start + 4 + size])
        return make(bytes(plan[start + 4 + size :]), profiles)
    except Exception:  # onnxruntime or json reject truncated or foreign bytes
        return None


def rules_file(version: str) -> Path | None:
    """The type-rule fixture of TensorRT ``version`` ("10.3.0" -> 10.3.json, "11.4.0" ->
    11.json); None where there is none."""
    parts = version.split(".")
    for name in (".".join(parts[:2]), parts[0]):
        path = RULES_DIR / f"{name}.json"
        if path.is_file():
            return path
    return None


def install(monkeypatch: Any, version: str = "10.3.0") -> types.ModuleType:
    """Make ``import tensorrt`` give this stand-in for one test; its parser enforces the type
    rules of ``version`` (``rules_file``)."""
    import importlib.machinery

    path = rules_file(version)
    rules = json.loads(path.read_text()) if path else None
    monkeypatch.setattr(sys.modules[__name__], "type_rules", rules)

    module = types.ModuleType("tensorrt")
    module.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    module.__version__ = version  # type: ignore[attr-defined]
    module.__stand_in__ = True  # type: ignore[attr-defined]  # scripts/gpu_check.py labels by it
    for name in (
        "Builder", "BuilderFlag", "DataType", "ExecutionContextAllocationStrategy",
        "IOptimizationProfile", "IProgressMonitor", "Logger", "MemoryPoolType",
        "NetworkDefinitionCreationFlag", "OnnxParser", "Runtime", "nptype",
    ):  # fmt: skip
        setattr(module, name, globals()[name])

    def refuse(name: str) -> Any:
        if name in REMOVED_IN_TRT11:
            raise removed(name)
        raise AttributeError(f"module 'tensorrt' has no attribute '{name}'")

    module.__getattr__ = refuse  # type: ignore[attr-defined]  # PEP 562
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module
