"""Latency bench: size parsing/padding, the alternating protocol, and a tiny real ORT sweep."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from compactinst_ros.bench.latency import (
    NAMED_SIZES,
    BenchOptions,
    format_tables,
    measure,
    pad32,
    parse_sizes,
)
from compactinst_ros.bench.runners import WallRunner
from compactinst_ros.cli import main
from compactinst_ros.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_sizes_are_named_or_hxw_and_padded_to_32() -> None:
    assert len(NAMED_SIZES) == 6
    assert {(480, 640), (1080, 1920), (1024, 2048)} <= set(NAMED_SIZES.values())
    assert parse_sizes("vga,1080x1920") == [("vga", (480, 640)), ("1080x1920", (1080, 1920))]
    assert pad32(1080, 1920) == (1088, 1920)
    assert pad32(480, 640) == (480, 640)
    with pytest.raises(ConfigError, match="HxW"):
        parse_sizes("big")
    with pytest.raises(ConfigError, match="160"):
        parse_sizes("64x64")


def test_trials_alternate_the_config_order() -> None:
    calls: list[str] = []
    runners = {name: WallRunner(lambda n=name: calls.append(n)) for name in ("a", "b", "c")}
    times = measure(runners, warmup=1, iters=2, trials=3, progress=lambda _: None)
    assert all(len(v) == 3 and all(t >= 0 for t in v) for v in times.values())
    timed = calls[3:]  # after one warm-up call each
    rounds = [timed[i : i + 6 : 2] for i in range(0, len(timed), 6)]
    assert rounds == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]


def test_tiny_onnxruntime_sweep_writes_json_tables_and_plots(
    paper_bundles, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The baseline's bundle is the session's (found in ``--out``/bundles, as a rerun finds its
    own); the small compactinst_demo is exported by the bench itself (a paper config takes
    10-20 s to export on 2 cores)."""
    height, width = paper_bundles.size
    workdir = tmp_path / "bundles"
    workdir.mkdir()
    baseline = paper_bundles("fastinst_r18_d3").root
    reused = workdir / baseline.name
    reused.symlink_to(baseline, target_is_directory=True)
    argv = [
        "bench",
        "--configs",
        "fastinst_r18_d3,compactinst_demo",
        "--sizes",
        f"{height}x{width}",
        "--num-classes",
        str(paper_bundles.num_classes),
        "--backends",
        "onnxruntime,torch-cuda,tensorrt",
        "--decoder-only",
        "--trials",
        "2",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "onnxruntime / decoder" in text and "(1.00x)" in text
    record = json.loads((tmp_path / "bench.json").read_text())
    assert set(record) == {"protocol", "host", "backends", "results", "unavailable"}
    assert record["backends"]["onnxruntime"]["threads"] == 1
    assert record["protocol"]["baseline"] == "fastinst_r18_d3"
    rows = record["results"]
    assert [r["config"] for r in rows] == ["fastinst_r18_d3", "compactinst_demo"]
    for r in rows:
        assert r["backend"] == "onnxruntime" and r["scope"] == "decoder"
        assert r["size"] == r["requested_size"] == [height, width]
        assert len(r["trials_ms"]) == 2 and r["median_ms"] > 0
    assert rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[0]["speedup_paired"] == pytest.approx(1.0)
    ratios = [b / t for b, t in zip(rows[0]["trials_ms"], rows[1]["trials_ms"], strict=True)]
    assert rows[1]["speedup_paired"] == pytest.approx(sum(ratios) / 2)  # median of two
    assert rows[1]["speedup"] == pytest.approx(rows[0]["median_ms"] / rows[1]["median_ms"])
    import torch

    if not torch.cuda.is_available():
        assert "CUDA" in record["unavailable"]["torch-cuda"]
    if importlib.util.find_spec("tensorrt") is None:
        assert "TensorRT" in record["unavailable"]["tensorrt"]
    assert (tmp_path / "latency_decoder_onnxruntime.png").stat().st_size > 10_000
    exported = workdir / f"compactinst_demo_k{paper_bundles.num_classes}_{height}x{width}"
    assert (exported / "decoder.onnx").exists()
    assert sorted(workdir.iterdir()) == sorted([exported, reused]) and reused.is_symlink()
    assert "compactinst_demo" in format_tables(record)


def test_unknown_backend_is_named(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--backends", "tpu"]) == 2
    assert "tpu" in capsys.readouterr().err


def test_options_refuse_what_cannot_be_swept() -> None:
    with pytest.raises(ConfigError, match="each config once"):
        BenchOptions(configs=("compactinst_r18", "compactinst_r18"))
    with pytest.raises(ConfigError, match="scopes"):
        BenchOptions(scopes=("encoder",))
    with pytest.raises(ConfigError, match="--trials"):
        BenchOptions(trials=0)


def _gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_script_cpu_parts(capsys: pytest.CaptureFixture) -> None:
    gpu_bench = _gpu_bench()
    assert gpu_bench.device_preset("NVIDIA H200", 132, None)[0].name.startswith("NVIDIA H200")
    assert gpu_bench.device_preset("NVIDIA RTX A4000", 48, None)[0].bandwidth_gbs == 448.0
    device, line = gpu_bench.device_preset("Orin", 8, "agx-orin")
    assert device.bandwidth_gbs == 204.8 and "given with --device" in line
    record = {
        "results": [
            {"scope": "decoder", "config": c, "size": [1088, 1920], "median_ms": ms, "speedup": s}
            for c, ms, s in (("fastinst_r18_d3", 4.0, 1.0), ("compactinst_r18", 2.0, 2.0))
        ]
    }
    lines = gpu_bench.speedup_table(record)
    assert lines[0].startswith("decoder") and "2.00x" in lines[1] and "1088x1920" in lines[1]
    import torch

    if not torch.cuda.is_available():
        assert gpu_bench.main([]) == 2  # refuses to "measure" a GPU on the CPU
        gpu_bench.ncu_target("compactinst_r18", (256, 320), "cpu")
        assert "profiled one compactinst_r18" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is here")
def test_an_unavailable_backend_alone_says_so_once_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "bench"
    assert main(["bench", "--backends", "tensorrt", "--out", str(out)]) == 1
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count("tensorrt is not available") == 1
    assert "nothing written" in printed.err
    assert not out.exists()


def test_a_sweep_estimates_the_rest_after_its_first_cell(tmp_path: Path) -> None:
    """A plain bench runs for hours on a CPU: after the first cell it says about how long."""
    from compactinst_ros.bench.latency import run_sweep

    sizes = [("a", (160, 160)), ("b", (150, 320))]  # b is padded to 160x320
    options = BenchOptions(configs=("compactinst_demo",), sizes=sizes, backends=("torch-cpu",),
                           scopes=("decoder",), warmup=0, iters=1, trials=1, threads=1,
                           workdir=tmp_path)  # fmt: skip
    lines: list[str] = []
    record = run_sweep(options, lines.append)
    assert [r["requested_size"] for r in record["results"]] == [[160, 160], [150, 320]]
    assert [r["size"] for r in record["results"]] == [[160, 160], [160, 320]]
    (estimate,) = [line for line in lines if "estimate:" in line]
    assert "for the other 1 cells of torch-cpu (the first took " in estimate
    padded = "[torch-cpu] decoder at 160x320 (padded from 150x320)"
    assert lines.index(estimate) < lines.index(padded)
