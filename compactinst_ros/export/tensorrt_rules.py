"""The TensorRT ONNX parser's rules, checked on an exported graph without TensorRT.

TensorRT runs only on the vehicle, so a graph that the parser of JetPack 6.1/6.2's TensorRT 10.3
rejects would otherwise surface there, at the first engine build. Sources: onnx-tensorrt
``docs/operators.md`` and ``onnxOpImporters.cpp`` as TensorRT 10.3 pins them (commit 62bdde2a of
release/10.3's ``parsers/onnx``: its opset range 9 to 20 and per-operator restrictions), which
TensorRT 10.x changed from the 8.5 edition: TopK's K may be a tensor (below 3840), Conv weights
and InstanceNormalization's scale and bias may be tensors, Slice's ``axes`` may be computed
(10.1 still asserted known values; 10.3 dropped that), while the ``axes`` of Pad and of every
Reduce operator must be initializers, Resize gained attribute rules (aspect ratio policy
``stretch``, no antialiasing, ``axes`` an iota when ``scales`` is a tensor), LayerNormalization
may only have its output ``Y``, pooling has no dilations, GridSample's input must be 4D,
ScatterND has no ``reduction``, Q/DQ zero points must be zero and scales positive, one per
channel. Where the page is stricter than the importer's code (cubic Resize, 1D pooling, TopK's
``sorted``), the code is followed: NVIDIA's own parser (TensorRT for RTX) imports those too
(test/export/test_parser_agreement.py). A graph that meets them is expected to import on
TensorRT 10.3, which only an engine build on the vehicle proves.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

OPSET_RANGE = (9, 20)

#: Operators the parser imports ("Y" in 10.3's support matrix).
SUPPORTED_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan",
    "Atanh", "AveragePool", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip",
    "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum",
    "DeformConv", "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu",
    "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "Gather", "GatherElements",
    "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool",
    "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization", "GRU", "Hardmax",
    "HardSigmoid", "HardSwish", "Identity", "If", "ImageScaler", "InstanceNormalization",
    "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log",
    "LogSoftmax", "Loop", "LRN", "LSTM", "LpNormalization", "LpPool", "MatMul", "Max",
    "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul", "Neg",
    "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "Pad", "ParametricSoftplus", "Pow",
    "PRelu", "QuantizeLinear", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence", "RNN", "RoiAlign",
    "Round", "ScaledTanh", "Scan", "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "Softplus",
    "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh",
    "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Upsample", "Where",
    "Xor"
})  # fmt: skip

REDUCE_OPS = (
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
)  # fmt: skip

#: Inputs that must be known at build time (an initializer or a Constant node's output).
CONSTANT_INPUTS = {
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "CumSum": {1: "axis"},
    "Pad": {3: "axes"},
    "OneHot": {1: "depth"},
    "Dropout": {2: "training_mode"},
    **{op: {1: "axes"} for op in REDUCE_OPS},
}

#: the page lists nearest and linear; the importer also maps "cubic" (onnxOpImporters.cpp,
#: Resize: ``mode == "cubic"`` -> InterpolationMode::kCUBIC)
RESIZE_MODES = {"nearest", "linear", "cubic"}
RESIZE_COORDINATES = {
    "half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners",
}  # fmt: skip
RESIZE_NEAREST = {"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"}
POOLING_OPS = ("AveragePool", "MaxPool", "LpPool")
#: TopK's K must be below this.
TOPK_MAX_K = 3840
#: Constant node attributes the parser does not import.
CONSTANT_UNSUPPORTED = ("sparse_value", "value_string", "value_strings")
#: Zero-point inputs that must be zero: TensorRT quantizes symmetrically.
ZERO_POINTS = {"QuantizeLinear": "y_zero_point", "DequantizeLinear": "x_zero_point"}


def _attribute(node: onnx.NodeProto, name: str, default: str) -> str:
    for attr in node.attribute:
        if attr.name == name:
            return attr.s.decode()
    return default


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    """An int or ints attribute as a list; None when absent."""
    for attr in node.attribute:
        if attr.name == name:
            return list(attr.ints) if attr.ints else [attr.i]
    return None


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    """An int attribute; ``default`` when absent."""
    return (_ints(node, name) or [default])[0]


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Rank of every tensor whose shape ONNX shape inference knows (graph inputs included)."""
    import onnx

    graph = onnx.shape_inference.infer_shapes(model).graph
    return {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in [*graph.input, *graph.value_info, *graph.output]
        if v.type.tensor_type.HasField("shape")
    }


