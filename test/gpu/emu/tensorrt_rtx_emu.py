"""Test-only stand-in for the part of TensorRT for RTX's Python API that backends/rtx.py and
rtx_build.py use beyond TensorRT's, on top of tensorrt_emu's builder and engines: AOT plans
that record the compute capability they were built for and load only on a GPU of it, runtime
configs, and a runtime cache that holds the kernels JIT-compiled when a context is made (and is
refused on another GPU). The real module builds on any CPU (test/backends/test_real_builder.py)
but runs only on an RTX GPU; test_api_names.py checks every name here against it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
import sys
import types
from typing import Any

import tensorrt_emu
from tensorrt_emu import Builder, BuilderConfig, Engine, ExecutionContext, Network, Runtime


class ComputeCapability(enum.IntEnum):
    """The AOT targets of TensorRT for RTX 1.7 on Linux x86-64."""

    SM75 = 75
    SM80 = 80
    SM86 = 86
    SM89 = 89
    SM120 = 120
    SM121 = 121


class ProfilingVerbosity(enum.IntEnum):
    """How much layer information an engine keeps."""

    LAYER_NAMES_ONLY = 0
    NONE = 1
    DETAILED = 2


class ILogger:
    """Logger base class of the bindings (a subclass's ``log`` gets every message); the
    stand-in produces no messages."""

    class Severity(enum.IntEnum):
        """Message severities."""

        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def __init__(self) -> None:
        pass


class RtxBuilderConfig(BuilderConfig):
    """A builder config that also takes the AOT compute capabilities and profiling detail."""

    _FIELDS = BuilderConfig._FIELDS | {
        "profiling_verbosity", "num_compute_capabilities", "compute_capabilities"
    }  # fmt: skip

    def __init__(self, device: bytes) -> None:
        super().__init__(device)
        self.profiling_verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY
        self.num_compute_capabilities = 0
        self.compute_capabilities: dict[int, ComputeCapability] = {}

    def set_compute_capability(self, cc: ComputeCapability, index: int) -> bool:
        """Target ``cc`` in slot ``index`` (below ``num_compute_capabilities``)."""
        if not 0 <= index < self.num_compute_capabilities:
            return False
        self.compute_capabilities[index] = ComputeCapability(cc)
        return True


class RtxBuilder(Builder):
    """Builds plans for the configured compute capability, which the plan records (the real
    AOT build needs no GPU; a plan loads only on a GPU of that capability)."""

    def create_builder_config(self) -> RtxBuilderConfig:
        """A fresh config; the compute capabilities are set by the caller."""
        return RtxBuilderConfig(f"emulated-{self.device}".encode())

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> bytes | None:
        """The TensorRT stand-in's plan behind the compute capability it targets."""
        assert isinstance(config, RtxBuilderConfig)
        if config.num_compute_capabilities != 1 or 0 not in config.compute_capabilities:
            return None
        plan = super().build_serialized_network(network, config)
        if plan is None:
            return None
        return RTX_MAGIC + struct.pack("<I", int(config.compute_capabilities[0])) + plan


RTX_MAGIC = b"EMURTX01"
RUNTIME_CACHE_MAGIC = b"EMURTC01"
#: kernels "compiled" at first load so far (a test checks that a warm runtime cache skips them)
jit_compiles = 0


class RuntimeCache:
    """Compiled kernels of the GPU it was made on: the engines whose kernels it holds."""

    def __init__(self, device: bytes) -> None:
        self.device = device
        self.engines: set[str] = set()

    def serialize(self) -> bytes:
        """Header, device, the engines held."""
        body = json.dumps({"device": self.device.decode(), "engines": sorted(self.engines)})
        return RUNTIME_CACHE_MAGIC + body.encode()

    def deserialize(self, blob: bytes) -> bool:
        """Load ``blob``; False (unchanged) for another GPU or foreign bytes."""
        blob = bytes(blob)
        if not blob.startswith(RUNTIME_CACHE_MAGIC):
            return False
        try:
            body = json.loads(blob[len(RUNTIME_CACHE_MAGIC) :])
        except ValueError:
            return False
        if body.get("device") != self.device.decode():
            return False
        self.engines |= set(body["engines"])
        return True


class RuntimeConfig:
    """How a context is made: its allocation strategy and the runtime cache it compiles into."""

    def __init__(self, engine: RtxEngine) -> None:
        self.engine = engine
        self.strategy: int | None = None
        self.cache: RuntimeCache | None = None

    def set_execution_context_allocation_strategy(self, strategy: int) -> None:
        """Who allocates the context's activation memory."""
        self.strategy = strategy

    def create_runtime_cache(self) -> RuntimeCache:
        """An empty runtime cache of the current device."""
        return RuntimeCache(self.engine.device)

    def set_runtime_cache(self, cache: RuntimeCache) -> bool:
        """Compile into ``cache``; False for a cache of another device."""
        if cache.device != self.engine.device:
            return False
        self.cache = cache
        return True


class RtxEngine(Engine):
    """An engine whose kernels are compiled for the GPU when a context is made (JIT), unless
    the context's runtime cache already holds them."""

    def __init__(self, onnx_bytes: bytes, profiles: list[dict], device: bytes) -> None:
        super().__init__(onnx_bytes, profiles)
        self.device = device
        self.digest = hashlib.sha256(onnx_bytes).hexdigest()

    def create_runtime_config(self) -> RuntimeConfig:
        """A runtime config for contexts of this engine."""
        return RuntimeConfig(self)

    def create_execution_context(self, config: Any = None) -> ExecutionContext:
        """A context: from a RuntimeConfig (its strategy, its cache) or, as TensorRT's, from an
        allocation strategy; JIT-compiles the kernels the cache does not hold."""
        global jit_compiles
        if isinstance(config, RuntimeConfig):
            if config.cache is None or self.digest not in config.cache.engines:
                jit_compiles += 1
            if config.cache is not None:
                config.cache.engines.add(self.digest)
            return ExecutionContext(self, config.strategy)
        jit_compiles += 1
        return ExecutionContext(self, config)


class RtxRuntime(Runtime):
    """Loads RTX plans built for the current device's compute capability; None otherwise (the
    real runtime logs that the plan is not for this GPU)."""

    def deserialize_cuda_engine(self, plan: bytes) -> Engine | None:
        """The engine of ``plan`` on the current device, or None."""
        plan = bytes(plan)
        if not plan.startswith(RTX_MAGIC):
            return None
        (cc,) = struct.unpack("<I", plan[len(RTX_MAGIC) : len(RTX_MAGIC) + 4])
        major, minor = getattr(sys.modules.get("pycuda_emu"), "_compute_capability", (0, 0))
        if cc != major * 10 + minor:
            return None
        device = f"emulated-{tensorrt_emu.current_device()}-sm{cc}".encode()
        return tensorrt_emu._engine_of(
            plan[len(RTX_MAGIC) + 4 :], lambda data, profiles: RtxEngine(data, profiles, device)
        )


def install(monkeypatch: Any, version: str = "1.7.1.116") -> types.ModuleType:
    """Make ``import tensorrt_rtx`` give the stand-in of TensorRT for RTX for one test: the
    TensorRT stand-in's builder and engines, plus AOT compute capabilities recorded in the plan,
    runtime configs and a runtime cache (the real module builds here, but runs only on a GPU).
    Its parser applies TensorRT 10.16's rules, the nearest TensorRT to its onnx-tensorrt."""
    import importlib.machinery

    path = tensorrt_emu.rules_file("10.16")
    monkeypatch.setattr(tensorrt_emu, "type_rules", json.loads(path.read_text()) if path else None)
    monkeypatch.setattr(sys.modules[__name__], "jit_compiles", 0)
    module = types.ModuleType("tensorrt_rtx")
    module.__spec__ = importlib.machinery.ModuleSpec("tensorrt_rtx", None)
    module.__version__ = version  # type: ignore[attr-defined]
    module.__stand_in__ = True  # type: ignore[attr-defined]
    for name in (
        "BuilderFlag", "DataType", "ExecutionContextAllocationStrategy", "IOptimizationProfile",
        "IProgressMonitor", "Logger", "MemoryPoolType", "NetworkDefinitionCreationFlag",
        "OnnxParser", "nptype",
    ):  # fmt: skip
        setattr(module, name, getattr(tensorrt_emu, name))
    for name in ("ComputeCapability", "ILogger", "ProfilingVerbosity"):
        setattr(module, name, globals()[name])
    module.Builder = RtxBuilder  # type: ignore[attr-defined]
    module.Runtime = RtxRuntime  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", module)
    return module
