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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import BundleError

#: operators that get Q/DQ in the TensorRT graph: TensorRT fuses Q/DQ into convolutions and matrix
#: products; elsewhere (normalisation, softmax, elementwise) a Q/DQ pair only adds rounding
QUANTIZED_OPS = ("Conv", "MatMul")
#: normalisations: an FP16 graph computes them in FP32 (a Cast to float before, back to half
#: after). A strongly typed TensorRT network computes a layer in its input's type, and a mean and
#: variance over hundreds of half values lose what the CPU reference (float) keeps
NORM_OPS = ("LayerNormalization", "InstanceNormalization", "GroupNormalization")
#: the steps a LayerNormalization becomes in the TensorRT graphs (``decompose_layer_norms``)
LAYER_NORM_STEPS = ("ReduceMean", "Sub", "Pow", "ReduceMeanVar", "AddEps", "Sqrt", "Div", "Mul",
                    "Add")  # fmt: skip


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
    #: whether Conv biases become INT32 Q/DQ (ONNX Runtime's default): TensorRT's dequantize
    #: layer takes only INT8/FP8/INT4 inputs, so its graph keeps them float
    quantize_bias: bool = True
    #: the TensorRT importer's rules: LayerNormalization decomposed, MatMul weights quantized on
    #: their output-channel axis or per tensor (``tensorrt_form``)
    tensorrt_form: bool = False
    #: NVIDIA Model Optimizer's placement (``modelopt.onnx.quantization``): Q/DQ only on the
    #: inputs of the quantized ops, never on their outputs, so a GEMM's bias, activation and
    #: residual add fold into its epilogue; the attention core and the GEMMs too small for INT8
    #: tensor cores left unquantized (``modelopt_exclusions``)
    modelopt_rules: bool = False
    #: the type of everything not quantized: "fp32", or "fp16" (Model Optimizer's
    #: ``high_precision_dtype``: half tensors and Q/DQ scales at opset 19, the normalisations
    #: FP32 islands as in ``fp16_graph``)
    high_precision: str = "fp32"


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
    "tensorrt": Int8Target("tensorrt", "s8", True, QUANTIZED_OPS, cpu_kernels=False,
                           quantize_bias=False, tensorrt_form=True, modelopt_rules=True,
                           high_precision="fp16"),
    "cpu": Int8Target("cpu", "u8", False, ("Conv", "Relu"), cpu_kernels=True,
                      dynamic_ops=("MatMul",)),
}
#: what one calibration run takes the ranges of: the tensors of every target's operators
CALIBRATION = Int8Target(
    "calibration", "s8", True,
    tuple(sorted({op for t in INT8_TARGETS.values() for op in t.ops})), cpu_kernels=False,
)  # fmt: skip


#: what the sensitivity pass measures (``quantize.sensitivity``): the TensorRT graph's exact
#: arithmetic with every Conv and MatMul quantized, inputs and outputs, as either graph may
#: quantize them (the CPU graph quantizes the small layers Model Optimizer's rules leave out of
#: the TensorRT graph), so a layer left out for its error is left out of both graphs
SENSITIVITY = replace(INT8_TARGETS["tensorrt"], name="sensitivity", modelopt_rules=False)


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


def decompose_layer_norms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every LayerNormalization written out as ReduceMean, Sub, Pow, ReduceMean,
    Add, Sqrt, Div, Mul, Add (same output name), and the names of the nodes that replaced them.

    Why: the LayerNormalization importer of the parser TensorRT 10.3 pins (onnx-tensorrt
    62bdde2a) calls setComputePrecision unguarded, which a strongly typed network rejects (the
    guard came in 10.6). The written-out form imports on every parser, and TensorRT's builder
    fuses it back into one normalisation layer. Opset 17 graphs (``axes`` attributes)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    nodes, added, inits = [], [], []
    for node in graph.node:
        if node.op_type != "LayerNormalization":
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axis = int(attrs.get("axis", -1))
        if axis >= 0:
            raise BundleError(f"LayerNormalization '{node.name}': axis {axis} must be negative "
                              "to be written out without the input's rank; re-export the model")
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else ""
        steps, names, consts = _written_out_norm(
            node, list(range(axis, 0)), node.input[1], bias, attrs.get("epsilon", 1e-5)
        )
        nodes += steps
        added += names
        inits += consts
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    return model, added


