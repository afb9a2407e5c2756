"""Typed stage graphs: FP16 (FP32 islands) and INT8 Q/DQ, derived from a bundle's FP32 graphs.

Both derivations are deterministic functions of the FP32 graph and a small recipe that the
bundle stores (``bundle.json`` "variants"): the FP16 graph from the FP32 islands, the INT8
graphs from ONNX Runtime calibration ranges and the layers left unquantized. The bundle stays
small (the graphs are not stored) and a load checks the derived graph's sha256, so what runs is
what was evaluated. The tools are maintained ones (docs/gpu.md, "Typed graphs"):
onnxconverter-common's ``convert_float_to_float16`` and ONNX Runtime's ``quantize_static``
(and, for the CPU graph's MatMuls, ``quantize_dynamic``).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from .errors import BundleError

#: operators that get Q/DQ in the TensorRT graph: TensorRT fuses Q/DQ into convolutions and matrix
#: products; elsewhere (normalisation, softmax, elementwise) a Q/DQ pair only adds rounding
QUANTIZED_OPS = ("Conv", "MatMul")


@dataclass(frozen=True)
class Int8Target:
    """The quantisation types of one INT8 graph."""

    name: str
    activations: str  # "s8" (zero point 0) or "u8"
    symmetric_activations: bool
    ops: tuple[str, ...]  # the operators that get Q/DQ
    #: ONNX Runtime runs the graph on its fused int8 kernels (what the CPU runs), or as written:
    #: Q/DQ around FP32 ops, the exact arithmetic of its target on any CPU
    cpu_kernels: bool
    #: operators with constant weights that ONNX Runtime's quantize_dynamic then makes integer
    #: products, their input's range taken per run (no calibration)
    dynamic_ops: tuple[str, ...] = ()


#: the TensorRT graph (its rule: symmetric s8 everywhere) and the fastest x86 CPU graph (u8
#: activations, s8 weights: the VNNI kernels take u8 x s8), both from one calibration. The CPU
#: graph quantizes convolutions and the ReLUs after them: with asymmetric u8 activations the
#: quantizer removes such a ReLU and gives the conv's output the ReLU's range, so no
#: dequantize -> FP32 ReLU -> quantize is left between two quantized convs. Its MatMuls with
#: weights are quantized dynamically (DynamicQuantizeMatMul: u8 x s8 on VNNI or AMX, bias fused):
#: with static Q/DQ around them they ran slower than FP32, the dequantize of every output costing
#: more than the integer product saved (docs/gpu.md, "Typed graphs"). The
#: TensorRT graph's CPU outputs (its sensitivity pass, golden cases and accuracy) come from its
#: Q/DQ arithmetic as written, which TensorRT's int32 accumulation reproduces: ONNX Runtime's
#: fused x86 kernels saturate 16-bit sums on CPUs without VNNI, so their outputs, and with them
#: the layers the sensitivity pass kept in FP32, depended on the machine that calibrated.
INT8_TARGETS = {
    "tensorrt": Int8Target("tensorrt", "s8", True, QUANTIZED_OPS, cpu_kernels=False),
    "cpu": Int8Target("cpu", "u8", False, ("Conv", "Relu"), cpu_kernels=True,
                      dynamic_ops=("MatMul",)),
}
#: what one calibration run takes the ranges of: the tensors of every target's operators
CALIBRATION = Int8Target(
    "calibration", "s8", True,
    tuple(sorted({op for t in INT8_TARGETS.values() for op in t.ops})), cpu_kernels=False,
)  # fmt: skip


def runs_fused(precision: str, int8_graph: str = "tensorrt") -> bool:
    """Whether ONNX Runtime runs ``precision``'s graph (int8: ``int8_graph``'s) on its fused
    kernels (with graph optimisation) or as written (``Int8Target.cpu_kernels``)."""
    return precision != "int8" or INT8_TARGETS[int8_graph].cpu_kernels


def _import_tools(what: str) -> None:
    """BundleError naming the package when a derivation tool is missing."""
    try:
        if what == "fp16":
            import onnxconverter_common  # noqa: F401
        else:
            import onnxruntime.quantization  # noqa: F401
    except ImportError as exc:
        raise BundleError(
            f"deriving the {what} graphs needs {exc.name}: pip install "
            "'compactinst_ros[precision]' (onnxconverter-common, onnxruntime>=1.32)"
        ) from None


def tool_versions() -> dict[str, str]:
    """Versions of the derivation tools: a derived graph's bytes depend on them."""
    import onnxruntime

    versions = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
    try:
        import onnxconverter_common

        versions["onnxconverter-common"] = onnxconverter_common.__version__
    except ImportError:
        pass
    return versions


def _fix_casts(model: onnx.ModelProto) -> int:
    """Point each ``Cast`` whose output the conversion typed float16 at float16; returns how many.

    convert_float_to_float16 retypes a Cast's output value (bool -> float in the decoder's query
    proposal) but keeps ``to=FLOAT``, so ONNX Runtime refuses the graph ("Cast outputs float16
    where float is expected")."""
    typed = {
        v.name: v.type.tensor_type.elem_type
        for v in [*model.graph.value_info, *model.graph.output]
    }
    fixed = 0
    for node in model.graph.node:
        if node.op_type != "Cast":
            continue
        to = next(a for a in node.attribute if a.name == "to")
        if to.i == TensorProto.FLOAT and typed.get(node.output[0]) == TensorProto.FLOAT16:
            to.i = TensorProto.FLOAT16
            fixed += 1
    return fixed


