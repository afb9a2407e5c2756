"""TensorRT's type rules (test/fixtures/tensorrt_rules, from NvInfer.h and the onnx-tensorrt
importers) on every typed graph, for every TensorRT version the project claims; the graphs
ONNX Runtime's defaults make (INT32 bias dequantization, LayerNormalization, per-channel scales
on a MatMul's reduction axis, FP16 normalisations) are refused with the node, rule, version and
fix named."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compactinst_ros import variants
from compactinst_ros.backends.ort import create_session
from compactinst_ros.bundle import (
    ModelBundle,
    StageGraph,
    StageSpec,
    TensorSpec,
    default_bundle_path,
)
from compactinst_ros.export.tensorrt_rules import load_type_rules, type_issues

RULES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "tensorrt_rules"
VERSIONS = ("10.3", "10.16", "11")
#: ONNX Runtime's defaults, which the TensorRT graph used to be derived with
OLD_TARGET = dataclasses.replace(
    variants.INT8_TARGETS["tensorrt"], quantize_bias=True, tensorrt_form=False,
    modelopt_rules=False, high_precision="fp32",
)


@pytest.fixture(scope="module")
def rules() -> dict[str, dict]:
    return {v: load_type_rules(RULES_DIR / f"{v}.json") for v in VERSIONS}


def test_fixtures_name_their_sources_and_assumptions(rules) -> None:
    for version, rule in rules.items():
        assert rule["version"] == version
        assert re.fullmatch(r"[0-9a-f]{40}", rule["sources"]["tensorrt"]["commit"])
        assert re.fullmatch(r"[0-9a-f]{40}", rule["sources"]["parser"]["read_commit"])
        assert "INT8" in rule["dequantize_input_types"]
        assert "INT32" not in rule["dequantize_input_types"]
        assert {"INT8", "FP8", "INT4"} <= set(rule["ops"]["DequantizeLinear"]["types"])
        assert "INT8" in rule["qdq_parser_types"]
        assert rule["matmul_weight_scales"]["assumed"] is True
    # 10.x headers keep setComputePrecision and reject it on strongly typed networks
    for version in ("10.3", "10.16"):
        assert rules[version]["normalization_set_compute_precision"] == (
            "rejected when strongly typed"
        )
    # 10.3's own parser is read: its LayerNormalization importer makes the call unguarded
    parser = rules["10.3"]["sources"]["parser"]
    assert parser["exact"] and parser["read_commit"] == parser["pinned_commit"]
    layer_norm = rules["10.3"]["layer_norm_importer_sets_compute_precision"]
    assert layer_norm["calls"] and not layer_norm["guarded_by_strongly_typed"]
    assert not layer_norm["assumed"]
    # 10.16's parser is not readable; the newest earlier one (10.10's) guards the call, as every
    # release since 10.6 does, and NVIDIA's newer parser (TensorRT for RTX) imports it
    parser = rules["10.16"]["sources"]["parser"]
    assert not parser["exact"] and parser["read"] == "the pin of release/10.10"
    layer_norm = rules["10.16"]["layer_norm_importer_sets_compute_precision"]
    assert layer_norm["calls"] and layer_norm["guarded_by_strongly_typed"]
    assert layer_norm["assumed"] and "not readable" in layer_norm["why"]
    assert rules["11"]["normalization_set_compute_precision"] == "absent"
    assert rules["11"]["strongly_typed_only"] is True


@pytest.fixture(scope="module")
def default_graphs() -> dict[tuple[str, str], onnx.ModelProto]:
    """The default bundle's TensorRT graphs: FP16 and INT8 of both stages, and FP32 as the
    builder hands it to the parser (``trt_build.parser_bytes``)."""
    from compactinst_ros.backends.trt_build import parser_bytes

    bundle = ModelBundle.load(default_bundle_path())
    graphs = {}
    for stage in bundle.stages:
        for precision in ("fp32", "fp16", "int8"):
            graph = bundle.stage_graph(stage.name, precision)
            graphs[stage.name, precision] = onnx.load_from_string(parser_bytes(graph))
    return graphs


def test_every_typed_graph_meets_every_claimed_version(default_graphs, rules) -> None:
    for (stage, precision), model in default_graphs.items():
        for version, rule in rules.items():
            assert type_issues(model, rule) == [], (stage, precision, version)


def test_no_int32_dequantization_and_fp16_norms_read_float(default_graphs) -> None:
    """The graphs' own types, independently of the rule code."""
    for (stage, precision), model in default_graphs.items():
        graph = onnx.shape_inference.infer_shapes(model).graph
        types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input]}
        types |= {i.name: i.data_type for i in graph.initializer}
        for node in graph.node:
            if node.op_type == "DequantizeLinear":
                assert types[node.input[0]] == TensorProto.INT8, (stage, node.name)
            if node.op_type in (*variants.NORM_OPS, "ReduceMean"):
                assert types[node.input[0]] == TensorProto.FLOAT, (stage, precision, node.name)
        assert not any(n.op_type == "LayerNormalization" for n in graph.node)
    fp16 = onnx.shape_inference.infer_shapes(default_graphs["decoder", "fp16"]).graph
    halves = [v for v in fp16.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16]
    assert len(halves) > 100  # the rest of the graph is still FP16