def _value(constants: dict[str, object], name: str) -> np.ndarray | None:
    """The value of constant ``name`` as an array; None where it is unknown."""
    from onnx import numpy_helper

    proto = constants.get(name)
    return None if proto is None else numpy_helper.to_array(proto)


def _node_issues(
    node: onnx.NodeProto, constants: dict[str, object], ranks: dict[str, int]
) -> list[str]:
    """The restrictions of the 10.x support matrix that ``node`` breaks."""
    op, issues = node.op_type, []
    for index, role in CONSTANT_INPUTS.get(op, {}).items():
        if index < len(node.input) and node.input[index] and node.input[index] not in constants:
            issues.append(f"input '{role}' must be an initializer for TensorRT")
    if op == "Resize":
        mode = _attribute(node, "mode", "nearest")
        coordinates = _attribute(node, "coordinate_transformation_mode", "half_pixel")
        nearest = _attribute(node, "nearest_mode", "round_prefer_floor")
        if mode not in RESIZE_MODES or coordinates not in RESIZE_COORDINATES:
            issues.append(f"mode '{mode}' with '{coordinates}' is not supported")
        if mode == "nearest" and nearest not in RESIZE_NEAREST:
            issues.append(f"nearest_mode '{nearest}' is not supported")
        policy = _attribute(node, "keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            issues.append(f"keep_aspect_ratio_policy '{policy}' is not supported (only stretch)")
        if _int(node, "antialias", 0):
            issues.append("antialiasing is not supported")
        axes, scales = _ints(node, "axes"), node.input[2] if len(node.input) > 2 else ""
        if axes is not None and scales and scales not in constants:
            rank = ranks.get(node.input[0], len(axes))
            if axes != list(range(rank)):
                issues.append(f"axes {axes} must be 0..{rank - 1} when 'scales' is a tensor")
    elif op in POOLING_OPS:
        kernel = _ints(node, "kernel_shape") or []
        # 1D pooling imports too: poolingHelper (importerUtils.cpp) unsqueezes a 3D input
        if op != "LpPool" and len(kernel) not in (1, 2, 3):
            issues.append(f"{len(kernel)}D pooling is not supported (1D, 2D or 3D only)")
        if any(d != 1 for d in _ints(node, "dilations") or []):
            issues.append(f"dilations {_ints(node, 'dilations')} are not supported (all ones)")
        if op == "MaxPool" and len(node.output) > 1 and node.output[1]:
            issues.append("the Indices output is not supported")
    elif op == "TopK":  # the importer never reads ``sorted``: TensorRT's TopK always sorts
        k = _value(constants, node.input[1]) if len(node.input) > 1 else None
        if k is not None and int(k.reshape(-1)[0]) >= TOPK_MAX_K:
            issues.append(f"K = {int(k.reshape(-1)[0])} must be below {TOPK_MAX_K}")
    elif op == "LayerNormalization" and any(node.output[1:]):
        issues.append("only the first output Y is supported (Mean and InvStdDev are not)")
    elif op == "GridSample" and ranks.get(node.input[0], 4) != 4:
        issues.append(f"the input must be 4D, not {ranks[node.input[0]]}D")
    elif op == "ScatterND" and _attribute(node, "reduction", "none") != "none":
        issues.append(f"reduction '{_attribute(node, 'reduction', 'none')}' is not supported")
    elif op == "LSTM" and (_int(node, "input_forget", 0) or _int(node, "layout", 0)):
        issues.append("input_forget and layout must be 0")
    elif op == "Constant":
        unsupported = [a.name for a in node.attribute if a.name in CONSTANT_UNSUPPORTED]
        if unsupported:
            issues.append(f"attribute {unsupported[0]} is not supported")
    elif op == "Dropout" and len(node.input) > 2:
        training = _value(constants, node.input[2])
        if training is not None and bool(training.reshape(-1)[0]):
            issues.append("training_mode must be False")
    if op in ZERO_POINTS and len(node.input) > 2 and node.input[2]:
        point = _value(constants, node.input[2])
        if point is None or np.any(point != 0):
            issues.append(f"{ZERO_POINTS[op]} must be a zero initializer (symmetric quantization)")
    if op in ZERO_POINTS:
        issues += _scale_issues(node, constants)
    return issues


def _scale_issues(node: onnx.NodeProto, constants: dict[str, object]) -> list[str]:
    """The Q/DQ importer's checks of a scale (onnxOpImporters.cpp, QuantDequantLinearHelper):
    every coefficient positive, as many as zero points, and per channel one for each channel
    of a constant input along ``axis``."""
    scale = _value(constants, node.input[1]) if len(node.input) > 1 else None
    if scale is None:
        return []
    issues = []
    if np.any(scale <= 0):
        issues.append("scale coefficients must all be positive")
    point = _value(constants, node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if point is not None and point.size != scale.size:
        issues.append(f"{scale.size} scales but {point.size} zero points: they must match")
    data = _value(constants, node.input[0])
    if data is not None and scale.size > 1:
        axis = _int(node, "axis", 1) % data.ndim
        if data.shape[axis] != scale.size:
            issues.append(f"{scale.size} scales for {data.shape[axis]} channels on axis {axis}")
    return issues


def parser_issues(model: onnx.ModelProto) -> list[str]:
    """What in ``model`` breaks a documented rule of the TensorRT ONNX parser (empty: none)."""
    import onnx

    graph = model.graph
    issues = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not OPSET_RANGE[0] <= opset <= OPSET_RANGE[1]:
        issues.append(f"opset {opset} is outside TensorRT 10's {OPSET_RANGE[0]}..{OPSET_RANGE[1]}")
    #: build-time constants: name -> TensorProto (None where the value is not in the file)
    constants: dict[str, object] = {
        i.name: i if i.data_location != onnx.TensorProto.EXTERNAL else None
        for i in graph.initializer
    }
    for node in graph.node:  # nodes are topologically sorted: producers come first
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            constants[node.output[0]] = value
        elif node.op_type == "Identity" and node.input and node.input[0] in constants:
            constants[node.output[0]] = constants[node.input[0]]
    ranked = any(n.op_type in ("GridSample", "Resize") for n in graph.node)
    ranks = _ranks(model) if ranked else {}
    for node in graph.node:
        where = f"{node.op_type} node '{node.name}'"
        if node.op_type not in SUPPORTED_OPS:
            issues.append(f"{where}: not in the TensorRT ONNX parser's support matrix")
            continue
        issues += [f"{where}: {issue}" for issue in _node_issues(node, constants, ranks)]
    return issues


def file_issues(path: str | Path) -> list[str]:
    """``parser_issues`` of an ONNX file (weights are not loaded)."""
    import onnx

    return parser_issues(onnx.load(str(path), load_external_data=False))


#: ONNX element types by the names TensorRT's support matrix uses
ONNX_TYPE_NAMES = {
    1: "FP32", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "FP16", 16: "BF16",
    17: "FP8", 18: "FP8", 19: "FP8", 20: "FP8", 22: "INT4", 23: "FP4",
}  # fmt: skip
#: operators whose first input the matrix's types describe (others read indices, shapes, masks)
TYPED_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Relu", "Softmax", "Conv", "MatMul", "Gemm",
    "LayerNormalization", "InstanceNormalization", "GroupNormalization", "ReduceMean", "ReduceSum",
    "ReduceMax", "Resize", "MaxPool", "AveragePool", "Sigmoid", "Erf", "Tanh",
})  # fmt: skip
#: normalisations: in a strongly typed network they compute in their input's type
NORMALIZATIONS = ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "ReduceMean")


