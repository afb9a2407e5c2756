"""The Orin proxies of the decoder (bench/orin_proxies.py) need a CUDA GPU to measure anything;
here, their flow on the CPU (every proxy says why it did not run), the speed-up and the table
from given times, and the builder's bytes read from an engine report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from compactinst_ros.bench import orin_proxies
from compactinst_ros.bench.orin_proxies import CONFIGS, ProxyRow

ROOT = Path(__file__).resolve().parents[2]


def test_without_cuda_every_proxy_says_why_and_the_table_keeps_the_paper_range() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the proxies would measure")
    rows = orin_proxies.measure(sm_counts=(8,), reps=1)
    assert [r.proxy for r in rows] == ["whole GPU", "L2 flushed", "8 SMs"]
    assert all(r.unavailable == "needs CUDA" and r.ratio is None for r in rows)
    lines = orin_proxies.table(rows)
    assert lines[1] == "whole GPU    not run: needs CUDA"
    assert lines[-1] == "the paper, Jetson Orin Nano, TensorRT FP16: 2.35-4.74x"


def test_the_speed_up_is_fastinst_over_compactinst_beside_the_builders_bytes(tmp_path) -> None:
    rows = [
        ProxyRow("whole GPU", {CONFIGS[0]: 3.0, CONFIGS[1]: 2.0}),
        ProxyRow("L2 flushed", {CONFIGS[0]: 6.0, CONFIGS[1]: 2.5}),
        ProxyRow("8 SMs", unavailable="no green context of 8 SMs: not supported"),
        ProxyRow("16 SMs", {CONFIGS[0]: 9.0}),  # one config missing: no ratio
    ]
    assert [r.ratio for r in rows] == [1.5, 2.4, None, None]
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    gpu_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_bench)
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"paper": {
        CONFIGS[0]: {"summary": {"bytes_per_frame": 2663e6}},
        CONFIGS[1]: {"summary": {"bytes_per_frame": 1079e6}},
    }}))  # fmt: skip
    assert gpu_bench.builder_bytes(None) is None
    lines = orin_proxies.table(rows, gpu_bench.builder_bytes(report))
    assert lines[1].split()[-1] == "1.50x" and lines[2].split()[-1] == "2.40x"
    assert lines[3] == "8 SMs        not run: no green context of 8 SMs: not supported"
    assert lines[4].split()[-1] == "n/a"
    assert lines[5].endswith("2663 MB / 1079 MB = 2.47x")
    assert gpu_bench.parse_args(["--skip-proxies"]).skip_proxies


def test_the_kept_builder_report_gives_both_decoders_bytes() -> None:
    """The report gpu_check.sh hands the proxies by default holds both paper decoders, as
    ``compactinst engine-report --paper`` measured them (CompactInst's the smaller)."""
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    gpu_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_bench)
    kept = gpu_bench.builder_bytes(ROOT / "docs" / "engine_reports" / "paper-1024x2048-sm86.json")
    assert set(kept) == set(CONFIGS) and 0 < kept[CONFIGS[1]] < kept[CONFIGS[0]]
