"""OpenVINO backend (CPU): the ONNX Runtime backend's pipeline with the stage graphs compiled by
OpenVINO, whose x86 INT8 kernels use AMX and VNNI.

It runs the FP32 stages and, for ``precision="int8"``, the symmetric s8 Q/DQ graph that
TensorRT builds from (``int8_graph="tensorrt"``): OpenVINO fuses each Q/DQ pair into its INT8
convolutions and products, so on the CPU it runs the graph the vehicle runs, on real integer
kernels. FP32 stays FP32: OpenVINO's default on AMX CPUs is bfloat16, a precision nothing here
evaluates, so the inference precision is pinned to f32. Before serving, the compiled stages must
pass the acceptance check on the bundle's golden inputs (``acceptance.py``), as a TensorRT
engine must. Install with the ``openvino`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..bundle import ModelBundle
from ..errors import BackendError
from . import acceptance
from .base import BackendOptions
from .ort import OrtBackend

#: precisions the backend runs; FP16 has no CPU arithmetic here (tensorrt runs it)
PRECISIONS = ("fp32", "int8")
#: how the CPU plugin compiles every stage: one stream, latency first, FP32 kept FP32
COMPILE_CONFIG = {
    "PERFORMANCE_HINT": "LATENCY",
    "NUM_STREAMS": 1,
    "INFERENCE_PRECISION_HINT": "f32",
}


def remedy(options: BackendOptions) -> str:
    """What a failed acceptance check advises, its settings written as ``options`` says."""
    return (
        f"Run another precision ({options.setting('precision', 'fp32')}), another OpenVINO "
        f"release, or the onnxruntime backend ({options.setting('backend', 'onnxruntime')})"
    )


#: oneDNN's ISA names by the /proc/cpuinfo flags they need, lowest first: the INT8 kernel
#: families differ at each step (AVX2 and AVX512_CORE multiply-add u8 x s8 into 16-bit sums,
#: the VNNI ones into 32-bit, AMX in tiles). Not SSE41: OpenVINO 2026.4's CPU plugin does not
#: compile the stages under it ("bad combination").
ONEDNN_ISAS: dict[str, tuple[str, ...]] = {
    "AVX2": ("avx2",),
    "AVX2_VNNI": ("avx2", "avx_vnni"),
    "AVX512_CORE": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "AVX512_CORE_VNNI": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"),
    "AVX512_CORE_AMX": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "amx_tile", "amx_int8"),
}
#: the variable oneDNN (and OpenVINO's CPU plugin) reads once, at load, to cap its ISA
ISA_VARIABLE = "ONEDNN_MAX_CPU_ISA"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def host_isas(flags: set[str] | None = None) -> list[str]:
    """The ONEDNN_ISAS this CPU has, lowest first (none on a CPU that is not x86)."""
    flags = cpu_flags() if flags is None else flags
    return [isa for isa, need in ONEDNN_ISAS.items() if flags.issuperset(need)]


def _import_openvino() -> Any:
    try:
        import openvino
    except ImportError as exc:
        raise BackendError(
            f"openvino is not installed ({exc}); pip install 'compactinst_ros[openvino]', or use "
            "the onnxruntime backend"
        ) from None
    return openvino


#: ONNX Runtime's name of each OpenVINO element type a stage's I/O has
_ORT_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "i64": "tensor(int64)"}


class _Port(NamedTuple):
    """A stage input or output: what the backend reads of ONNX Runtime's NodeArg (its name, and
    its type in ONNX Runtime's words)."""

    name: str
    type: str


def _ort_type(name: str) -> str:
    """ONNX Runtime's name of OpenVINO's element type ``name`` (its own name where unmapped)."""
    return _ORT_TYPES.get(name, f"tensor({name})")


