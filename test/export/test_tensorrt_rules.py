"""Exported graphs meet the TensorRT ONNX parser's documented rules, and graphs that break one
are reported by name (TensorRT itself runs only on the vehicle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.export.tensorrt_rules import file_issues, parser_issues


def test_shipped_and_freshly_exported_bundles_pass(random_bundle: Path) -> None:
    for root in (default_bundle_path(), random_bundle):
        for stage in ModelBundle.load(root).stages:
            assert file_issues(stage.path) == [], stage.path


def _model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tensor(name: str, shape: list[int], dtype: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_constant_inputs_follow_constant_nodes_and_identities() -> None:
    k = numpy_helper.from_array(np.array([2], np.int64), "k_init")
    nodes = [
        helper.make_node("Identity", ["k_init"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk_ok", axis=1),
    ]
    ok = _model(nodes, [_tensor("x", [1, 8])], [_tensor("v", [1, 2])], [k])
    assert parser_issues(ok) == []


def _const(name: str, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


X = _tensor("x", [1, 3, 8, 8])
Y = _tensor("y", [1, 3, 8, 8])


def _one(node, inits=(), inputs=(X,), outputs=(Y,), opset: int = 18) -> onnx.ModelProto:
    return _model([node], list(inputs), list(outputs), list(inits), opset=opset)


def _case(case: str) -> onnx.ModelProto:
    """A tiny graph that breaks one rule of the TensorRT 10.x parser."""
    node = helper.make_node
    if case == "topk_dynamic_k_is_fine":
        nodes = [
            node("Shape", ["x"], ["s"]),
            node("Slice", ["s", "b", "e"], ["k"]),
            node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=3),
        ]
        bounds = [_const("b", [3]), _const("e", [4])]
        return _model(nodes, [X], [_tensor("v", [1, 3, 8, 8])], bounds)
    if case == "topk_unsorted":
        return _one(node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=3, sorted=0),
                    [_const("k", [2])])  # fmt: skip
    if case == "topk_k_too_large":
        n = node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=3)
        return _one(n, [_const("k", [4000])])
    if case == "resize_cubic":
        n = node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="cubic")
        return _one(n, [_const("scales", [1, 1, 2, 2], np.float32)], opset=17)
    if case == "resize_aspect_policy":
        n = node("Resize", ["x", "", "", "sizes"], ["y"], name="resize",
                 keep_aspect_ratio_policy="not_larger")  # fmt: skip
        return _one(n, [_const("sizes", [1, 3, 16, 16])])
    if case == "resize_antialias":
        n = node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="linear", antialias=1)
        return _one(n, [_const("scales", [1, 1, 2, 2], np.float32)])
    if case == "resize_axes_with_tensor_scales":
        n = node("Resize", ["x", "", "scales"], ["y"], name="resize", axes=[2, 3])
        return _one(n, inputs=(X, _tensor("scales", [2])))
    if case == "pad_axes_tensor":
        n = node("Pad", ["x", "pads", "", "axes"], ["y"], name="pad")
        return _one(n, [_const("pads", [1, 1, 1, 1])], (X, _tensor("axes", [2], TensorProto.INT64)))
    if case == "reduce_mean_axes_tensor":
        n = node("ReduceMean", ["x", "axes"], ["y"], name="mean")
        return _one(n, inputs=(X, _tensor("axes", [1], TensorProto.INT64)))
    if case == "layer_norm_mean_output":
        n = node("LayerNormalization", ["x", "g"], ["y", "mean"], name="norm", axis=-1)
        return _one(n, [_const("g", np.ones(8), np.float32)])
    if case == "pool_dilations":
        n = node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], dilations=[2, 2])
        return _one(n)
    if case == "pool_1d":
        n = node("AveragePool", ["x3"], ["y"], name="pool", kernel_shape=[2])
        return _one(n, inputs=(_tensor("x3", [1, 3, 8]),))
    if case == "maxpool_indices":
        return _one(node("MaxPool", ["x"], ["y", "idx"], name="pool", kernel_shape=[2, 2]))
    if case == "grid_sample_5d":
        n = node("GridSample", ["x5", "grid"], ["y"], name="grid")
        return _one(n, inputs=(_tensor("x5", [1, 3, 4, 8, 8]), _tensor("grid", [1, 4, 8, 8, 3])))
    if case == "scatter_nd_reduction":
        n = node("ScatterND", ["x", "idx", "upd"], ["y"], name="scatter", reduction="add")
        idx = _tensor("idx", [1, 1], TensorProto.INT64)
        return _one(n, inputs=(X, idx, _tensor("upd", [1, 3, 8, 8])))
    if case == "quantize_zero_point":
        n = node("QuantizeLinear", ["x", "s", "zp"], ["y"], name="q")
        return _one(n, [_const("s", 0.1, np.float32), _const("zp", 3, np.int8)])
    if case == "lstm_layout":
        n = node("LSTM", ["x", "w", "r"], ["y"], name="lstm", hidden_size=2, layout=1)
        return _one(n, [_const("w", np.zeros((1, 8, 8)), np.float32),
                        _const("r", np.zeros((1, 8, 2)), np.float32)])  # fmt: skip
    if case == "unknown_op":
        return _one(node("Det", ["x"], ["y"], name="det"))
    if case == "opset_21":
        return _one(node("Relu", ["x"], ["y"]), opset=21)
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("topk_k_too_large", "TopK node 'topk': K = 4000 must be below 3840"),
        ("resize_aspect_policy", "keep_aspect_ratio_policy 'not_larger' is not supported"),
        ("resize_antialias", "Resize node 'resize': antialiasing is not supported"),
        ("resize_axes_with_tensor_scales", "axes [2, 3] must be 0..3 when 'scales' is a tensor"),
        ("pad_axes_tensor", "Pad node 'pad': input 'axes' must be an initializer"),
        ("reduce_mean_axes_tensor", "ReduceMean node 'mean': input 'axes' must be an initializer"),
        ("layer_norm_mean_output", "LayerNormalization node 'norm': only the first output Y"),
        ("pool_dilations", "MaxPool node 'pool': dilations [2, 2] are not supported"),
        ("maxpool_indices", "MaxPool node 'pool': the Indices output"),
        ("grid_sample_5d", "GridSample node 'grid': the input must be 4D, not 5D"),
        ("scatter_nd_reduction", "ScatterND node 'scatter': reduction 'add' is not supported"),
        ("quantize_zero_point", "QuantizeLinear node 'q': y_zero_point must be a zero initializer"),
        ("lstm_layout", "LSTM node 'lstm': input_forget and layout must be 0"),
        ("unknown_op", "Det node 'det': not in the TensorRT ONNX parser's support matrix"),
        ("opset_21", "opset 21 is outside TensorRT 10's 9..20"),
    ],
)
def test_rule_breaks_are_reported_by_node(case: str, message: str) -> None:
    issues = parser_issues(_case(case))
    assert any(message in issue for issue in issues), issues


def test_what_tensorrt_10_allows_and_8_5_did_not_is_not_reported() -> None:
    """TopK's K from a tensor and InstanceNormalization's scale from a tensor import on 10.x;
    so do what the support page forbids and the importer's code takes (unsorted TopK, cubic
    Resize, 1D pooling: test_parser_agreement.py has NVIDIA's parser build them)."""
    assert parser_issues(_case("topk_dynamic_k_is_fine")) == []
    for case in ("topk_unsorted", "resize_cubic", "pool_1d"):
        assert parser_issues(_case(case)) == [], case
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm")
    bias = numpy_helper.from_array(np.zeros(3, np.float32), "bias")
    assert parser_issues(_model([node], [X, _tensor("scale", [3])], [Y], [bias])) == []
