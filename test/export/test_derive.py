"""``compactinst derive``: typed graphs written as files stand in for the derivation tools, which a
vehicle (TensorRT, no onnx or ONNX Runtime quantization) does not have."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from compactinst_ros.bundle import TYPED_DIR, ModelBundle
from compactinst_ros.cli import main
from compactinst_ros.errors import BundleError

#: what deriving imports: without them a machine cannot derive (as on a Jetson)
DERIVATION_MODULES = ("onnx", "compactinst_ros.variants")


def without_derivation_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DERIVATION_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


def test_derived_files_stand_in_for_missing_tools(
    typed_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert main(["derive", str(typed_copy)]) == 0
    written = sorted((typed_copy / TYPED_DIR).glob("*.onnx"))
    assert len(written) == 6  # fp16: 2 stages; int8: 2 stages x (tensorrt, cpu)
    assert all(str(p) in capsys.readouterr().out for p in written[:1])
    vehicle = Path(shutil.copytree(typed_copy, tmp_path / "on_vehicle"))
    bundle = ModelBundle.load(vehicle)
    without_derivation_tools(monkeypatch)
    for stage in ("encoder", "decoder"):
        graph = bundle.stage_graph(stage, "fp16")
        assert graph.sha256 == bundle.variants["fp16"]["stages"][stage]["sha256"]
        cpu = bundle.stage_graph(stage, "int8", target="cpu")
        assert cpu.sha256 == bundle.variants["int8"]["stages"][stage]["sha256"]["cpu"]


def test_without_tools_or_files_the_error_names_both_fixes(
    typed_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = ModelBundle.load(typed_copy)
    without_derivation_tools(monkeypatch)
    with pytest.raises(BundleError, match=r"precision\].*compactinst derive"):
        bundle.stage_graph("encoder", "fp16")


def test_a_changed_typed_file_is_refused(typed_copy: Path, tmp_path: Path) -> None:
    assert main(["derive", str(typed_copy), "--precision", "fp16"]) == 0
    vehicle = Path(shutil.copytree(typed_copy, tmp_path / "changed"))
    bundle = ModelBundle.load(vehicle)
    recorded = bundle.variants["fp16"]["stages"]["decoder"]["sha256"]
    stored = vehicle / TYPED_DIR / f"{recorded}.onnx"
    stored.write_bytes(stored.read_bytes()[:-1] + b"\x00")
    with pytest.raises(BundleError, match="does not match"):
        bundle.stage_graph("decoder", "fp16")