class OpenVinoStage:
    """One stage graph compiled by OpenVINO's CPU plugin, with the calls ``OrtBackend`` makes of
    an ONNX Runtime session. A model is compiled per batch size, with static shapes: with the
    batch axis left dynamic the INT8 stages ran 20 % slower (9.7 against 8.1 ms, 2 threads)."""

    def __init__(self, openvino: Any, graph: Path | bytes, threads: int | None) -> None:
        """Read ``graph`` (a file or an ONNX graph's bytes) and compile it for batch 1."""
        self._core = openvino.Core()
        try:
            if isinstance(graph, bytes):
                self._model = self._core.read_model(graph, b"")
            else:
                self._model = self._core.read_model(str(graph))
        except RuntimeError as exc:
            where = "a derived graph" if isinstance(graph, bytes) else str(graph)
            raise BackendError(
                f"OpenVINO cannot read {where}: {exc}; re-export the bundle with "
                "'compactinst export'"
            ) from None
        self._config = dict(COMPILE_CONFIG)
        if threads is not None:
            if threads < 1:
                raise BackendError(f"threads={threads} must be >= 1 (or None for all cores)")
            self._config["INFERENCE_NUM_THREADS"] = threads
        self._inputs, self._outputs = (
            [_Port(p.any_name, _ort_type(p.get_element_type().get_type_name())) for p in ports]
            for ports in (self._model.inputs, self._model.outputs)
        )
        self._requests: dict[int, Any] = {}
        self._request(1)

    def _request(self, batch: int) -> Any:
        """The infer request of the model compiled for ``batch`` frames (compiled on first use)."""
        if batch not in self._requests:
            model = self._model.clone()
            model.reshape({  # the stage inputs are static but for the batch axis
                p.any_name: [batch, *(d.get_length() for d in list(p.get_partial_shape())[1:])]
                for p in model.inputs
            })  # fmt: skip
            compiled = self._core.compile_model(model, "CPU", self._config)
            self._requests[batch] = compiled.create_infer_request()
        return self._requests[batch]

    def run(self, names: Sequence[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs ``names`` (copies) for ``feed``, all of one batch size."""
        batch = next(iter(feed.values())).shape[0]
        result = self._request(batch).infer(feed)
        return [np.asarray(result[name]) for name in names]

    def get_inputs(self) -> list[_Port]:
        """The graph's inputs, in order."""
        return self._inputs

    def get_outputs(self) -> list[_Port]:
        """The graph's outputs, in order."""
        return self._outputs

    def get_providers(self) -> list[str]:
        """The device it runs on, in ONNX Runtime's terms."""
        return ["CPU"]


class OpenVinoBackend(OrtBackend):
    """The Backend protocol on OpenVINO's CPU plugin (fp32, or int8 on the TensorRT graph)."""

    name = "openvino"
    default_int8_graph = "tensorrt"

    def __init__(self, bundle: ModelBundle, options: BackendOptions | None = None) -> None:
        """Compile both stages, then hold them to the golden cases of their precision."""
        options = options or BackendOptions()
        if (options.precision or "fp32") not in PRECISIONS:
            raise BackendError(
                f"the openvino backend runs {' or '.join(PRECISIONS)}, not {options.precision}; "
                "fp16 runs on the tensorrt backend (or as a typed graph on onnxruntime)"
            )
        if options.providers:
            raise BackendError("providers are ONNX Runtime's; the openvino backend runs the CPU")
        super().__init__(bundle, options)
        self._accept(remedy(options))

    def _import_runtime(self) -> Any:
        """openvino (BackendError naming the extra when it is missing)."""
        return _import_openvino()

    def _open_stage(self, graph: Path | bytes, options: BackendOptions, fused: bool) -> Any:
        """One stage compiled by OpenVINO (always fused: it has no as-written mode)."""
        return OpenVinoStage(self._runtime, graph, options.threads)

    def _accept(self, advice: str) -> None:
        """BackendError (ending in ``advice``) unless the decoder outputs on the golden inputs
        agree with the typed graph's CPU outputs within the precision's tolerances (none
        recorded: nothing to do)."""
        cases = self.bundle.golden_cases(self.precision)
        outputs = [
            acceptance.graph_outputs(raw)
            for case in cases
            for raw in self.run_decoder(self.run_encoder(case.image))
        ]
        acceptance.check("decoder", self.precision, cases, outputs, engine="OpenVINO model",
                         remedy=advice)  # fmt: skip

    def describe(self) -> dict:
        """Backend name, openvino version, threads, device and precision."""
        return {
            "backend": self.name,
            "openvino_version": self._runtime.get_version(),
            "threads": self.threads,
            "device": "cpu",
            "precision": self.precision,
            **({"int8_graph": self.int8_graph} if self.precision == "int8" else {}),
        }