def fp16_graph(model: onnx.ModelProto, islands: Iterable[str] = ()) -> onnx.ModelProto:
    """``model`` with FP16 tensors and weights, FP32 I/O, and the nodes named in ``islands``
    (the range analysis' FP32 layers, ``precision.check_bundle``) kept in FP32."""
    _import_tools("fp16")
    from onnxconverter_common import float16

    with warnings.catch_warnings():  # it warns about every weight it clamps to the FP16 range
        warnings.simplefilter("ignore")
        typed = float16.convert_float_to_float16(
            model, keep_io_types=True, node_block_list=sorted(islands)
        )
    _fix_casts(typed)
    return typed


def quantizable_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that get Q/DQ in the TensorRT graph (QUANTIZED_OPS), in graph order:
    the CPU graph's are a subset."""
    return [n.name for n in model.graph.node if n.op_type in QUANTIZED_OPS]


def pre_processed(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` through ONNX Runtime's ``quant_pre_process`` (shape inference and its basic
    graph optimisations). It folds the frozen BatchNorm's Mul/Add into the convolutions, so each
    one runs as a single quantized kernel instead of an INT8 conv with FP32 Mul/Add after it."""
    _import_tools("int8")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="compactinst_q.") as tmp:
        out = Path(tmp) / "pre.onnx"
        quant_pre_process(model, out)
        return onnx.load(str(out))


def int8_source(model: onnx.ModelProto, pre_process: bool) -> onnx.ModelProto:
    """The graph a stage's INT8 graphs are calibrated and quantized from: its FP32 graph,
    ``pre_processed`` where the recipe asks for it."""
    return pre_processed(model) if pre_process else model


def quantize(
    model: onnx.ModelProto,
    ranges_path: Path,
    target: Int8Target,
    exclude: Sequence[str],
    reader: object | None = None,
    method: str = "minmax",
) -> onnx.ModelProto:
    """ONNX Runtime's quantize_static in QDQ format with the ranges cached at ``ranges_path``
    (calibrated now from ``reader`` when the file does not exist yet), then its quantize_dynamic
    on the target's ``dynamic_ops``; nodes in ``exclude`` stay FP32 in both passes."""
    _import_tools("int8")
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }
    activation = QuantType.QInt8 if target.activations == "s8" else QuantType.QUInt8
    # A calibration run turns the given model's weights into external-data references to a
    # temporary file it then deletes: it gets a copy, so the caller's model stays usable
    given = onnx.ModelProto()
    given.CopyFrom(model)
    root = logging.getLogger()  # the quantizer logs a pre-processing hint on every call
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="compactinst_q.") as tmp:
            out = Path(tmp) / "int8.onnx"
            quantize_static(
                given,
                out,
                calibration_data_reader=reader,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(target.ops),
                per_channel=True,
                activation_type=activation,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=list(exclude),
                calibrate_method=methods[method],
                extra_options={
                    "ActivationSymmetric": target.symmetric_activations,
                    "WeightSymmetric": True,
                },
                calibration_cache_path=ranges_path,
            )
            if target.dynamic_ops:
                dynamic = Path(tmp) / "dynamic.onnx"
                quantize_dynamic(
                    onnx.load(str(out)),
                    dynamic,
                    op_types_to_quantize=list(target.dynamic_ops),
                    per_channel=True,
                    weight_type=QuantType.QInt8,
                    nodes_to_exclude=list(exclude),
                )
                out = dynamic
            return onnx.load(str(out))
    finally:
        root.setLevel(level)


def int8_graph(
    model: onnx.ModelProto,
    ranges_path: str | Path,
    target: str,
    exclude: Sequence[str] = (),
    method: str = "minmax",
) -> onnx.ModelProto:
    """The INT8 Q/DQ graph of ``model`` for ``target`` (INT8_TARGETS) from stored calibration
    ranges (ONNX Runtime's calibration cache JSON, which records ``method``: it must match);
    nodes in ``exclude`` stay FP32."""
    path = Path(ranges_path)
    if not path.is_file():
        raise BundleError(f"calibration ranges {path} are missing; re-run 'compactinst quantize'")
    try:
        return quantize(model, path, INT8_TARGETS[target], exclude, method=method)
    except ValueError as exc:  # the quantizer's words for a tensor the ranges do not cover
        if "quantization params" not in str(exc).lower():
            raise
        raise BundleError(
            f"calibration ranges {path} do not cover every tensor the {target} INT8 graph "
            f"quantizes ({exc}); they predate its recipe: re-run 'compactinst quantize'"
        ) from None


def serialize(model: onnx.ModelProto) -> bytes:
    """Deterministic bytes of a derived graph (what its sha256 is taken over)."""
    return model.SerializeToString(deterministic=True)