def test_todays_default_int8_decoder_is_refused(rules) -> None:
    """The decoder's INT8 graph as ONNX Runtime's defaults derive it (Conv biases INT32,
    LayerNormalization kept): refused on every version for its INT32 dequantization, and on
    10.3, whose importer calls setComputePrecision unguarded, for the layer norms."""
    bundle = ModelBundle.load(default_bundle_path(), with_variants=False)
    entry = json.loads((bundle.root / "bundle.json").read_text())["variants"]["int8"]
    ranges = bundle.root / entry["stages"]["decoder"]["ranges"]
    # that recipe left no decoder layer in FP32
    old = variants.quantize(onnx.load(str(bundle.stage("decoder").path)), ranges, OLD_TARGET, ())
    for version, rule in rules.items():
        issues = type_issues(old, rule)
        int32 = [i for i in issues if "dequantizes INT32" in i]
        norms = [i for i in issues if "setComputePrecision, which" in i]
        assert len(int32) == 3, (version, issues)
        assert len(norms) == (13 if version == "10.3" else 0), (version, issues)
        assert f"TensorRT {version}: DequantizeLinear node '" in int32[0]
        assert "IDequantizeLayer" in int32[0] and "QuantizeBias off" in int32[0]
        assert all("LayerNormalization node '/decoder/" in i for i in norms)


def test_tiny_int8_graph_with_quantized_biases_is_refused(typed_bundle, rules) -> None:
    bundle = ModelBundle.load(typed_bundle)
    ranges = typed_bundle / "int8_ranges.encoder.json"
    source = variants.int8_source(onnx.load(str(bundle.stage("encoder").path)), True)
    old = variants.quantize(source, ranges, OLD_TARGET, ())
    (issue,) = type_issues(old, rules["10.3"])
    assert re.match(r"TensorRT 10.3: DequantizeLinear node '\S+_DequantizeLinear' dequantizes "
                    "INT32: IDequantizeLayer", issue), issue  # fmt: skip
    assert "take only INT8, FP8, INT4" in issue and "fix: keep that tensor float" in issue
    assert type_issues(variants.int8_graph(source, ranges, "tensorrt"), rules["10.3"]) == []


def _layer_norm_graph() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="/m/norm/LN",
                         axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["y", "w"], ["z"], name="/m/proj/MatMul"),
    ]  # fmt: skip
    inits = [
        numpy_helper.from_array((1 + rng.random(16)).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5, 8])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return create_session(variants.serialize(model), optimize=False).run(None, {"x": x})[0]


def test_layer_norm_written_out_computes_the_same_and_imports(rules) -> None:
    model = _layer_norm_graph()
    assert any("setComputePrecision" in i for i in type_issues(model, rules["10.3"]))
    decomposed, names = variants.decompose_layer_norms(model)
    assert [n.op_type for n in decomposed.graph.node][:9] == [
        "ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add",
    ]  # fmt: skip
    assert len(names) == 9 and all(n.startswith("/m/norm/LN/") for n in names)
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32) * 3 + 1
    np.testing.assert_allclose(_run(decomposed, x), _run(model, x), rtol=1e-5, atol=1e-5)
    for rule in rules.values():
        assert type_issues(decomposed, rule) == []


