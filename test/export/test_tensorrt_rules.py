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


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("topk_dynamic_k", "TopK node 'topk': input 'K' must be a constant"),
        ("resize_cubic", "Resize node 'resize': mode 'cubic'"),
        ("unknown_op", "Det node 'det': not in the TensorRT ONNX parser's support matrix"),
        ("opset_21", "opset 21 is outside TensorRT 10's 9..20"),
        ("maxpool_indices", "MaxPool node 'pool': the Indices output"),
        ("instance_norm_scale", "InstanceNormalization node 'norm': input 'scale'"),
    ],
)
def test_rule_breaks_are_reported_by_node(case: str, message: str) -> None:
    x = _tensor("x", [1, 3, 8, 8])
    if case == "topk_dynamic_k":
        nodes = [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Slice", ["s", "b", "e"], ["k"]),
            helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=3),
        ]
        bounds = [
            numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("b", 3), ("e", 4))
        ]
        model = _model(nodes, [x], [_tensor("v", [1, 3, 8, 8])], bounds)
    elif case == "resize_cubic":
        scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="cubic")
        model = _model([node], [x], [_tensor("y", [1, 3, 16, 16])], [scales])
    elif case == "unknown_op":
        model = _model(
            [helper.make_node("Det", ["x"], ["y"], name="det")], [x], [_tensor("y", [1, 3])]
        )
    elif case == "opset_21":
        model = _model(
            [helper.make_node("Relu", ["x"], ["y"])], [x], [_tensor("y", [1, 3, 8, 8])], opset=21
        )
    elif case == "maxpool_indices":
        node = helper.make_node("MaxPool", ["x"], ["y", "idx"], name="pool", kernel_shape=[2, 2])
        model = _model([node], [x], [_tensor("y", [1, 3, 7, 7])])
    else:
        node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm")
        bias = numpy_helper.from_array(np.zeros(3, np.float32), "bias")
        model = _model([node], [x, _tensor("scale", [3])], [_tensor("y", [1, 3, 8, 8])], [bias])
    issues = parser_issues(model)
    assert any(message in issue for issue in issues), issues