def _types(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` after ONNX shape inference, and every typed tensor's type name."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {
        v.name: ONNX_TYPE_NAMES.get(v.type.tensor_type.elem_type, str(v.type.tensor_type.elem_type))
        for v in [*graph.input, *graph.value_info, *graph.output]
        if v.type.tensor_type.elem_type
    }
    types.update({i.name: ONNX_TYPE_NAMES.get(i.data_type, str(i.data_type))
                  for i in graph.initializer})  # fmt: skip
    return inferred, types


def type_issues(model: onnx.ModelProto, rules: dict) -> list[str]:
    """Where ``model`` breaks the type rules of one TensorRT version (a fixture written by
    scripts/tensorrt_rules_fixture.py from NvInfer.h and the onnx-tensorrt importers), built as
    a strongly typed network, as the project builds every engine. Each issue names the node,
    the rule, the version and the fix. FP16 graphs (any float16 tensor) also need their
    normalisations to read float32: a strongly typed network computes a layer in its input's
    type (NvInfer.h, setComputePrecision), and the CPU reference computes them in float."""
    inferred, types = _types(model)
    graph = inferred.graph
    version = f"TensorRT {rules['version']}"
    dq_types = [t for t in rules["dequantize_input_types"] if t in rules["qdq_parser_types"]]
    q_types = [t for t in rules["quantize_output_types"] if t in rules["qdq_parser_types"]]
    header = f"NvInfer.h {rules['sources']['tensorrt']['branch']}"
    layer_norm = rules["layer_norm_importer_sets_compute_precision"]
    fp16 = "FP16" in types.values()
    issues = []
    for node in graph.node:
        where = f"{version}: {node.op_type} node '{node.name or node.output[0]}'"
        data = types.get(node.input[0]) if node.input else None
        if node.op_type == "DequantizeLinear" and data not in dq_types:
            issues.append(
                f"{where} dequantizes {data}: IDequantizeLayer and the parser's Q/DQ importer "
                f"take only {', '.join(dq_types)} ({header}; onnx-tensorrt "
                "QuantDequantLinearHelper); fix: keep that tensor float (Conv biases: "
                "quantize_static with QuantizeBias off, variants.INT8_TARGETS['tensorrt'])"
            )
        elif node.op_type == "QuantizeLinear" and types.get(node.output[0]) not in q_types:
            issues.append(
                f"{where} quantizes to {types.get(node.output[0])}: IQuantizeLayer makes only "
                f"{', '.join(q_types)} ({header}); a numerics rule: the parser only warns and "
                "reads UINT8 as INT8 (onnxOpImporters.cpp, \"TensorRT will use INT8 instead\"), "
                "so every value would be off by 128; fix: quantize to INT8"
            )
        elif node.op_type == "LayerNormalization" and layer_norm["calls"] and (
            not layer_norm["guarded_by_strongly_typed"]
            and rules["normalization_set_compute_precision"] == "rejected when strongly typed"
        ):
            assumed = f" ({layer_norm['why']})" if layer_norm["assumed"] else ""
            issues.append(
                f"{where}: the importer calls INormalizationLayer::setComputePrecision, which a "
                f"strongly typed network rejects ({header}){assumed}; fix: write it out as "
                "ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add "
                "(variants.decompose_layer_norms)"
            )
        allowed = rules["ops"].get(node.op_type, {}).get("types")
        if node.op_type in TYPED_OPS and allowed and data and data not in allowed:
            issues.append(
                f"{where} reads {data}: the parser's support matrix allows "
                f"{', '.join(allowed)} (onnx-tensorrt docs/operators.md, "
                f"{rules['sources']['parser']['read']}); fix: cast it to one of them"
            )
        if fp16 and node.op_type in NORMALIZATIONS and data == "FP16":
            issues.append(
                f"{where} reads FP16: a strongly typed network computes it in its input's "
                f"type ({header}, setComputePrecision), half where the CPU reference uses "
                "float; fix: an FP32 island, a Cast to float before and back after "
                "(variants.fp16_graph)"
            )
    return issues


def load_type_rules(path: str | Path) -> dict:
    """A type-rule fixture (scripts/tensorrt_rules_fixture.py writes them)."""
    import json

    return json.loads(Path(path).read_text())