def _group_norm_graph(
    channels: int = 32, height: int = 64, width: int = 64, groups: int = 4,
    scale: np.ndarray | None = None, bias: np.ndarray | None = None,
) -> onnx.ModelProto:
    """PyTorch's GroupNorm export: Reshape, InstanceNormalization with constant scale and bias
    (ones and zeros unless given), Reshape, Mul, Add."""
    rng = np.random.default_rng(4)
    scale = np.ones(groups, np.float32) if scale is None else scale
    bias = np.zeros(groups, np.float32) if bias is None else bias
    node = helper.make_node
    nodes = [
        node("Reshape", ["x", "groups"], ["g"], name="/gn/Reshape"),
        node("Constant", [], ["ones"], name="/gn/ones", value=numpy_helper.from_array(scale)),
        node("Constant", [], ["zeros"], name="/gn/zeros", value=numpy_helper.from_array(bias)),
        node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="/gn/IN", epsilon=1e-5),
        node("Reshape", ["n", "shape"], ["r"], name="/gn/Reshape_1"),
        node("Mul", ["r", "gamma"], ["m"], name="/gn/Mul"),
        node("Add", ["m", "beta"], ["y"], name="/gn/Add"),
    ]  # fmt: skip
    shape = [1, channels, height, width]
    inits = [
        numpy_helper.from_array(np.array([0, groups, -1], np.int64), "groups"),
        numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        numpy_helper.from_array((1 + rng.random((channels, 1, 1))).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal((channels, 1, 1)).astype(np.float32), "beta"),
    ]
    graph = helper.make_graph(
        nodes, "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_group_norm_written_out_computes_the_same() -> None:
    """PyTorch's GroupNorm export written out by ``decompose_instance_norms``: the same values
    in FP32 and no InstanceNormalization left."""
    rng = np.random.default_rng(4)
    model = _group_norm_graph()
    written, added = variants.decompose_instance_norms(model)
    assert len(added) == 9
    assert "InstanceNormalization" not in {n.op_type for n in written.graph.node}
    x = (3 + 2 * rng.standard_normal((1, 32, 64, 64))).astype(np.float32)
    assert np.abs(_run(written, x) - _run(model, x)).max() < 1e-4


@pytest.mark.parametrize("affine", [False, True])
def test_group_sums_compute_the_group_norm(affine: bool) -> None:
    """``decompose_group_norms`` (per-channel sums, one-pass variance): the same values as the
    InstanceNormalization in FP32, with the norm's own scale and bias where they are not ones
    and zeros; groups of at most TWO_PASS_GROUP_VALUES values are left to the two-pass form."""
    rng = np.random.default_rng(5)
    scale = (0.5 + rng.random(4)).astype(np.float32) if affine else None
    bias = rng.standard_normal(4).astype(np.float32) if affine else None
    model = _group_norm_graph(scale=scale, bias=bias)  # 8 channels x 64 x 64 per group
    written, added = variants.decompose_group_norms(model)
    assert len(added) == 14 + 2 * affine
    assert "InstanceNormalization" not in {n.op_type for n in written.graph.node}
    # a channel's mean several times its spread: what a one-pass variance is sensitive to
    x = (3 + 2 * rng.standard_normal((1, 32, 64, 64))).astype(np.float32)
    assert np.abs(_run(written, x) - _run(model, x)).max() < 1e-4
    small = _group_norm_graph(height=32, width=48, channels=32, groups=4)  # 8 x 32 x 48 values
    assert variants.decompose_group_norms(small)[1] == []


def _norm_engine(model: onnx.ModelProto) -> tuple[int, float]:
    """(engine layers, MB per frame) of ``model`` as an FP16 graph with half input and output
    (as a stage's own tensors) built by NVIDIA's builder (SM86)."""
    from compactinst_ros.backends.engine_layers import summarize
    from compactinst_ros.backends.rtx_build import aot_build

    typed = variants.fp16_graph(model, half_io=("x", "y"))
    graph = StageGraph("norm", "fp16", variants.serialize(typed), "")
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    spec = StageSpec("norm", Path("norm.onnx"), "", (TensorSpec("x", shape, "float32"),),
                     (TensorSpec("y", shape, "float32"),))  # fmt: skip
    summary = summarize(aot_build(graph, spec).layers)
    return summary.layers, summary.bytes_per_frame / 1e6


def test_group_sums_move_a_third_of_the_bytes_where_the_builder_splits_the_norm(
    monkeypatch,
) -> None:
    """NVIDIA's builder runs a written-out group norm over 8 x 64 x 64 values per group in five
    kernels with float copies of the input and its deviations; from group sums, in three that
    read the half input twice. At 8 x 32 x 48 values (TWO_PASS_GROUP_VALUES) the two-pass form
    is one kernel: that is where the rule stops (a builder that changes this fails here)."""
    large = _group_norm_graph(channels=256, height=64, width=64, groups=32)
    small = _group_norm_graph(channels=256, height=32, width=48, groups=32)
    group_sums = _norm_engine(large)
    monkeypatch.setattr(variants, "decompose_group_norms", lambda model: (model, []))
    two_pass = _norm_engine(large)
    assert group_sums[0] <= two_pass[0], (two_pass, group_sums)
    assert group_sums[1] < 0.4 * two_pass[1], (two_pass, group_sums)
    assert variants.TWO_PASS_GROUP_VALUES == 8 * 32 * 48
    assert _norm_engine(small)[0] == 1


def test_written_out_group_norms_cut_the_fp16_encoders_float_bytes() -> None:
    """NVIDIA's builder runs an InstanceNormalization island on a float copy of its input; the
    written-out steps fuse with their casts (the default encoder's seven GroupNorms)."""
    from compactinst_ros.backends.engine_layers import summarize
    from compactinst_ros.backends.rtx_build import aot_build

    stage = ModelBundle.load(default_bundle_path()).stage("encoder")
    model, _ = variants.decompose_layer_norms(onnx.load(str(stage.path)))

    def float_bytes(typed: onnx.ModelProto) -> float:
        graph = StageGraph("encoder", "fp16", variants.serialize(typed), "")
        return summarize(aot_build(graph, stage).layers).float_bytes

    islands = variants._to_fp16(model, [])  # each InstanceNormalization an FP32 island of its own
    assert float_bytes(variants.fp16_graph(model)) < 0.6 * float_bytes(islands)


def test_fp16_graph_keeps_norms_in_float(rules) -> None:
    from onnxconverter_common import float16

    model = _layer_norm_graph()
    plain = float16.convert_float_to_float16(variants.decompose_layer_norms(model)[0],
                                             keep_io_types=True)  # fmt: skip
    issues = type_issues(plain, rules["11"])
    assert len(issues) == 2 and all("reads FP16" in i and "FP32 island" in i for i in issues)
    typed = variants.fp16_graph(model)
    assert type_issues(typed, rules["11"]) == []
    x = np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(typed, x), _run(model, x), atol=0.02)


