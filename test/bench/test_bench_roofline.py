"""Roofline: parse a real-format Nsight Compute CSV, classify kernels, Table-1 shares, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactinst_ros.bench.devices import DEVICES, get_device
from compactinst_ros.bench.roofline import HMMA_16816_FLOPS, parse_ncu_csv, summarize
from compactinst_ros.cli import main
from compactinst_ros.errors import ConfigError, InputError

FIXTURE = Path(__file__).parent / "data" / "ncu_decoder_small.csv"
# The same three kernels as ``--page raw`` prints them: one wide row per launch, units row first.
RAW = Path(__file__).parent / "data" / "ncu_raw_page.csv"


def test_details_csv_parses_units_and_thousands_separators() -> None:
    kernels = parse_ncu_csv(FIXTURE.read_text())
    assert [k.id for k in kernels] == [0, 1, 2]
    gemm, norm, add = kernels
    assert gemm.time_s == pytest.approx(20e-6)
    assert gemm.dram_bytes == 5_000_000
    # sm__ops_path_tensor_* is n/a on this GPU: fall back to HMMA.16816 instructions.
    assert gemm.tensor_flops == 10_000 * HMMA_16816_FLOPS
    assert gemm.cuda_flops == 2 * 1_000  # one HFMA = 2 FLOPs
    assert norm.cuda_flops == 500_000 + 500_000 + 2 * 1_000_000
    assert add.cuda_flops == 2_000_000
    assert [k.is_tensor for k in kernels] == [True, False, False]


def test_table1_shares_per_class() -> None:
    device = DEVICES["rtx-a4000"]
    s = summarize(parse_ncu_csv(FIXTURE.read_text()), device)
    assert s["tensor-core"]["kernels"] == 1 and s["cuda-core"]["kernels"] == 2
    assert s["cuda-core"]["time_share"] == pytest.approx(0.8)
    assert s["cuda-core"]["bytes_share"] == pytest.approx(24 / 29)
    assert s["tensor-core"]["bytes_share"] + s["cuda-core"]["bytes_share"] == pytest.approx(1.0)
    ai = 5e6 / 24e6  # CUDA-core FLOPs / bytes
    assert s["cuda-core"]["intensity"] == pytest.approx(ai)
    assert s["cuda-core"]["pct_of_ridge"] == pytest.approx(100 * ai / device.cuda_ridge)
    assert s["all"]["dram_gb"] == pytest.approx(0.029)


def test_raw_page_gives_the_same_kernels() -> None:
    kernels = parse_ncu_csv(RAW.read_text())
    assert [k.dram_bytes for k in kernels] == [5e6, 16e6, 8e6]
    assert [k.time_s for k in kernels] == pytest.approx([20e-6, 50e-6, 30e-6])
    assert [k.is_tensor for k in kernels] == [True, False, False]


def test_missing_metrics_and_garbage_are_named() -> None:
    with pytest.raises(InputError, match="ID"):
        parse_ncu_csv("no csv here\n")
    no_time = FIXTURE.read_text().replace("gpu__time_duration.sum", "gpu__cycles.sum")
    with pytest.raises(InputError, match=r"gpu__time_duration\.sum"):
        parse_ncu_csv(no_time)


def test_custom_device_spec() -> None:
    d = get_device("nx:102.4:25:3.8")
    assert d.bandwidth_gbs == 102.4 and d.tensor_ridge == pytest.approx(25e12 / 102.4e9)
    with pytest.raises(ConfigError, match="orin-nano"):
        get_device("tpu")


def test_cli_prints_table_and_writes_json_and_plot(tmp_path: Path, capsys) -> None:
    assert main(["roofline", str(FIXTURE), "--device", "h200", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cuda-core" in out and "80.0%" in out
    record = json.loads((tmp_path / "roofline.json").read_text())
    assert record["summary"]["cuda-core"]["kernels"] == 2
    assert (tmp_path / "roofline.png").stat().st_size > 10_000


def issue_csv(rows: list[tuple[int, str, str, str, str]]) -> str:
    """A details-page ncu CSV of (launch id, kernel, metric, unit, value) rows."""
    head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"')  # fmt: skip
    lines = [
        f'"{i}","1","python3","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(8, 1, 1)","0",'
        f'"9.0","Command line profiler metrics","{metric}","{unit}","{value}"'
        for i, kernel, metric, unit, value in rows
    ]
    return "==PROF== Connected to process 1\n" + "\n".join([head, *lines]) + "\n"


def test_issue_floor_is_average_instructions_at_one_a_cycle_at_the_profiled_clock() -> None:
    """pp_stats: 2,000 warp instructions per sub-partition, 10,000 SM cycles in 5 us (2 GHz):
    1 us at peak issue; pp_tiles launched twice, summed; another kernel's rows left out; a
    kernel without the cycle count is named."""
    from compactinst_ros.bench.roofline import ISSUE_METRICS, issue_floor_s
    from compactinst_ros.errors import DataError

    rows = []
    for i, kernel, inst, cycles, usecond in (
        (0, "pp_stats", "2,000", "10,000", "5"),
        (1, "pp_tiles", "500", "2,000", "1"),
        (2, "pp_tiles", "500", "2,000", "1"),
        (3, "ampere_gemm", "9,000", "9,000", "9"),
    ):
        rows += [
            (i, kernel, "smsp__inst_executed.avg", "inst", inst),
            (i, kernel, "sm__cycles_elapsed.avg", "cycle", cycles),
            (i, kernel, "gpu__time_duration.sum", "usecond", usecond),
        ]
    assert ISSUE_METRICS.split(",") == [
        "gpu__time_duration.sum", "smsp__inst_executed.avg", "sm__cycles_elapsed.avg",
    ]  # fmt: skip
    floors = issue_floor_s(issue_csv(rows), "pp_")
    assert floors == pytest.approx({"pp_stats": 1e-6, "pp_tiles": 2 * 0.25e-6})
    with pytest.raises(DataError, match=r"kernel pp_stats: no sm__cycles_elapsed\.avg"):
        issue_floor_s(issue_csv([r for r in rows if "cycles" not in r[2]]), "pp_")
