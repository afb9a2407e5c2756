"""The TensorRT stand-in's parser enforces the type rules of the version it stands in for
(test/fixtures/tensorrt_rules): the INT8 decoder graph ONNX Runtime's defaults derive (INT32
bias dequantization, LayerNormalization) does not parse, the bundle's graphs do, and
scripts/gpu_check.py builds the FP16 and INT8 engines through their acceptance check, printing
every parser error where a graph is refused."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import tensorrt_emu

from compactinst_ros import variants
from compactinst_ros.bundle import ModelBundle, default_bundle_path, typed_graph_path

#: ONNX Runtime's defaults, which the TensorRT graph used to be derived with
OLD_TARGET = dataclasses.replace(
    variants.INT8_TARGETS["tensorrt"], quantize_bias=True, tensorrt_form=False,
    modelopt_rules=False, high_precision="fp32",
)


@pytest.fixture(scope="module")
def old_int8_decoder() -> bytes:
    """The default bundle's INT8 decoder graph as ONNX Runtime's defaults derived it."""
    bundle = ModelBundle.load(default_bundle_path(), with_variants=False)
    meta = json.loads((bundle.root / "bundle.json").read_text())
    ranges = bundle.root / meta["variants"]["int8"]["stages"]["decoder"]["ranges"]
    # that recipe left no decoder layer in FP32
    model = variants.quantize(onnx.load(str(bundle.stage("decoder").path)), ranges, OLD_TARGET, ())
    return variants.serialize(model)


@pytest.mark.parametrize(
    ("version", "rules"),
    [("10.3.0", "10.3"), ("10.16.1", "10.16"), ("11.4.0", "11"), ("8.6.2", None)],
)
def test_stand_in_takes_the_rules_of_its_version(monkeypatch, version, rules) -> None:
    tensorrt_emu.install(monkeypatch, version=version)
    got = tensorrt_emu.type_rules
    assert (got["version"] if got else None) == rules


@pytest.mark.parametrize("version", ["10.3.0", "10.16.1", "11.4.0"])
def test_stand_in_parser_refuses_the_old_int8_decoder(monkeypatch, old_int8_decoder, version):
    trt = tensorrt_emu.install(monkeypatch, version=version)
    logger = trt.Logger()
    network = trt.Builder(logger).create_network(
        1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    )
    parser = trt.OnnxParser(network, logger)
    assert not parser.parse(old_int8_decoder)
    errors = [parser.get_error(i).desc() for i in range(parser.num_errors)]
    short = version.rsplit(".", 1)[0] if not version.startswith("11") else "11"
    int32 = [e for e in errors if "dequantizes INT32" in e]
    assert len(int32) == 3 and all(e.startswith(f"TensorRT {short}: ") for e in int32), errors
    # the layer norms too where the importer's setComputePrecision call is unguarded (10.3)
    assert len(errors) == 3 + (13 if short == "10.3" else 0), errors


def test_gpu_check_builds_typed_engines_and_prints_the_parser_log(
    emulated_gpu, old_int8_decoder, capsys, tmp_path
) -> None:
    import gpu_check

    checks = gpu_check.Checks()
    gpu_check.check_typed_engines(str(default_bundle_path()), checks, None)
    assert [row["ok"] for row in checks.rows] == [True, True], checks.rows
    assert all("acceptance passed on 3 golden cases" in r["detail"] for r in checks.rows)
    capsys.readouterr()

    # a copy of the bundle whose INT8 decoder is the old graph (kept in typed/, as derive does)
    root = Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))
    digest = hashlib.sha256(old_int8_decoder).hexdigest()
    path = typed_graph_path(root, digest)
    path.parent.mkdir(exist_ok=True)  # typed/ is there where the graphs were derived
    path.write_bytes(old_int8_decoder)
    meta = json.loads((root / "bundle.json").read_text())
    meta["variants"]["int8"]["stages"]["decoder"]["sha256"]["tensorrt"] = digest
    (root / "bundle.json").write_text(json.dumps(meta))
    checks = gpu_check.Checks()
    gpu_check.check_typed_engines(str(root), checks, None)
    fp16, int8 = checks.rows
    assert fp16["ok"] and not int8["ok"] and int8["parsed"] is False
    # the builder writes out the layer norms of any graph (trt_build.parser_bytes): what is
    # left are the three INT32 bias dequantizations
    assert "the parser refused decoder (3 parser errors)" in int8["detail"]
    out = capsys.readouterr().out
    assert f"parser log, int8 decoder ({digest[:12]}):" in out
    log = out[out.index("parser log, int8 decoder") :].splitlines()[1:4]
    assert all(line.startswith("    TensorRT 10.3: DequantizeLinear node") for line in log), log
    assert all("dequantizes INT32" in line for line in log)