def int8_gemm(model: onnx.ModelProto, tmp_path: Path) -> bool:
    """Whether TensorRT for RTX's engine runs '/pool/MatMul' on Int8 operands (AOT, SM86)."""
    from compactinst_ros.backends.engine_layers import layers_of_nodes
    from compactinst_ros.backends.rtx_build import aot_build

    data = variants.serialize(model)
    path = tmp_path / "pool.onnx"
    path.write_bytes(data)
    spec = StageSpec("pool", path, "", (TensorSpec("x", (1, 32, 16), "float32"),),
                     (TensorSpec("y", (1, 24, 16), "float32"),))  # fmt: skip
    layers = aot_build(StageGraph("pool", "int8", data, ""), spec).layers
    gemms = [x for x in layers_of_nodes(layers)["/pool/MatMul"] if x.layer_type == "gemm"]
    return any("Int8" in {t.datatype for t in (*x.inputs, *x.weights)} for x in gemms)


def test_matmul_weight_on_the_left_is_quantized_per_tensor(rules, tmp_path) -> None:
    """A constant A in A @ X: ONNX Runtime's scales land on A's axis 1, the reduction axis."""
    rng = np.random.default_rng(3)
    # K = 32 and N = 16: large enough for Model Optimizer's rules to quantize it
    a = rng.standard_normal((24, 32)).astype(np.float32) * np.array([0.1, 10] * 16, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "x"], ["y"], name="/pool/MatMul")], "left",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 16])],
        [numpy_helper.from_array(a, "a")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"x": rng.standard_normal((1, 32, 16)).astype(np.float32)} for _ in range(4)]
    ranges = tmp_path / "ranges.json"

    class Reader:
        def __init__(self) -> None:
            self.left = list(feeds)

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    variants.quantize(model, ranges, variants.CALIBRATION, (), reader=Reader())
    old = variants.quantize(model, ranges, OLD_TARGET, ())
    new = variants.int8_graph(model, ranges, "tensorrt")
    assert type_issues(old, rules["10.16"]) == type_issues(new, rules["10.16"]) == []
    # NVIDIA's builder takes both, but runs the product as an INT8 GEMM only per tensor
    assert [int8_gemm(g, tmp_path) for g in (old, new)] == [False, True]
    inits = {i.name: i for i in new.graph.initializer}
    (dq,) = [n for n in new.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits]
    scale = inits[dq.input[1]]
    assert list(scale.dims) == []
    got, want = _run(new, feeds[0]["x"]), _run(model, feeds[0]["x"])
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_trt_build_hands_the_parser_written_out_layer_norms() -> None:
    from compactinst_ros.backends.trt_build import parser_bytes

    model = _layer_norm_graph()
    graph = StageGraph("decoder", "fp32", variants.serialize(model), "0" * 64)
    parsed = onnx.load_from_string(parser_bytes(graph))
    assert "LayerNormalization" not in {n.op_type for n in parsed.graph.node}
    assert parser_bytes(StageGraph("decoder", "fp32", b"junk", "0" * 64)) == b"junk"
