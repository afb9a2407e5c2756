"""The strongly typed builder on the TensorRT stand-in: networks only from the typed graph's bytes,
TF32 cleared, the typed graph's hash and precision in the cache key, a rejected timing cache
moved aside instead of failing the build, ``build-engine --device N`` building on device N, and
the stand-in refusing every weak-typing call TensorRT 11 removed (test_api_names.py holds the
names against the 10.3 and 11.x wheels)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu
import tensorrt_emu

from compactinst_ros.backends.engine_cache import DeviceInfo
from compactinst_ros.backends.trt_build import BuildOptions, build_serialized, engine_key
from compactinst_ros.bundle import StageGraph, StageSpec, TensorSpec, default_bundle_path
from compactinst_ros.cli import main as cli_main
from compactinst_ros.errors import BackendError

DEVICE = DeviceInfo("stand-in", "8.7", 8, memory_mib=7620, cuda_driver=12060)


@pytest.fixture
def trt(monkeypatch):
    """The TensorRT stand-in as ``tensorrt``."""
    return tensorrt_emu.install(monkeypatch)


def tiny_stage(
    tmp_path: Path, precision: str = "fp32", dims: tuple = (1, 4), batched: bool = False
) -> tuple[StageGraph, StageSpec]:
    """A Relu graph (input and output ``dims``) as the typed graph; the stage file on disk holds
    other bytes, so a build that read the file instead of the graph's bytes would fail to parse."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    path = tmp_path / "encoder.onnx"
    path.write_bytes(b"not the typed graph")
    spec = StageSpec(
        "encoder", path, "", (TensorSpec("x", (1, 4), "float32", batched),),
        (TensorSpec("y", (1, 4), "float32", batched),),
    )  # fmt: skip
    return StageGraph("encoder", precision, data, hashlib.sha256(data).hexdigest()), spec


def build(trt, tmp_path: Path, timing: Path | None = None) -> bytes:
    graph, stage = tiny_stage(tmp_path)
    return build_serialized(graph, stage, timing or tmp_path / "timing", BuildOptions(), False)


def test_builds_a_strongly_typed_network_from_the_graph_bytes_with_tf32_off(trt, tmp_path) -> None:
    plan = build(trt, tmp_path)
    assert plan.startswith(tensorrt_emu.PLAN_MAGIC + b"fp32")  # not b"tf32", the default
    config = tensorrt_emu.last_build["config"]
    assert trt.BuilderFlag.TF32 not in config.flags and not config.get_flag(trt.BuilderFlag.TF32)
    assert tensorrt_emu.last_build["network"].onnx_bytes == tiny_stage(tmp_path)[0].model_bytes


def test_only_the_batch_axis_may_be_dynamic_and_gets_one_fixed_profile(trt, tmp_path) -> None:
    """A batch-axis input builds with one profile, min = opt = max = (b, ...); a static graph
    builds without one, as before the axis; any other dynamic dim is refused."""
    graph, stage = tiny_stage(tmp_path, dims=("batch", 4), batched=True)
    build_serialized(graph, stage, tmp_path / "timing", BuildOptions(), False, batch=2)
    (profile,) = tensorrt_emu.last_build["config"].profiles
    assert profile.get_shape("x") == [(2, 4)] * 3
    build(trt, tmp_path)
    assert tensorrt_emu.last_build["config"].profiles == []
    graph, stage = tiny_stage(tmp_path, dims=(1, "n"), batched=True)
    with pytest.raises(BackendError, match=r"dynamic shape \(1, -1\); only the batch axis"):
        build_serialized(graph, stage, tmp_path / "timing", BuildOptions(), False, batch=2)


def test_engine_key_holds_the_typed_graphs_hash_precision_and_network_kind(tmp_path) -> None:
    graph, stage = tiny_stage(tmp_path)
    key = engine_key(graph, stage, "10.3.0", DEVICE, BuildOptions())
    assert key.onnx_sha256 == graph.sha256 and key.precision == "fp32"
    assert key.options["network"] == "strongly_typed" and key.options["tf32"] == 0
    assert (key.gpu_memory_mib, key.cuda_driver) == (7620, 12060)
    fp16 = StageGraph("encoder", "fp16", b"fp16 graph", hashlib.sha256(b"fp16 graph").hexdigest())
    other = engine_key(fp16, stage, "10.3.0", DEVICE, BuildOptions())
    assert other.digest != key.digest and other.precision == "fp16"