def _written_out_norm(
    node: onnx.NodeProto, axes: list[int], scale: str, bias: str, epsilon: float
) -> tuple[list[onnx.NodeProto], list[str], list[onnx.TensorProto]]:
    """The steps that replace normalisation ``node`` (LAYER_NORM_STEPS over ``axes``, then
    times ``scale`` and, where given, plus ``bias``; its output name kept): (nodes, their
    names, the constants they read)."""
    prefix = node.name or f"node_of_{node.output[0]}"
    name = {step: f"{prefix}/{step}" for step in LAYER_NORM_STEPS}
    out = {step: f"{name[step]}_output_0" for step in LAYER_NORM_STEPS}
    out["Add" if bias else "Mul"] = node.output[0]
    two, eps = f"{prefix}/two", f"{prefix}/epsilon"
    consts = [numpy_helper.from_array(np.array(2.0, np.float32), two),
              numpy_helper.from_array(np.array(epsilon, np.float32), eps)]  # fmt: skip
    x = node.input[0]
    steps = [
        ("ReduceMean", [x], {"axes": axes, "keepdims": 1}),
        ("Sub", [x, out["ReduceMean"]], {}),
        ("Pow", [out["Sub"], two], {}),
        ("ReduceMeanVar", [out["Pow"]], {"axes": axes, "keepdims": 1}),
        ("AddEps", [out["ReduceMeanVar"], eps], {}),
        ("Sqrt", [out["AddEps"]], {}),
        ("Div", [out["Sub"], out["Sqrt"]], {}),
        ("Mul", [out["Div"], scale], {}),
    ] + ([("Add", [out["Mul"], bias], {})] if bias else [])
    nodes = [
        helper.make_node({"ReduceMeanVar": "ReduceMean", "AddEps": "Add"}.get(step, step),
                         inputs, [out[step]], name=name[step], **kwargs)
        for step, inputs, kwargs in steps
    ]  # fmt: skip
    return nodes, [n.name for n in nodes], consts


