"""``compactinst infer``: overlay PNG + JSON per image through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from compactinst_ros.cli import main


def test_infer_writes_overlay_and_json(random_bundle: Path, tmp_path: Path, capsys) -> None:
    image = np.zeros((180, 260, 3), np.uint8)
    cv2.circle(image, (90, 90), 50, (0, 0, 255), -1)
    path = tmp_path / "frame.png"
    cv2.imwrite(str(path), image)
    out = tmp_path / "out"
    code = main(
        [
            "infer",
            "--model",
            str(random_bundle),
            "--backend",
            "onnxruntime",
            "--threads",
            "1",
            "--score-threshold",
            "0",
            "--out",
            str(out),
            str(path),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "[1/1]" in printed
    overlay = cv2.imread(str(out / "frame_overlay.png"))
    assert overlay.shape == (180, 260, 3)
    assert not np.array_equal(overlay, image)
    record = json.loads((out / "frame.json").read_text())
    assert (record["height"], record["width"]) == (180, 260)
    assert record["backend"] == "onnxruntime" and record["model"] == "compactinst_demo"
    assert record["instances"], "score threshold 0 keeps instances"
    first = record["instances"][0]
    assert set(first) == {"id", "label", "name", "score", "box", "area"}
    assert first["id"] == 1 and len(first["box"]) == 4 and first["area"] > 0
    scores = [i["score"] for i in record["instances"]]
    assert scores == sorted(scores, reverse=True)
    stages = {"preprocess", "encoder", "decoder", "postprocess", "inference"}
    assert stages <= set(record["timings_ms"])
    assert isinstance(record["segments"], list)


def test_unreadable_image_fails_cleanly(random_bundle: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    code = main(["infer", "--model", str(random_bundle), "--out", str(tmp_path), str(bad)])
    assert code == 1
    assert "cannot read image" in capsys.readouterr().err


def test_missing_bundle_fails_cleanly(tmp_path: Path, capsys) -> None:
    code = main(["infer", "--model", str(tmp_path / "none"), str(tmp_path / "x.png")])
    assert code == 1
    assert "does not exist" in capsys.readouterr().err
