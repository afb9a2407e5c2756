"""The TensorRT ONNX parser's documented rules, checked on an exported graph without TensorRT.

TensorRT runs only on the vehicle, so a graph that JetPack 6's parser rejects would otherwise
surface there, at the first engine build. Sources: onnx-tensorrt ``docs/operators.md`` (the
support matrix and its per-operator restrictions, TensorRT 8.5 edition), TensorRT 10's opset
range 9 to 20, and LayerNormalization, which the parser imports natively since TensorRT 8.6.
The restrictions are the 8.5 edition's, the newest matrix we could read; a graph that meets them
is expected to import on TensorRT 10.3, which only an engine build on the vehicle proves.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

OPSET_RANGE = (9, 20)

#: Operators the parser imports ("Y" in the support matrix, plus LayerNormalization).
SUPPORTED_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan",
    "Atanh", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Celu", "Clip", "Concat",
    "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum",
    "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf",
    "Exp", "Expand", "EyeLike", "Flatten", "Floor", "Gather", "GatherElements", "GatherND",
    "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
    "GridSample", "GRU", "HardSigmoid", "HardSwish", "Identity", "If", "ImageScaler",
    "InstanceNormalization", "IsNaN", "LayerNormalization", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "LogSoftmax", "Loop", "LRN", "LSTM", "LpNormalization", "LpPool",
    "MatMul", "Max", "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mod", "Mul",
    "Neg", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "Pad", "ParametricSoftplus",
    "Pow", "PRelu", "QuantizeLinear", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence", "RNN", "RoiAlign",
    "Round", "ScaledTanh", "Scan", "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "Softplus",
    "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh",
    "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Upsample", "Where",
    "Xor"
})  # fmt: skip

#: Inputs that must be known at build time (an initializer or a Constant node's output).
CONSTANT_INPUTS = {
    "TopK": {1: "K"},
    "Slice": {3: "axes"},
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "CumSum": {1: "axis"},
    "InstanceNormalization": {1: "scale", 2: "B"},
}

RESIZE_MODES = {"nearest", "linear"}
RESIZE_COORDINATES = {
    "half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners",
}  # fmt: skip
RESIZE_NEAREST = {"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"}


def _attribute(node: onnx.NodeProto, name: str, default: str) -> str:
    for attr in node.attribute:
        if attr.name == name:
            return attr.s.decode()
    return default


def parser_issues(model: onnx.ModelProto) -> list[str]:
    """What in ``model`` breaks a documented rule of the TensorRT ONNX parser (empty: none)."""
    graph = model.graph
    issues = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not OPSET_RANGE[0] <= opset <= OPSET_RANGE[1]:
        issues.append(f"opset {opset} is outside TensorRT 10's {OPSET_RANGE[0]}..{OPSET_RANGE[1]}")
    constants = {i.name for i in graph.initializer}
    for node in graph.node:  # nodes are topologically sorted: producers come first
        if node.op_type == "Constant" or (
            node.op_type == "Identity" and node.input and node.input[0] in constants
        ):
            constants.update(node.output)
    for node in graph.node:
        where = f"{node.op_type} node '{node.name}'"
        if node.op_type not in SUPPORTED_OPS:
            issues.append(f"{where}: not in the TensorRT ONNX parser's support matrix")
            continue
        for index, role in CONSTANT_INPUTS.get(node.op_type, {}).items():
            if index < len(node.input) and node.input[index] and node.input[index] not in constants:
                issues.append(f"{where}: input '{role}' must be a constant for TensorRT")
        if node.op_type == "Resize":
            mode = _attribute(node, "mode", "nearest")
            coordinates = _attribute(node, "coordinate_transformation_mode", "half_pixel")
            nearest = _attribute(node, "nearest_mode", "round_prefer_floor")
            if mode not in RESIZE_MODES or coordinates not in RESIZE_COORDINATES:
                issues.append(f"{where}: mode '{mode}' with '{coordinates}' is not supported")
            if mode == "nearest" and nearest not in RESIZE_NEAREST:
                issues.append(f"{where}: nearest_mode '{nearest}' is not supported")
        if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
            issues.append(f"{where}: the Indices output is not supported")
    return issues


def file_issues(path: str | Path) -> list[str]:
    """``parser_issues`` of an ONNX file (weights are not loaded)."""
    import onnx

    return parser_issues(onnx.load(str(path), load_external_data=False))
