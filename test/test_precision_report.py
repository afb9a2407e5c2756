"""``compactinst precision-report`` when one row's backend refuses to open: the rows that ran are
written and the refused row is named with its reason, in the command line's syntax."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compactinst_ros.bundle import (
    METADATA_FILE,
    GoldenCase,
    default_bundle_path,
    read_golden,
    write_golden,
)
from compactinst_ros.cli import main
from compactinst_ros.train.synthetic import generate

pytest.importorskip("openvino")


def test_a_refused_row_is_named_and_the_others_are_written(tmp_path: Path, capsys) -> None:
    """Golden INT8 outputs the OpenVINO INT8 model cannot reproduce (masks negated): its row is
    refused by the acceptance check; ONNX Runtime, which runs no check, and OpenVINO FP32 run."""
    root = Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))
    meta = json.loads((root / METADATA_FILE).read_text())
    del meta["variants"]["fp16"]  # fewer rows: the test is about the refused one
    (root / METADATA_FILE).write_text(json.dumps(meta))
    cases = {p: list(read_golden(root, p)) for p in ("fp32", "int8")}
    cases["int8"] = [GoldenCase(c.image, {**c.outputs, "pred_masks": -c.outputs["pred_masks"]})
                     for c in cases["int8"]]  # fmt: skip
    write_golden(root, cases)
    data = tmp_path / "data"
    generate(data, 1, 3, 64, 96, progress=False)
    out = tmp_path / "report"
    code = main(["precision-report", str(root), "--data", str(data), "--out", str(out),
                 "--rounds", "1", "--limit", "1", "--threads", "1",
                 "--backends", "onnxruntime", "openvino"])  # fmt: skip
    assert code == 1  # the report is incomplete
    report = json.loads((out / "precision_report.json").read_text())
    assert list(report["rows"]) == ["fp32", "int8 cpu", "int8 tensorrt", "openvino fp32"]
    assert all("accuracy" in row for row in report["rows"].values())
    reason = report["refused"]["openvino int8"]
    assert "fails the acceptance check" in reason and "(--precision fp32)" in reason, reason
    table = (out / "precision_report.txt").read_text()
    assert "openvino int8: refused, not measured: the int8 OpenVINO model" in table
    assert "row(s) refused to open: openvino int8" in capsys.readouterr().err
