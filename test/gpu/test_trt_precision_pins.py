"""FP32 pins in the engine builder, on the TensorRT stand-in: precision.json -> per-layer
``precision`` / ``set_output_type`` on the layers the ONNX parser made for the recorded nodes,
``OBEY_PRECISION_CONSTRAINTS``, and the pins in the engine cache key. The stand-in names layers
as TensorRT 10's parser does (node name, ``_<n>`` for repeats, ``[ONNX Layer: NODE]`` metadata);
test_api_names.py checks every name used against TensorRT 10.3."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import tensorrt_emu

from compactinst_ros.backends.engine_cache import DeviceInfo, EngineCache
from compactinst_ros.backends.trt_build import (
    PRECISION_FILE,
    BuildOptions,
    build_serialized,
    engine_key,
    ensure_engines,
    load_fp32_layers,
    onnx_node_of_layer,
    save_fp32_layers,
)
from compactinst_ros.bundle import ModelBundle, StageSpec, TensorSpec, default_bundle_path
from compactinst_ros.errors import BackendError

DEVICE = DeviceInfo(name="stand-in", compute_capability="8.7", sm_count=8)


@pytest.fixture
def trt(monkeypatch):
    """The TensorRT stand-in as ``tensorrt``."""
    return tensorrt_emu.install(monkeypatch)


@pytest.fixture
def bundle(tmp_path) -> ModelBundle:
    """A writable copy of the default bundle."""
    root = tmp_path / "bundle"
    shutil.copytree(default_bundle_path(), root)
    return ModelBundle.load(root)


def two_nodes_named_alike(tmp_path: Path) -> StageSpec:
    """x -> Mul 'scale' -> Relu -> Mul 'scale' (the same name again) -> Cast to bool."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, [1, 4])
    k = helper.make_tensor("k", TensorProto.FLOAT, [1], [3.0])
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["a"], name="scale"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Mul", ["b", "k"], ["c"], name="scale"),
        helper.make_node("Cast", ["c"], ["y"], name="to_bool", to=TensorProto.BOOL),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [k])
    path = tmp_path / "stage.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return StageSpec(
        "decoder",
        path,
        "",
        (TensorSpec("x", (1, 4), "float32"),),
        (TensorSpec("y", (1, 4), "bool"),),
    )


def built_layers(trt, stage: StageSpec, tmp_path: Path, precision: str, pins: tuple[str, ...]):
    """Build ``stage`` on the stand-in; the parsed layers by name and the builder config."""
    options = BuildOptions(precision=precision)
    key = engine_key(stage, trt.__version__, DEVICE, options, pins)
    assert build_serialized(stage, key, tmp_path / "timing", options, False, pins)
    network, config = tensorrt_emu.last_build["network"], tensorrt_emu.last_build["config"]
    layers = {network.get_layer(i).name: network.get_layer(i) for i in range(network.num_layers)}
    return layers, config


def test_pinned_nodes_get_fp32_compute_and_outputs_every_layer_of_a_repeated_name(
    trt, tmp_path
) -> None:
    stage = two_nodes_named_alike(tmp_path)
    layers, config = built_layers(trt, stage, tmp_path, "fp16", ("scale", "to_bool"))
    assert sorted(layers) == ["relu", "scale", "scale_0", "to_bool"]  # the parser's naming
    assert onnx_node_of_layer(layers["scale_0"]) == "scale"  # found through the metadata
    assert {trt.BuilderFlag.FP16, trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS} <= config.flags
    for name in ("scale", "scale_0", "to_bool"):
        assert layers[name].precision_is_set and layers[name].precision == trt.DataType.FLOAT
    assert layers["scale"].output_type_is_set(0)
    assert layers["scale_0"].get_output_type(0) == trt.DataType.FLOAT
    assert not layers["to_bool"].output_type_is_set(0)  # a bool output keeps its type
    assert not layers["relu"].precision_is_set and not layers["relu"].output_type_is_set(0)


