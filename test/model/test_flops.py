"""Fidelity figures: MACs at Cityscapes resolution and parameter counts vs the paper (3 %)."""

from __future__ import annotations

import time

import pytest
import torch

from compactinst_ros.model import build_model
from compactinst_ros.model.flops import (
    COMPONENTS,
    count_ops,
    decoder_total,
    macs_by_component,
    params_by_component,
)

CITY = (1024, 2048)


def _gmacs(name: str) -> tuple[float, float]:
    macs = macs_by_component(count_ops(name, CITY, num_classes=8))
    return decoder_total(macs) / 1e9, sum(macs.values()) / 1e9


def _params_m(name: str) -> float:
    with torch.device("meta"):
        model = build_model(name)
    return sum(p.numel() for p in model.parameters()) / 1e6


def test_fastinst_r18_cityscapes_macs() -> None:
    start = time.perf_counter()
    dec, total = _gmacs("fastinst_r18_d3")
    assert time.perf_counter() - start < 20
    assert dec == pytest.approx(103.2, rel=0.03)
    assert total == pytest.approx(205.8, rel=0.03)


def test_m4_cityscapes_macs() -> None:
    dec, total = _gmacs("compactinst_r18_m4")
    assert dec == pytest.approx(264.9, rel=0.03)
    assert total == pytest.approx(446.5, rel=0.03)


def test_compactinst_r18_is_about_7_percent_cheaper() -> None:
    _, fast = _gmacs("fastinst_r18_d3")
    _, compact = _gmacs("compactinst_r18")
    assert 1 - compact / fast == pytest.approx(0.07, abs=0.015)
    assert compact == pytest.approx(205.8 * 0.93, rel=0.03)


def test_parameter_counts_k80() -> None:
    assert _params_m("compactinst_r50") == pytest.approx(35.9, rel=0.03)
    assert _params_m("fastinst_r50_d3") == pytest.approx(34.2, rel=0.03)
    assert _params_m("fastinst_r50_d3") == pytest.approx(34.176597, abs=1e-6)  # exact D3 count


def test_refinement_head_adds_1_77m_params() -> None:
    with torch.device("meta"):
        params = params_by_component(build_model("compactinst_r18"))
    assert params["refinement"] == 512 * 256 * 9 + 256 * 256 * 9 + 2 * 256 + 256


def test_records_carry_bytes_and_weights() -> None:
    records = count_ops("compactinst_r18", (256, 512), elem_size=2)
    assert {r.component for r in records} <= set(COMPONENTS)
    assert all(r.bytes_written > 0 and 0 <= r.weight_bytes <= r.bytes_read for r in records)
    stem = next(r for r in records if r.name == "backbone.conv1:convolution")
    assert stem.weight_bytes == 64 * 3 * 7 * 7 * 2
    assert stem.bytes_read == (3 * 256 * 512 + 64 * 3 * 7 * 7) * 2
    assert stem.bytes_written == 64 * 128 * 256 * 2
    assert stem.macs == 64 * 128 * 256 * 3 * 49
    masked = [r for r in records if r.name.split(":")[0].endswith(".masked_scores")]
    assert [r.kind for r in masked if r.macs] == ["bmm"] * 3  # one per layer's masked attention
    assert all(not r.counted and r.component == "transformer" for r in masked)
    weighted = [r for r in records if r.name.endswith("query_cross_attn.attn:bmm")]
    assert len(weighted) == 3 and all(r.counted for r in weighted)  # attention . V is counted
    fp32 = count_ops("compactinst_r18", (256, 512), elem_size=4)
    assert sum(r.bytes_read for r in fp32) > 1.9 * sum(r.bytes_read for r in records)


def test_counting_a_real_model_matches_the_meta_count() -> None:
    torch.set_num_threads(1)
    model = build_model("compactinst_demo")
    real = macs_by_component(count_ops(model, (256, 320)))
    meta = macs_by_component(count_ops("compactinst_demo", (256, 320)))
    assert real == meta and model.training  # training mode restored
