"""The stand-in parser agrees with NVIDIA's: each mutation of a small Q/DQ graph (Conv, Relu,
MatMul with a weight) is judged by TensorRT for RTX's real ONNX parser and builder (AOT, SM86)
and by the stand-in (test/gpu/emu/tensorrt_emu.py, as TensorRT 10.3: its type rules and
``tensorrt_rules.parser_issues``), with the same verdict. Where they differ, the stand-in keeps
a rule that TensorRT 10.3 on a Jetson has and TensorRT for RTX lacks (with its upstream line),
or a numerics rule the real parser only warns about; ``STAND_IN_ONLY`` names each."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compactinst_ros.backends.rtx_build import import_tensorrt_rtx, layer_logger
from compactinst_ros.backends.trt_build import parser_errors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu" / "emu"))
import tensorrt_emu

C = 32  # channels: enough for INT8 kernels
#: mutations the stand-in refuses and NVIDIA's parser (TensorRT for RTX) builds, and why
STAND_IN_ONLY = {
    "uint8_activations": "numerics: the parser only warns and reads UINT8 as INT8, off by 128 "
    "(onnx-tensorrt onnxOpImporters.cpp as 10.3 pins it, QuantDequantLinearHelper: 'TensorRT "
    "doesn't support QuantizeLinear/DequantizeLinear with UINT8 zero_point. TensorRT will use "
    "INT8 instead')",
    "grid_sample_5d": "TensorRT 10.x takes a 4D GridSample input only (onnx-tensorrt "
    "docs/operators.md as 10.3 pins it: 'Input must be 4D input'); TensorRT for RTX takes 5D",
    "opset_21": "TensorRT 10.x parses opsets 9 to 20 (onnx-tensorrt docs/operators.md as 10.3 "
    "pins it: "
    "'TensorRT 10.0 supports operators in the inclusive range of opset 9 to opset 20')",
}


def _const(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def base() -> onnx.ModelProto:
    """x -> Q/DQ -> Conv (INT8 weights per output channel, float bias) -> Relu -> flatten ->
    Q/DQ -> MatMul (INT8 weight B per output column) -> y."""
    rng = np.random.default_rng(0)
    inits = [
        _const("s", 0.05), _const("z", 0, np.int8),
        _const("wq", rng.integers(-100, 100, (C, C, 3, 3)), np.int8),
        _const("ws", np.full(C, 0.01)), _const("wz", np.zeros(C), np.int8),
        _const("b", rng.standard_normal(C)),
        _const("mq", rng.integers(-100, 100, (256, 64)), np.int8),
        _const("ms", np.full(64, 0.01)), _const("mz", np.zeros(64), np.int8),
        _const("shape", [1, C, 256], np.int64),
    ]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_x"),
        node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_x"),
        node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dq_w", axis=0),
        node("Conv", ["xd", "wd", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        node("Relu", ["c"], ["r"], name="relu"),
        node("Reshape", ["r", "shape"], ["f"], name="flat"),
        node("QuantizeLinear", ["f", "s", "z"], ["fq"], name="q_f"),
        node("DequantizeLinear", ["fq", "s", "z"], ["fd"], name="dq_f"),
        node("DequantizeLinear", ["mq", "ms", "mz"], ["md"], name="dq_m", axis=1),
        node("MatMul", ["fd", "md"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "base", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 64])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _set(model: onnx.ModelProto, name: str, value: object, dtype: type = np.float32) -> None:
    init = next(i for i in model.graph.initializer if i.name == name)
    init.CopyFrom(_const(name, value, dtype))


def _axis(model: onnx.ModelProto, node_name: str, axis: int) -> None:
    node = next(n for n in model.graph.node if n.name == node_name)
    for attribute in [a for a in node.attribute if a.name == "axis"]:
        node.attribute.remove(attribute)
    node.attribute.append(helper.make_attribute("axis", axis))


def _after(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] = ()) -> Callable:
    """A mutation that appends ``nodes`` (reading ``y``, the last writing ``out``)."""

    def mutate(model: onnx.ModelProto) -> None:
        model.graph.node.extend(nodes)
        model.graph.initializer.extend(inits)
        out = nodes[-1].output[0]
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        shaped = next((v for v in inferred if v.name == out), None)
        if shaped is not None and shaped.type.tensor_type.HasField("shape"):
            model.graph.output[0].CopyFrom(shaped)
        else:  # an operator ONNX cannot infer: the output keeps a rank-3 shape
            model.graph.output[0].CopyFrom(
                helper.make_tensor_value_info(out, TensorProto.FLOAT, ["a", "b", "c"])
            )

    return mutate


def int32_bias(model: onnx.ModelProto) -> None:
    _set(model, "b", np.zeros(C), np.int32)
    model.graph.initializer.extend(
        [_const("bs", np.full(C, 5e-4)), _const("bz", np.zeros(C), np.int32)]
    )
    model.graph.node.insert(3, helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"],
                                                name="dq_b", axis=0))  # fmt: skip
    next(n for n in model.graph.node if n.name == "conv").input[2] = "bd"


def matmul_weight_axis0(model: onnx.ModelProto) -> None:
    _set(model, "ms", np.full(256, 0.01))
    _set(model, "mz", np.zeros(256), np.int8)
    _axis(model, "dq_m", 0)


def activation_per_channel(model: onnx.ModelProto) -> None:
    _set(model, "s", np.full(C, 0.05))
    _set(model, "z", np.zeros(C), np.int8)
    for name in ("q_x", "dq_x", "q_f", "dq_f"):
        _axis(model, name, 1)


def matmul_behind_transpose(model: onnx.ModelProto) -> None:
    """B stored (64, 256) with its scales on axis 1, transposed before the MatMul: the scales
    lie on the reduction axis."""
    _set(model, "mq", np.random.default_rng(1).integers(-100, 100, (64, 256)), np.int8)
    _set(model, "ms", np.full(256, 0.01))
    _set(model, "mz", np.zeros(256), np.int8)
    index = next(i for i, n in enumerate(model.graph.node) if n.name == "matmul")
    model.graph.node.insert(index, helper.make_node("Transpose", ["md"], ["mt"], perm=[1, 0]))
    model.graph.node[index + 1].input[1] = "mt"


def opset_21(model: onnx.ModelProto) -> None:
    model.opset_import[0].version = 21


def grid_sample_5d(model: onnx.ModelProto) -> None:
    grid = np.random.default_rng(2).uniform(-1, 1, (1, 2, 4, 4, 3))
    _after([
        helper.make_node("Reshape", ["y", "s5"], ["y5"], name="to5d"),
        helper.make_node("GridSample", ["y5", "g"], ["o"], name="gs"),
    ], [_const("s5", [1, 2, 16, 8, 8], np.int64), _const("g", grid)])(model)  # fmt: skip


def _op(op: str, inputs: list[str], outputs: list[str] = ("o",), consts: dict = (), **attrs):
    """A mutation appending one ``op`` node named after it (constants given by name)."""
    inits = [_const(name, value, np.int64 if op != "Resize" or name == "n" else np.float32)
             for name, value in dict(consts).items()]  # fmt: skip
    return _after([helper.make_node(op, inputs, list(outputs), name=op.lower(), **attrs)], inits)


def topk_k_4000(model: onnx.ModelProto) -> None:
    _after([
        helper.make_node("Tile", ["y", "t"], ["yt"], name="tile"),
        helper.make_node("Reshape", ["yt", "f"], ["yf"], name="flatten"),
        helper.make_node("TopK", ["yf", "k"], ["o", "i"], name="topk"),
    ], [_const("t", [1, 1, 4], np.int64), _const("f", [1, -1], np.int64),
        _const("k", [4000], np.int64)])(model)  # fmt: skip


def maxpool_dilations(model: onnx.ModelProto) -> None:
    _after([
        helper.make_node("Reshape", ["y", "s4"], ["y4"], name="to4d"),
        helper.make_node("MaxPool", ["y4"], ["o"], name="pool", kernel_shape=[2, 2],
                         dilations=[2, 2]),
    ], [_const("s4", [1, C, 8, 8], np.int64)])(model)  # fmt: skip


def slice_axes_computed(model: onnx.ModelProto) -> None:
    """Slice's axes computed in the graph (from the input's rank), not an initializer."""
    _after([
        helper.make_node("Shape", ["y"], ["shape_y"], name="shape"),
        helper.make_node("Size", ["shape_y"], ["rank"], name="rank"),
        helper.make_node("Sub", ["rank", "one"], ["last"], name="last_axis"),
        helper.make_node("Unsqueeze", ["last", "zero"], ["axes"], name="axes"),
        helper.make_node("Slice", ["y", "st", "en", "axes"], ["o"], name="slice"),
    ], [_const("one", 1, np.int64), _const("zero", [0], np.int64), _const("st", [0], np.int64),
        _const("en", [4], np.int64)])(model)  # fmt: skip


def scales_not_one_per_channel(model: onnx.ModelProto) -> None:
    _set(model, "ws", np.full(C - 1, 0.01))
    _set(model, "wz", np.zeros(C - 1), np.int8)


#: mutation -> (change, NVIDIA's verdict: True = parsed and built)
MUTATIONS: dict[str, tuple[Callable[[onnx.ModelProto], None], bool]] = {
    "none": (lambda m: None, True),
    "int32_bias_dequantize": (int32_bias, False),
    "negative_scale": (lambda m: _set(m, "ws", -np.full(C, 0.01)), False),
    "zero_point_5": (lambda m: _set(m, "z", 5, np.int8), False),
    "uint8_activations": (lambda m: _set(m, "z", 0, np.uint8), True),
    "scales_and_zero_points_differ": (lambda m: _set(m, "ws", np.full(C - 1, 0.01)), False),
    "scales_not_one_per_channel": (scales_not_one_per_channel, False),
    "matmul_weight_scales_axis_0": (matmul_weight_axis0, True),
    "conv_weight_scales_axis_1": (lambda m: _axis(m, "dq_w", 1), True),
    "activation_scales_per_channel": (activation_per_channel, True),
    "matmul_axis_behind_transpose": (matmul_behind_transpose, True),
    "det": (_op("Det", ["y"]), False),
    "unique": (_op("Unique", ["y"]), False),
    "col2im": (_op("Col2Im", ["y", "i", "k"], consts={"i": [8, 8], "k": [2, 2]}), False),
    "resize_cubic": (_op("Resize", ["y", "", "rs"], consts={"rs": [1, 1, 2]}, mode="cubic"), True),
    "resize_antialias": (
        _op("Resize", ["y", "", "rs"], consts={"rs": [1, 1, 0.5]}, mode="linear", antialias=1),
        False,
    ),
    "resize_not_larger": (
        _op(
            "Resize", ["y", "", "", "n"], consts={"n": [1, C, 32]},
            keep_aspect_ratio_policy="not_larger",
        ),
        False,
    ),
    "topk_unsorted": (_op("TopK", ["y", "k"], ["o", "i"], consts={"k": [4]}, sorted=0), True),
    "topk_k_4000": (topk_k_4000, False),
    "pad_wrap": (_op("Pad", ["y", "p"], consts={"p": [0, 0, 1, 0, 0, 1]}, mode="wrap"), True),
    "slice_axes_computed": (slice_axes_computed, True),
    "maxpool_dilations": (maxpool_dilations, False),
    "maxpool_1d": (_op("MaxPool", ["y"], kernel_shape=[2]), True),
    "grid_sample_5d": (grid_sample_5d, True),
    "opset_21": (opset_21, True),
}


def mutated(name: str) -> bytes:
    model = base()
    MUTATIONS[name][0](model)
    return model.SerializeToString()


def nvidia_verdict(data: bytes) -> tuple[bool, str]:
    """(parsed and built, what it said) by TensorRT for RTX, AOT for SM86."""
    trt = import_tensorrt_rtx()
    log = layer_logger(trt)
    builder = trt.Builder(log)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, log)
    if not parser.parse(data):
        return False, "; ".join(parser_errors(parser))
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM86, 0)
    if builder.build_serialized_network(network, config) is None:
        return False, "; ".join(log.errors())
    return True, "; ".join(log.warnings())


def stand_in_verdict(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, str]:
    """(parsed and built, its errors) by the stand-in as TensorRT 10.3."""
    trt = tensorrt_emu.install(monkeypatch, version="10.3.0")
    logger = trt.Logger()
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(data):
        return False, "; ".join(parser_errors(parser))
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    return plan is not None, ""


@pytest.mark.parametrize("name", MUTATIONS)
def test_stand_in_and_nvidia_parser_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = mutated(name)
    real, said = nvidia_verdict(data)
    assert real == MUTATIONS[name][1], said  # the table holds what NVIDIA's builder does
    stand_in, refused = stand_in_verdict(data, monkeypatch)
    if name in STAND_IN_ONLY:
        assert real and not stand_in, (name, refused)
    else:
        assert stand_in == real, (name, said, refused)


def test_uint8_is_a_numerics_rule_the_real_parser_only_warns_about(monkeypatch) -> None:
    data = mutated("uint8_activations")
    built, warnings = nvidia_verdict(data)
    assert built and "UINT8" in warnings and "INT8" in warnings
    _, refused = stand_in_verdict(data, monkeypatch)
    assert "a numerics rule" in refused and "off by 128" in refused