def decompose_instance_norms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every InstanceNormalization whose scale and bias are constants written out
    as the same ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add steps over its
    spatial axes (same output name), and the names of the nodes that replaced them.

    Why: as an FP32 island in an FP16 graph, TensorRT runs InstanceNormalization as a kernel of
    its own on a float copy of its input (a cast kernel writes it, the norm reads it: 4 bytes a
    value twice, engine_report), while written-out reductions fuse with their casts, reading the
    half tensor once and accumulating in float, as the written-out layer norms do. PyTorch
    exports GroupNorm this way (Reshape, InstanceNormalization with constant ones and zeros,
    Reshape, Mul, Add)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    if not any(n.op_type == "InstanceNormalization" for n in graph.node):
        return model, []
    shapes = _shapes(model)
    constants = _constant_values(model)
    nodes, added, inits = [], [], []
    for node in graph.node:
        x = node.input[0] if node.input else ""
        rank = len(shapes.get(x, ()))
        if (node.op_type != "InstanceNormalization" or rank < 3
                or any(i not in constants for i in node.input[1:3])):  # fmt: skip
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        prefix = node.name or f"node_of_{node.output[0]}"
        per_channel = [-1] + [1] * (rank - 2)
        scale, bias = f"{prefix}/scale", f"{prefix}/bias"
        steps, names, consts = _written_out_norm(
            node, list(range(2 - rank, 0)), scale, bias, attrs.get("epsilon", 1e-5)
        )
        nodes += steps
        added += names
        inits += [
            *consts,
            numpy_helper.from_array(
                constants[node.input[1]].astype(np.float32).reshape(per_channel), scale
            ),
            numpy_helper.from_array(
                constants[node.input[2]].astype(np.float32).reshape(per_channel), bias
            ),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    return model, added


#: the largest group (values per group norm group) for which NVIDIA's builder (TensorRT for RTX
#: 1.7, SM86) ran the written-out two-pass norm as one kernel reading the half input once:
#: 8 x 32 x 48 = 12288 values did, 8 x 40 x 48 = 15360 split into two kernels and 16384 into five
#: with float copies (test_tensorrt_types.py pins both sides)
TWO_PASS_GROUP_VALUES = 12288


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by tensor name."""
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value)
    return constants


def decompose_group_norms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every group norm of PyTorch's export (Reshape to (N, G, -1), then an
    InstanceNormalization with constant scale and bias) written out from one pass of per-channel
    sums: each channel's mean and mean square over its spatial axes, their means per group, the
    variance as mean square minus squared mean, then (x - mean) / sqrt(variance + epsilon) on
    the reshaped tensor (same output name). Returns it and the names of the added nodes.

    Why: an FP16 graph's written-out two-pass norm (``decompose_instance_norms``) makes
    TensorRT's builder keep a float copy of the input and of its deviations (each reduction over
    a group's hundreds of thousands of values is split across blocks): 168 MB for CompactInst's
    refinement norm at the paper's 1024x2048 (256 x 128 x 256 values). Per-channel sums of the
    half input fuse into one reading kernel and the normalisation reads the half input again:
    50 MB, the floor of two reads and one write. The statistics stay float; the one-pass
    variance loses digits only where a channel's mean is thousands of its deviations. Groups of
    at most TWO_PASS_GROUP_VALUES values keep the two-pass form, which the builder runs as one
    kernel there."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    made_by = {o: n for n in graph.node for o in n.output}
    constants = _constant_values(model)
    shapes = _shapes(model)
    nodes, added, inits = [], [], []
    for node in graph.node:
        grouped = made_by.get(node.input[0]) if node.input else None
        x = grouped.input[0] if grouped is not None and grouped.op_type == "Reshape" else ""
        target = constants.get(grouped.input[1]) if x else None
        x_shape = shapes.get(x, ())
        if (node.op_type != "InstanceNormalization" or target is None or len(target) != 3
                or len(x_shape) < 3 or not x_shape[1] or not target[1]
                or x_shape[1] % int(target[1]) or list(target[::2]) not in ([0, -1], [1, -1])
                or any(i not in constants for i in node.input[1:3])):  # fmt: skip
            nodes.append(node)
            continue
        groups, channels = int(target[1]), int(x_shape[1])
        if all(x_shape[2:]) and channels // groups * int(np.prod(x_shape[2:])) <= (
            TWO_PASS_GROUP_VALUES
        ):
            nodes.append(node)  # small groups: the two-pass form runs as one kernel
            continue
        epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        prefix = f"{node.name or 'node_of_' + node.output[0]}/group_sums"
        spatial = list(range(2, len(x_shape)))
        names = ("ChannelMean", "Square", "ChannelMeanSquare", "ChannelMeans", "GroupMean",
                 "ChannelMeanSquares", "GroupMeanSquare", "SquaredMean", "Variance", "NonNegative",
                 "AddEps", "Sqrt", "Sub", "Div", "Mul", "Add")  # fmt: skip
        out = {step: f"{prefix}/{step}_output_0" for step in names}
        by_group, eps = f"{prefix}/by_group", f"{prefix}/epsilon"
        scale = constants[node.input[1]].astype(np.float32).reshape(groups, 1)
        bias = constants[node.input[2]].astype(np.float32).reshape(groups, 1)
        steps = [
            ("ChannelMean", "ReduceMean", [x], {"axes": spatial, "keepdims": 1}),
            ("Square", "Mul", [x, x], {}),
            ("ChannelMeanSquare", "ReduceMean", [out["Square"]], {"axes": spatial, "keepdims": 1}),
            ("ChannelMeans", "Reshape", [out["ChannelMean"], by_group], {}),
            ("GroupMean", "ReduceMean", [out["ChannelMeans"]], {"axes": [2], "keepdims": 1}),
            ("ChannelMeanSquares", "Reshape", [out["ChannelMeanSquare"], by_group], {}),
            ("GroupMeanSquare", "ReduceMean", [out["ChannelMeanSquares"]],
             {"axes": [2], "keepdims": 1}),
            ("SquaredMean", "Mul", [out["GroupMean"], out["GroupMean"]], {}),
            ("Variance", "Sub", [out["GroupMeanSquare"], out["SquaredMean"]], {}),
            ("NonNegative", "Relu", [out["Variance"]], {}),  # rounding may leave it below zero
            ("AddEps", "Add", [out["NonNegative"], eps], {}),
            ("Sqrt", "Sqrt", [out["AddEps"]], {}),
            ("Sub", "Sub", [node.input[0], out["GroupMean"]], {}),
            ("Div", "Div", [out["Sub"], out["Sqrt"]], {}),
        ]
        last = "Div"
        if not np.all(scale == 1):
            steps.append(("Mul", "Mul", [out[last], f"{prefix}/scale"], {}))
            inits.append(numpy_helper.from_array(scale, f"{prefix}/scale"))
            last = "Mul"
        if np.any(bias != 0):
            steps.append(("Add", "Add", [out[last], f"{prefix}/bias"], {}))
            inits.append(numpy_helper.from_array(bias, f"{prefix}/bias"))
            last = "Add"
        out[last] = node.output[0]
        for step, op, inputs, attrs in steps:
            name = f"{prefix}/{step}"
            nodes.append(helper.make_node(op, inputs, [out[step]], name=name, **attrs))
            added.append(name)
        inits += [
            numpy_helper.from_array(np.array([0, groups, channels // groups], np.int64), by_group),
            numpy_helper.from_array(np.array(epsilon, np.float32), eps),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    return model, added


def parser_form(model_bytes: bytes) -> bytes:
    """``model_bytes`` with its layer norms written out (``decompose_layer_norms``), the same
    bytes where it has none or is no ONNX model (the parser then says what is wrong)."""
    try:
        model = onnx.load_from_string(model_bytes)
    except Exception:  # protobuf's DecodeError
        return model_bytes
    if not any(n.op_type == "LayerNormalization" for n in model.graph.node):
        return model_bytes
    return serialize(decompose_layer_norms(model)[0])


def fp16_graph(
    model: onnx.ModelProto,
    islands: Iterable[str] = (),
    half_io: Iterable[str] = (),
    image: str = "",
) -> onnx.ModelProto:
    """``model`` with FP16 tensors and weights, FP32 I/O but for the inputs and outputs named in
    ``half_io`` (the features one stage hands the next: FP16 at both ends, so no stage writes a
    float copy for the other to cast back) and the input ``image`` where taking it in half is
    exact (``half_image_input``), its layer and instance norms written out
    (``decompose_layer_norms``, ``decompose_instance_norms``), every normalisation in FP32
    (``NORM_OPS``), and the nodes named in ``islands`` (the range analysis' FP32 layers,
    ``precision.check_bundle``) kept in FP32."""
    model, layer_norms = decompose_layer_norms(model)
    model, group_norms = decompose_group_norms(model)
    model, instance_norms = decompose_instance_norms(model)
    typed = _to_fp16(model, [*islands, *layer_norms, *group_norms, *instance_norms])
    _half_io(typed, set(half_io))
    half_image_input(typed, image)
    return typed


def half_image_input(model: onnx.ModelProto, name: str) -> bool:
    """Make graph input ``name`` FP16 in place where every node that reads it casts it to FP16
    first; returns whether it did.

    Only then is it exact: the caller's preprocessing rounds each value to half as that Cast
    did (to nearest, ties to even), and the engine's input is half the bytes (a 1088x1920 image:
    12.5 MB a frame written and read instead of 25). Where an FP32 island reads the image too,
    it would get half-rounded pixels, so the input stays FP32."""
    if name not in {value.name for value in model.graph.input}:
        return False
    readers = [node for node in model.graph.node if name in node.input]
    casts = [
        node for node in readers
        if node.op_type == "Cast"
        and next(a.i for a in node.attribute if a.name == "to") == TensorProto.FLOAT16
    ]  # fmt: skip
    if not readers or len(casts) != len(readers):
        return False
    _half_io(model, {name})
    return True


def _half_io(model: onnx.ModelProto, names: set[str]) -> None:
    """Make the graph inputs and outputs in ``names`` FP16 in place, removing the Casts the FP16
    conversion put at them: an input's Casts to FP16 (its consumers then read it directly; a
    Cast to FP32 of an FP32 island stays, now from FP16), an output's Cast from FP16 (its
    producer then writes the output; the graph's own FP32 readers of the output get a Cast of
    their own)."""
    graph = model.graph
    for value in graph.input:
        if value.name not in names:
            continue
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
        for node in [n for n in graph.node if n.op_type == "Cast" and value.name in n.input]:
            to = next(a for a in node.attribute if a.name == "to")
            if to.i == TensorProto.FLOAT16:
                _rename(graph, node.output[0], value.name)
                graph.node.remove(node)
    for value in graph.output:
        if value.name not in names:
            continue
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
        cast = next(n for n in graph.node if value.name in n.output)
        if cast.op_type != "Cast":
            continue
        readers = [n for n in graph.node if value.name in n.input]  # FP32 readers (an island)
        source = cast.input[0]
        graph.node.remove(cast)
        _rename(graph, source, value.name)
        if readers:  # a float copy for them alone, right after the producer (topological order)
            wide = f"{value.name}_float"
            for node in readers:
                node.input[:] = [wide if name == value.name else name for name in node.input]
            at = next(i for i, n in enumerate(graph.node) if value.name in n.output)
            widen = helper.make_node(
                "Cast", [value.name], [wide], f"{wide}_cast", to=TensorProto.FLOAT
            )
            graph.node.insert(at + 1, widen)


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every use and definition of tensor ``old`` in ``graph`` named ``new`` (its value_info
    dropped: the graph's input or output describes it)."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    kept = [v for v in graph.value_info if v.name != old]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def _to_fp16(model: onnx.ModelProto, keep_fp32: Iterable[str]) -> onnx.ModelProto:
    """onnxconverter-common's FP16 conversion with FP32 I/O: the nodes in ``keep_fp32`` and
    every normalisation (``NORM_OPS``) stay FP32 islands, Casts around them."""
    _import_tools("fp16")
    from onnxconverter_common import float16

    norms = [n.name for n in model.graph.node if n.op_type in NORM_OPS and n.name]
    with warnings.catch_warnings():  # it warns about every weight it clamps to the FP16 range
        warnings.simplefilter("ignore")
        typed = float16.convert_float_to_float16(
            model, keep_io_types=True, node_block_list=sorted({*keep_fp32, *norms})
        )
    _fix_casts(typed)
    return typed


#: Model Optimizer's smallest GEMM dimension worth INT8 tensor cores (``_MIN_MATMUL_DIM``)
MIN_INT8_GEMM_DIM = 16
#: the first opset whose QuantizeLinear / DequantizeLinear take FP16 scales
FP16_QDQ_OPSET = 19


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Shape of every tensor, by shape inference with data propagation at batch 1 (the batch
    axis fixed first, so Reshape targets computed from shapes resolve); None for a dimension
    it cannot tell."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_value = 1
    graph = onnx.shape_inference.infer_shapes(fixed, data_prop=True).graph
    shapes: dict[str, list[int | None]] = {i.name: list(i.dims) for i in graph.initializer}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.tensor_type.HasField("shape"):
            shapes[v.name] = [d.dim_value or None for d in v.type.tensor_type.shape.dim]
    return shapes


def modelopt_exclusions(model: onnx.ModelProto) -> dict[str, str]:
    """Conv and MatMul nodes NVIDIA Model Optimizer's INT8 rules leave unquantized, with why
    (``modelopt/onnx/quantization/graph_utils.py``: ``find_nodes_from_matmul_to_exclude``,
    ``find_nodes_from_convs_to_exclude``; its MHA partitions): a product of two activations
    (attention's QK^T and AV, which TensorRT fuses into one FP16 attention kernel), a GEMV
    (M or N of 1: no tensor cores), a GEMM with K or N below ``MIN_INT8_GEMM_DIM``, and a Conv
    with fewer than 16 input or output channels unless INT8 kernels take it (channels a
    multiple of 8 with a square kernel, where it is the first layer or the other side has 16)."""
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    inputs = {i.name for i in model.graph.input}
    shapes = _shapes(model)
    excluded = {}
    for node in model.graph.node:
        if node.op_type == "MatMul":
            a, out = shapes.get(node.input[0]), shapes.get(node.output[0])
            if not any(x in constants for x in node.input[:2]):
                excluded[node.name] = "a product of two activations (attention core)"
            elif not out or not a or len(out) < 2:
                continue
            elif 1 in out[-2:]:
                excluded[node.name] = f"a GEMV (output {out})"
            elif any(d is not None and d < MIN_INT8_GEMM_DIM for d in (a[-1], out[-1])):
                excluded[node.name] = (
                    f"a small GEMM (K {a[-1]}, N {out[-1]} < {MIN_INT8_GEMM_DIM})"
                )
        elif node.op_type == "Conv" and node.input[1] in shapes:
            out_c, in_c, *kernel = shapes[node.input[1]]
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if out_c >= 16 and in_c >= 16:
                continue
            square = len(set(kernel)) <= 1
            first = node.input[0] in inputs
            if group == 1 and (out_c % 8 == 0 or in_c % 8 == 0) and square and (
                first or max(out_c, in_c) >= 16
            ):
                continue
            excluded[node.name] = f"a Conv of {in_c} -> {out_c} channels (< 16)"
    return excluded


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
    fp32_islands: Sequence[str] = (),
) -> onnx.ModelProto:
    """ONNX Runtime's quantize_static in QDQ format with the ranges cached at ``ranges_path``
    (calibrated now from ``reader`` when the file does not exist yet), then its quantize_dynamic
    on the target's ``dynamic_ops``; nodes in ``exclude`` stay unquantized in both passes. A
    target with ``modelopt_rules`` quantizes no outputs and leaves ``modelopt_exclusions``
    unquantized too; one with FP16 ``high_precision`` is converted to opset 19 first and to FP16
    after (``fp32_islands``, like the FP16 graph's, and the normalisations kept FP32)."""
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
    decomposed: list[str] = []
    if target.tensorrt_form:
        given, decomposed = decompose_layer_norms(given)
    if target.high_precision == "fp16":  # FP32 islands that fuse with their casts
        given, instance_norms = decompose_instance_norms(given)
        decomposed += instance_norms
    exclude = list(exclude)
    options = {
        "ActivationSymmetric": target.symmetric_activations,
        "WeightSymmetric": True,
        "QuantizeBias": target.quantize_bias,
    }
    if target.modelopt_rules:
        exclude += sorted(set(modelopt_exclusions(given)) - set(exclude))
        options["OpTypesToExcludeOutputQuantization"] = list(target.ops)
    if target.high_precision == "fp16":
        from onnx import version_converter

        given = version_converter.convert_version(given, FP16_QDQ_OPSET)
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
                nodes_to_exclude=exclude,
                calibrate_method=methods[method],
                extra_options=options,
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
                    nodes_to_exclude=exclude,
                )
                out = dynamic
            typed = onnx.load(str(out))
    finally:
        root.setLevel(level)
    if target.tensorrt_form:
        per_tensor_off_axis_weights(typed)
    if target.high_precision == "fp16":
        typed = _to_fp16(typed, [*fp32_islands, *decomposed])
    return typed


def matmul_scales_fold(rank: int, index: int, axis: int) -> bool:
    """Whether per-channel scales on ``axis`` of a MatMul's constant input ``index`` (of
    ``rank`` >= 2) fold into an INT8 GEMM as TensorRT runs it: only on B's output columns (input
    1, its last axis). A (input 0) is taken per tensor only: no header or importer says TensorRT
    accepts its rows as output channels (the type-rule fixtures' ``matmul_weight_scales``)."""
    return index == 1 and axis == rank - 1


def per_channel_matmul_weights(
    node: onnx.NodeProto, made_by: dict[str, onnx.NodeProto], initialisers: dict
) -> Iterable[tuple[int, onnx.NodeProto, int]]:
    """(input index, its DequantizeLinear, scale axis) for each of MatMul ``node``'s two inputs
    that is a constant weight dequantized with per-channel scales. ``made_by`` maps a tensor to
    the node writing it, ``initialisers`` a name to its TensorProto. One walk for the variant
    that fixes such weights and the type rules that flag them."""
    for index, name in enumerate(node.input[:2]):
        dq = made_by.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in initialisers:
            continue
        weight, scale = initialisers[dq.input[0]], initialisers.get(dq.input[1])
        if scale is None or len(scale.dims) == 0 or len(weight.dims) < 2:
            continue
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % len(weight.dims)
        yield index, dq, axis


def per_tensor_off_axis_weights(model: onnx.ModelProto) -> list[str]:
    """Re-quantize per tensor (in place) every MatMul weight whose per-channel scales do not
    fold into an INT8 GEMM (matmul_scales_fold); returns those MatMuls' names.

    ONNX Runtime puts a MatMul weight's scales on axis 1 whichever input it is: right for a 2-D
    B (its columns are the outputs), the reduction axis for a 2-D A, whose scales then cannot be
    factored out of an INT8 GEMM's sums, so TensorRT cannot run it as one."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}
    readers: dict[str, int] = {}
    for n in graph.node:
        for name in n.input:
            readers[name] = readers.get(name, 0) + 1
    changed = []
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        for index, dq, axis in list(per_channel_matmul_weights(node, made_by, inits)):
            weight, scale = inits[dq.input[0]], inits[dq.input[1]]
            inits_of_dq = [x for x in dq.input if x in inits]
            if matmul_scales_fold(len(weight.dims), index, axis) or any(
                readers[x] > 1 for x in inits_of_dq
            ):
                continue
            q = numpy_helper.to_array(weight).astype(np.float32)
            shape = [1] * q.ndim
            shape[axis] = -1
            values = q * numpy_helper.to_array(scale).reshape(shape)
            step = float(np.abs(values).max()) / 127 or 1.0
            requantized = np.clip(np.rint(values / step), -127, 127).astype(np.int8)
            weight.CopyFrom(numpy_helper.from_array(requantized, weight.name))
            scale.CopyFrom(numpy_helper.from_array(np.array(step, np.float32), scale.name))
            if len(dq.input) > 2 and dq.input[2] in inits:
                point = inits[dq.input[2]]
                point.CopyFrom(numpy_helper.from_array(np.array(0, np.int8), point.name))
            for attribute in [a for a in dq.attribute if a.name == "axis"]:
                dq.attribute.remove(attribute)
            changed.append(node.name)
    return changed


def int8_graph(
    model: onnx.ModelProto,
    ranges_path: str | Path,
    target: str | Int8Target,
    exclude: Sequence[str] = (),
    method: str = "minmax",
    fp32_islands: Sequence[str] = (),
) -> onnx.ModelProto:
    """The INT8 Q/DQ graph of ``model`` for ``target`` (INT8_TARGETS, by name) from stored
    calibration ranges (ONNX Runtime's calibration cache JSON, which records ``method``: it must
    match); nodes in ``exclude`` stay unquantized (in the target's ``high_precision``, the nodes
    in ``fp32_islands`` in FP32)."""
    path = Path(ranges_path)
    if not path.is_file():
        raise BundleError(f"calibration ranges {path} are missing; re-run 'compactinst quantize'")
    try:
        recipe = INT8_TARGETS[target] if isinstance(target, str) else target
        return quantize(model, path, recipe, exclude, method=method, fp32_islands=fp32_islands)
    except ValueError as exc:  # the quantizer's words for a tensor the ranges do not cover
        if "quantization params" not in str(exc).lower():
            raise
        raise BundleError(
            f"calibration ranges {path} do not cover every tensor the {recipe.name} INT8 graph "
            f"quantizes ({exc}); they predate its recipe: re-run 'compactinst quantize'"
        ) from None


def serialize(model: onnx.ModelProto) -> bytes:
    """Deterministic bytes of a derived graph (what its sha256 is taken over)."""
    return model.SerializeToString(deterministic=True)