@pytest.mark.parametrize("stored", [b"EMUTIMINGemulated-7:+++", b"not a timing cache"])
def test_a_rejected_timing_cache_is_moved_aside_and_the_build_goes_on(
    trt, tmp_path, capsys, stored: bytes
) -> None:
    timing = tmp_path / "timing.cache"
    timing.write_bytes(stored)
    timing.chmod(0o600)
    assert build(trt, tmp_path, timing)
    assert "TensorRT rejected the timing cache" in capsys.readouterr().err
    assert (tmp_path / "timing.cache.rejected").read_bytes() == stored
    assert timing.read_bytes() == tensorrt_emu.TIMING_MAGIC + b"emulated-0:+"
    assert build(trt, tmp_path, timing)  # the new cache is accepted and grows
    assert timing.read_bytes() == tensorrt_emu.TIMING_MAGIC + b"emulated-0:++"


def test_build_engine_device_makes_that_device_current(emu_lib, monkeypatch, tmp_path) -> None:
    pycuda_emu.install(monkeypatch, emu_lib, devices=2)
    tensorrt_emu.install(monkeypatch)
    bundle, cache = str(default_bundle_path()), str(tmp_path / "engines")
    assert cli_main(["build-engine", bundle, "--cache-dir", cache, "--device", "1"]) == 0
    assert tensorrt_emu.last_build["device"] == 1  # TensorRT builds on the current context
    assert pycuda_emu._context_stack == []  # popped again
    assert cli_main(["build-engine", bundle, "--cache-dir", cache, "--device", "0", "--force"]) == 0
    assert tensorrt_emu.last_build["device"] == 0
    assert cli_main(["build-engine", bundle, "--cache-dir", cache, "--device", "2"]) == 1


def test_the_stand_in_refuses_what_tensorrt_11_removed(trt, tmp_path) -> None:
    """A weak-typing call fails CI with the removal named, as it fails on TensorRT 11."""
    for flag in ("FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"):
        with pytest.raises(AttributeError, match=f"'{flag}' was removed in TensorRT 11"):
            getattr(trt.BuilderFlag, flag)
    with pytest.raises(AttributeError, match="IInt8EntropyCalibrator2' was removed"):
        trt.IInt8EntropyCalibrator2  # noqa: B018
    builder = trt.Builder(trt.Logger())
    with pytest.raises(AttributeError, match="platform_has_fast_fp16' was removed"):
        builder.platform_has_fast_fp16  # noqa: B018
    with pytest.raises(ValueError, match="only strongly typed networks"):
        builder.create_network(0)
    config = builder.create_builder_config()
    with pytest.raises(AttributeError, match="int8_calibrator' was removed"):
        config.int8_calibrator = object()
    with pytest.raises(AttributeError, match="set_quantization_flag' was removed"):
        config.set_quantization_flag  # noqa: B018
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    assert trt.OnnxParser(network, trt.Logger()).parse(tiny_stage(tmp_path)[0].model_bytes)
    layer = network.get_layer(0)
    with pytest.raises(AttributeError, match="'precision' was removed"):
        layer.precision = trt.DataType.FLOAT
    with pytest.raises(AttributeError, match="'set_output_type' was removed"):
        layer.set_output_type(0, trt.DataType.FLOAT)


def test_tensorrt_8_is_refused_with_the_jetpack_upgrade(monkeypatch) -> None:
    from compactinst_ros.backends.trt_build import import_tensorrt

    tensorrt_emu.install(monkeypatch, version="8.6.2")
    with pytest.raises(BackendError, match=r"8\.6\.2 is too old.*upgrade.*JetPack 6\.1 or later"):
        import_tensorrt()


def test_parse_errors_name_the_stage_and_precision(trt, tmp_path) -> None:
    _, stage = tiny_stage(tmp_path)
    broken = StageGraph("encoder", "fp16", b"\x08garbage", "0" * 64)
    with pytest.raises(BackendError, match="cannot parse the fp16 graph of stage 'encoder'"):
        build_serialized(broken, stage, tmp_path / "timing", BuildOptions(), False)
