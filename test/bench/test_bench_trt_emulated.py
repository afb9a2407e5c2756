"""``compactinst bench --backends tensorrt`` end to end without a GPU, on the CPU stand-ins of
test/gpu/emu (TensorRT: a "plan" is the ONNX graph and engines run on ONNX Runtime; pycuda: the
kernel sources on the CPU emulator, events on the host clock). The bench loads the session's
exported bundles from its work folder (test_bench_latency covers its own export), the runtime's
engine cache builds each engine once and serves it to the second scope, and the runtime's
TensorRT backend binds and runs them. The times are ONNX Runtime's, and the output
says so; what this proves is the wiring, not TensorRT's speed."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "gpu" / "emu"))

import pycuda_emu  # noqa: E402
import tensorrt_emu  # noqa: E402

from compactinst_ros.bench.runners import STAND_IN_NOTE  # noqa: E402
from compactinst_ros.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
CONFIGS = ("fastinst_r18_d3", "compactinst_r18")


@pytest.mark.full  # ~35 s: the whole GPU-machine script on the stand-ins; make test-full
def test_tensorrt_sweep_runs_the_runtime_backend_on_the_stand_ins(
    emu_lib: object,
    paper_bundles: object,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    pycuda_emu.install(monkeypatch, emu_lib)
    tensorrt_emu.install(monkeypatch)
    workdir = tmp_path / "out" / "bundles"  # the bench's: <--out>/bundles
    workdir.mkdir(parents=True)
    for config in CONFIGS:
        bundle = paper_bundles(config)
        (workdir / bundle.root.name).symlink_to(bundle.root, target_is_directory=True)
    height, width = paper_bundles.size
    cache = tmp_path / "engines"
    argv = [
        "bench",
        "--backends",
        "tensorrt",
        "--configs",
        ",".join(CONFIGS),
        "--sizes",
        f"{height}x{width}",
        "--num-classes",
        str(paper_bundles.num_classes),
        "--trials",
        "2",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--engine-cache",
        str(cache),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for scope in ("decoder", "model"):
        assert f"tensorrt / {scope} [{STAND_IN_NOTE}]: median ms" in text
    assert text.count("no usable TensorRT engine") == 4  # 2 configs x 2 stages, then cache hits
    assert sorted(p.name.split("-")[0] for p in cache.glob("*.engine")) == [
        "decoder", "decoder", "encoder", "encoder",
    ]  # fmt: skip
    record = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert record["unavailable"] == {}
    facts = record["backends"]["tensorrt"]
    assert facts["note"] == STAND_IN_NOTE and facts["device"] == "CPU kernel emulator"
    assert facts["tensorrt"] == "10.3.0" and facts["engine_cache"] == str(cache)
    rows = record["results"]
    assert [(r["scope"], r["config"]) for r in rows] == [
        (scope, config) for scope in ("decoder", "model") for config in CONFIGS
    ]
    for r in rows:
        assert r["size"] == [height, width] and len(r["trials_ms"]) == 2 and r["median_ms"] > 0
    assert (tmp_path / "out" / "latency_model_tensorrt.png").is_file()
