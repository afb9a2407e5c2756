"""Cost model: a hand-counted operator, stage sums, the bytes claim, and the CLI output format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactinst_ros.bench.cost_model import STAGES, op_bytes, op_time, stage_costs
from compactinst_ros.bench.devices import DEVICES
from compactinst_ros.cli import main
from compactinst_ros.model.flops import count_ops, macs_by_component


@pytest.fixture(scope="module")
def fastinst_512() -> list:
    return count_ops("fastinst_r18_d3", (512, 1024), elem_size=2, num_classes=8)


def test_conv3x3_256_on_64x128_matches_the_hand_count(fastinst_512: list) -> None:
    # The res3 output conv of the PPM-FPN: 3x3, 256 -> 256, no bias, on the 1/8 map (64x128).
    macs = 64 * 128 * 256 * 256 * 9
    (conv,) = [op for op in fastinst_512 if op.kind == "convolution" and op.macs == macs]
    act_in = 256 * 64 * 128 * 2  # FP16 input map
    weights = 256 * 256 * 3 * 3 * 2  # FP16 kernel
    act_out = 256 * 64 * 128 * 2  # FP16 output map
    assert op_bytes(conv) == act_in + weights + act_out == 9_568_256
    assert conv.weight_bytes == weights
    # Orin Nano: 9.57 MB / 68 GB/s = 0.141 ms < 2 x 4.83 GMAC / 10 TFLOPS = 0.966 ms.
    t, bw_bound = op_time(conv, DEVICES["orin-nano"])
    assert t == pytest.approx(2 * macs / 10e12) and not bw_bound


def test_layer_norm_over_pixel_tokens_is_bandwidth_bound(fastinst_512: list) -> None:
    tokens = 64 * 128
    norms = [
        op
        for op in fastinst_512
        if op.kind == "native_layer_norm" and op.bytes_written >= tokens * 256 * 2
    ]
    assert norms, "the pixel path has LayerNorms over H/8 x W/8 tokens"
    t, bw_bound = op_time(norms[0], DEVICES["orin-nano"])
    assert bw_bound and t == pytest.approx(op_bytes(norms[0]) / 68e9)


def test_stages_sum_to_total_and_match_the_model_counts(fastinst_512: list) -> None:
    costs = stage_costs(fastinst_512, {"orin-nano": DEVICES["orin-nano"]})
    total = costs["total"]
    assert sum(costs[s].bytes for s in STAGES) == total.bytes
    assert sum(costs[s].time_ms["orin-nano"] for s in STAGES) == pytest.approx(
        total.time_ms["orin-nano"]
    )
    per_component = macs_by_component(fastinst_512)
    assert costs["backbone"].fvcore_macs == per_component["backbone"] + per_component["normalize"]
    assert costs["pixel_decoder"].fvcore_macs == per_component["pixel_decoder"]
    assert 0.0 < costs["decoder"].bw_bound_share["orin-nano"] <= 1.0


def test_pooling_cuts_decoder_bytes_not_backbone_bytes(fastinst_512: list) -> None:
    device = {"orin-nano": DEVICES["orin-nano"]}
    fast = stage_costs(fastinst_512, device)
    compact = stage_costs(count_ops("compactinst_r18", (512, 1024), num_classes=8), device)
    assert compact["backbone"].bytes == fast["backbone"].bytes
    assert compact["decoder"].activation_bytes < 0.5 * fast["decoder"].activation_bytes
    assert compact["decoder"].time_ms["orin-nano"] < fast["decoder"].time_ms["orin-nano"]


def test_cli_writes_speedups_per_device(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [
        "costmodel",
        "--configs",
        "fastinst_r18_d3,compactinst_r18",
        "--sizes",
        "250x320",
        "--devices",
        "orin-nano,lab:100:20:2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "256x320" in text and "predicted decoder speed-up" in text
    result = json.loads((tmp_path / "costmodel.json").read_text())
    assert set(result["devices"]) == {"orin-nano", "lab"}
    rows = result["rows"]
    assert {r["device"] for r in rows} == {"orin-nano", "lab"}
    row = rows[0]
    for key in (
        "config",
        "size",
        "requested_size",
        "device",
        "decoder_ms",
        "model_ms",
        "decoder_speedup",
        "model_speedup",
        "decoder_bw_bound_share",
        "stages",
    ):
        assert key in row
    assert row["size"] == [256, 320] and row["requested_size"] == [250, 320]
    assert set(row["stages"]) == {*STAGES, "total"}
    base = [r for r in rows if r["config"] == "fastinst_r18_d3"]
    assert all(r["decoder_speedup"] == pytest.approx(1.0) for r in base)
    compact = [r for r in rows if r["config"] == "compactinst_r18"]
    assert all(r["decoder_speedup"] > 1.0 for r in compact)
    assert (tmp_path / "costmodel.png").stat().st_size > 10_000


def test_cli_rejects_a_single_config(capsys: pytest.CaptureFixture) -> None:
    assert main(["costmodel", "--configs", "compactinst_r18", "--sizes", "vga"]) == 2
    assert "baseline" in capsys.readouterr().err