def test_fp32_builds_and_unpinned_fp16_builds_set_no_constraints(trt, tmp_path) -> None:
    stage = two_nodes_named_alike(tmp_path)
    for precision, pins in (("fp32", ("scale",)), ("fp16", ())):
        layers, config = built_layers(trt, stage, tmp_path, precision, pins)
        assert trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS not in config.flags
        assert not any(layer.precision_is_set for layer in layers.values())


def test_a_pin_without_a_layer_is_reported_and_the_build_goes_on(trt, tmp_path, capsys) -> None:
    stage = two_nodes_named_alike(tmp_path)
    layers, _ = built_layers(trt, stage, tmp_path, "fp16", ("scale", "folded_away"))
    assert layers["scale"].precision_is_set
    assert "1 FP32-pinned ONNX nodes have no TensorRT layer" in capsys.readouterr().err


def test_metadata_names_the_node_and_the_layer_name_is_the_fallback() -> None:
    layer = tensorrt_emu.Layer("attn_3", "[ONNX Layer: /attn/MatMul | Local Function: F]", [])
    assert onnx_node_of_layer(layer) == "/attn/MatMul"
    assert onnx_node_of_layer(tensorrt_emu.Layer("/head/Conv", "", [])) == "/head/Conv"


def test_pins_are_part_of_the_fp16_cache_key_only(bundle) -> None:
    stage = bundle.stage("decoder")
    fp16, fp32 = BuildOptions(), BuildOptions(precision="fp32")
    plain = engine_key(stage, "10.3.0", DEVICE, fp16)
    pinned = engine_key(stage, "10.3.0", DEVICE, fp16, ("b", "a"))
    assert pinned.digest != plain.digest and "fp32_layers" in pinned.options
    assert engine_key(stage, "10.3.0", DEVICE, fp16, ("a", "b", "a")).digest == pinned.digest
    assert engine_key(stage, "10.3.0", DEVICE, fp16, ("a",)).digest != pinned.digest
    assert engine_key(stage, "10.3.0", DEVICE, fp32, ("a",)) == engine_key(
        stage, "10.3.0", DEVICE, fp32
    )


def test_ensure_engines_builds_with_the_bundles_pins_and_keys_them(trt, bundle, tmp_path) -> None:
    decoder = onnx.load(str(bundle.stage("decoder").path))
    norms = [n.name for n in decoder.graph.node if n.op_type == "LayerNormalization"][:2]
    save_fp32_layers(bundle, {"decoder": norms}, {"tool": "test"})
    cache = EngineCache(tmp_path / "engines")
    runtime = trt.Runtime(trt.Logger())
    engines = ensure_engines(bundle, cache, runtime.deserialize_cuda_engine, DEVICE, log=print)
    assert set(engines) == {"encoder", "decoder"}  # the decoder was built last
    network = tensorrt_emu.last_build["network"]
    pinned = sorted(
        onnx_node_of_layer(layer)
        for layer in (network.get_layer(i) for i in range(network.num_layers))
        if layer.precision_is_set
    )
    assert pinned == sorted(norms)
    sidecars = {p.name.split("-")[0]: json.loads(p.read_text()) for p in cache.root.glob("*.json")}
    assert "fp32_layers" in sidecars["decoder"]["key"]["options"]
    assert "fp32_layers" not in sidecars["encoder"]["key"]["options"]


def test_precision_record_round_trip_and_its_errors(bundle) -> None:
    assert load_fp32_layers(bundle) == {}
    path = save_fp32_layers(bundle, {"decoder": ["b", "a", "b"]}, {"tool": "test"})
    assert path == bundle.root / PRECISION_FILE
    assert load_fp32_layers(bundle) == {"encoder": (), "decoder": ("a", "b")}
    with pytest.raises(BackendError, match="no stage named"):
        save_fp32_layers(bundle, {"head": ["a"]}, {})

    record = json.loads(path.read_text())
    record["stages"]["decoder"]["onnx_sha256"] = "0" * 64
    path.write_text(json.dumps(record))
    with pytest.raises(BackendError, match=r"written for another decoder\.onnx.*fp16-check"):
        load_fp32_layers(bundle)
    path.write_text("{not json")
    with pytest.raises(BackendError, match=r"not a valid precision record.*--write-pins"):
        load_fp32_layers(bundle)
