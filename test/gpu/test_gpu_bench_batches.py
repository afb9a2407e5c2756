"""scripts/gpu_bench.py's TensorRT batch step, which needs a GPU to measure anything, run on the
stand-ins of emu/ for its wiring (one engine set per size, a frame per slot, event times per batch
and per frame), and its arguments."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from compactinst_ros.bundle import default_bundle_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


def gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_batch_step_times_each_size_per_batch_and_per_frame(emulated_gpu, tmp_path) -> None:
    bench = gpu_bench()
    args = bench.parse_args(["--batch-sizes", "2", "1", "--batch-frame", "64x96"])
    assert args.batch_sizes == [2, 1] and args.batch_frame == (64, 96) and not args.skip_batches
    assert bench.parse_args([]).batch_sizes == [1, 2, 3, 4]
    with pytest.raises(SystemExit):
        bench.parse_args(["--batch-frame", "64"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--batch-sizes", "0"])
    rows = bench.batch_step(default_bundle_path(), [1, 2], (64, 96), 2, tmp_path / "engines")
    assert [r["batch"] for r in rows] == [1, 2]
    for r in rows:
        assert r["device_ms_per_frame"] == pytest.approx(r["device_ms_per_batch"] / r["batch"])
        low, high = r["device_ms_spread"]
        assert 0 < low <= r["device_ms_per_batch"] <= high
    assert len(list((tmp_path / "engines").glob("*.engine"))) == 4  # two stages x two sizes
    table = bench.batch_table(rows)
    assert table[0].split()[:3] == ["batch", "ms/batch", "ms/frame"] and len(table) == 3


def test_overlap_step_runs_both_ways_for_each_camera_count(emulated_gpu, tmp_path) -> None:
    """The overlap step's wiring (its speed means nothing on the emulator): per camera count,
    serialized and overlapped rounds, each a positive rate with its spread, and their ratio."""
    bench = gpu_bench()
    assert bench.parse_args([]).overlap_frame == (1080, 1920)
    rows = bench.overlap_step(default_bundle_path(), (1, 2), (64, 96), 1, 1, tmp_path / "engines")
    assert [r["cameras"] for r in rows] == [1, 2]
    for r in rows:
        for name in ("serialized", "overlapped"):
            low, high = r[f"{name}_fps_spread"]
            assert 0 < low == r[f"{name}_fps"] == high  # one round
        assert r["overlapped_over_serialized"] == pytest.approx(
            r["overlapped_fps"] / r["serialized_fps"]
        )
    table = bench.overlap_table(rows)
    assert table[0].split()[:2] == ["cameras", "serialized"] and len(table) == 3
    assert table[2].split()[0] == "2" and table[2].endswith("x")
