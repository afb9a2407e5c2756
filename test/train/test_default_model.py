"""The embedded default model: the bundle loads, and its accuracy on held-out synthetic scenes
(seed 1, never trained on) stays above a floor, through the runtime Pipeline (ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactinst_ros.bundle import ModelBundle
from compactinst_ros.eval.evaluate import evaluate_bundle
from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.train.synthetic import generate

BUNDLE = Path(__file__).resolve().parents[2] / "models" / "default"
# Measured on these 12 held-out images: AP 63.5, PQ 88.9 (200 images: models/README.md); floors
# sit 13-14 points below (AP at the project's target of 50), so that a real regression (broken
# export, wrong labels, the 128x192 stage exported instead of the 256x384 fine-tune) trips them.
FLOOR_AP = 50.0
FLOOR_PQ = 75.0

pytest.importorskip("onnxruntime")


def test_bundle_loads_and_fits_the_repo():
    bundle = ModelBundle.load(BUNDLE, verify_hashes=True)
    assert bundle.name == "compactinst_demo"
    assert bundle.labels == SYNTHETIC_LABELS
    assert (bundle.input_h, bundle.input_w) == (256, 384)
    size = sum(f.stat().st_size for f in BUNDLE.iterdir())
    assert size <= 25e6


def test_variants_derive_as_recorded():
    """The shipped recipes give the graphs that were evaluated (models/README.md): the fp16 and
    the TensorRT int8 encoder are derived here and their sha256 checked (about 2 s)."""
    bundle = ModelBundle.load(BUNDLE)
    assert bundle.precisions == ("fp32", "fp16", "int8")
    for precision in ("fp16", "int8"):
        graph = bundle.stage_graph("encoder", precision)
        assert graph.precision == precision and len(graph.model_bytes) > 1e6
        assert len(bundle.golden_cases(precision)) == 3


def test_accuracy_floor_on_held_out_scenes(tmp_path):
    generate(tmp_path, 12, seed=1, height=256, width=384, progress=False)
    result = evaluate_bundle(BUNDLE, tmp_path, progress=False)
    assert result["images"] == 12
    assert result["mask_ap"]["AP"] >= FLOOR_AP, result["mask_ap"]
    assert result["panoptic"]["all"]["PQ"] >= FLOOR_PQ, result["panoptic"]["all"]
