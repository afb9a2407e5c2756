"""Stage-split ONNX export: bundle metadata, ORT-vs-PyTorch parity, checkpoints, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from compactinst_ros.bundle import ModelBundle, sha256_file  # noqa: E402
from compactinst_ros.cli import main  # noqa: E402
from compactinst_ros.errors import ConfigError  # noqa: E402
from compactinst_ros.export.onnx_export import (  # noqa: E402
    build_for_export,
    export_bundle,
    random_image,
    resolve_labels,
)
from compactinst_ros.export.parity import (  # noqa: E402
    check_parity,
    parity_image,
    relative_error,
)
from compactinst_ros.labels import CITYSCAPES_INSTANCE_LABELS, SYNTHETIC_LABELS  # noqa: E402
from compactinst_ros.pipeline import Pipeline  # noqa: E402


def _assert_parity(results) -> None:
    failed = [str(r) for r in results if not r.ok]
    assert not failed, "\n".join(str(r) for r in results)
    assert {r.check for r in results} == {"stability", "encoder", "decoder", "chain"}


def test_demo_bundle_metadata(random_export) -> None:
    model, bundle = random_export
    meta = json.loads((bundle.root / "bundle.json").read_text())
    assert meta["opset"] == 17 and meta["format"] == 1
    assert (meta["input"]["height"], meta["input"]["width"]) == (256, 320)
    assert meta["architecture"]["name"] == "compactinst_demo"
    assert meta["architecture"]["mask_stride"] == 8
    assert meta["source"]["checkpoint_sha256"] == "random-init" and meta["source"]["seed"] == 0
    assert [s["name"] for s in meta["stages"]] == ["encoder", "decoder"]
    enc, dec = bundle.stage("encoder"), bundle.stage("decoder")
    assert [(t.name, t.shape, t.dtype) for t in enc.inputs] == [
        ("image", (1, 3, 256, 320), "float32")
    ]
    assert [t.name for t in enc.outputs] == list(model.encoder_outputs)
    assert [t.name for t in dec.inputs] == list(model.encoder_outputs)
    e3 = next(t for t in enc.outputs if t.name == "e3")
    assert e3.shape[2:] == (32, 40) and e3.dtype == "float32"
    logits, masks = dec.outputs
    assert logits.shape == (1, model.cfg.num_queries, SYNTHETIC_LABELS.num_classes + 1)
    assert masks.shape == (1, model.cfg.num_queries, 32, 40)
    assert enc.sha256 == sha256_file(enc.path) and dec.sha256 == sha256_file(dec.path)
    assert bundle.labels == SYNTHETIC_LABELS


def test_demo_parity_on_input_unlike_trace(random_export) -> None:
    model, bundle = random_export
    test_image = parity_image(256, 320, bundle.pad_value)
    assert not np.allclose(test_image, random_image(256, 320, 0).numpy())
    _assert_parity(check_parity(model, bundle, test_image))


def test_parity_catches_other_weights(random_export) -> None:
    _, bundle = random_export
    other, _, _ = build_for_export("compactinst_demo", None, None, seed=1)
    results = check_parity(other, bundle)
    assert not all(r.ok for r in results)


@pytest.mark.parametrize(
    "config",
    [
        # ~17 s of CPU; make test checks the ResNet-18 family's export parity in
        # test_export_friendly (pf32, m4) and export_bundle's pipeline in the checkpoint export
        pytest.param("compactinst_r18", marks=pytest.mark.full),
        # the baseline's export serves the benchmarks alone: make test-full (~11 s)
        pytest.param("fastinst_r18_d3", marks=pytest.mark.full),
        # ~14 s; make test checks m4's export parity in test_export_friendly (make test-full: both)
        pytest.param("compactinst_r18_m4", marks=[pytest.mark.slow, pytest.mark.full]),
    ],
)
def test_paper_config_parity(config, tmp_path) -> None:
    model, labels, source = build_for_export(config, CITYSCAPES_INSTANCE_LABELS, None, seed=0)
    bundle = export_bundle(model, config, (128, 224), labels, tmp_path, source, progress=print)
    assert bundle.architecture["pool_factor"] == (2 if config.startswith("compact") else 1)
    assert [t.name for t in bundle.stage("decoder").inputs] == list(model.encoder_outputs)
    _assert_parity(check_parity(model, bundle))
    with Pipeline(bundle, backend="onnxruntime", threads=1) as pipeline:
        result = pipeline(np.zeros((90, 200, 3), np.uint8), "rgb8")
    assert result.instance_raster.shape == (90, 200)
    assert pipeline.bundle.mask_stride == (4 if config.endswith("m4") else 8)


def test_relative_error_definition() -> None:
    ref = np.array([1.0, -4.0, 2.0])
    rel, max_abs, max_ref = relative_error(ref + np.array([0.0, 0.0, 0.002]), ref)
    assert (max_abs, max_ref) == pytest.approx((0.002, 4.0))
    assert rel == pytest.approx(5e-4)
    assert relative_error(np.zeros(3), np.zeros(3))[0] == 0.0
    assert relative_error(np.ones(3), np.zeros(3))[0] == float("inf")
    with pytest.raises(ValueError, match="shape mismatch"):
        relative_error(np.zeros(2), np.zeros(3))


def test_unstable_rows_are_explained_and_the_verdict_is_said() -> None:
    from compactinst_ros.export.parity import UNSTABLE_NOTE, ParityResult, verdict_lines

    ok = ParityResult("decoder", "pred_masks", 1e-6, 10.0, 1e-7, 1e-4)
    unstable = ParityResult("stability", "pred_masks", 0.1, 10.0, 1e-2, 1e-4, gating=False)
    assert verdict_lines([ok]) == [
        "parity ok: the bundle computes what the PyTorch model does; use it"
    ]
    assert str(unstable).endswith("unstable (info)")
    lines = verdict_lines([ok, unstable])
    assert lines[0] == UNSTABLE_NOTE and "not an export error" in lines[0]
    assert lines[1].startswith("parity ok")
    failed = ParityResult("encoder", "e3", 0.1, 10.0, 1e-2, 1e-4)
    assert verdict_lines([failed])[-1] == "parity FAILED (encoder e3): do not use this bundle"


def test_checkpoint_export_cli_with_check(tmp_path, capsys) -> None:
    labels = CITYSCAPES_INSTANCE_LABELS
    other, _, _ = build_for_export("compactinst_demo", labels, None, seed=3)
    ckpt = tmp_path / "demo.pt"
    torch.save(
        {"config": "compactinst_demo", "model": other.state_dict(), "labels": labels.to_json()},
        ckpt,
    )
    out = tmp_path / "bundle"
    code = main(
        [
            "export",
            "compactinst_demo",
            "--size",
            "128x128",
            "--checkpoint",
            str(ckpt),
            "--out",
            str(out),
            "--check",
        ]
    )
    captured = capsys.readouterr()
    printed = captured.out
    assert code == 0, printed + captured.err
    assert "[4/4]" in printed and "chain" in printed and "FAIL" not in printed
    assert "parity ok: the bundle computes what the PyTorch model does; use it" in printed
    bundle = ModelBundle.load(out, verify_hashes=True)
    assert bundle.source["checkpoint_sha256"] == sha256_file(ckpt)
    assert bundle.labels == labels  # taken from the checkpoint
    assert (bundle.input_h, bundle.input_w) == (128, 128)


def test_checkpoint_for_other_config_is_refused(tmp_path) -> None:
    ckpt = tmp_path / "x.pt"
    torch.save({"config": "compactinst_r18", "model": {}, "labels": []}, ckpt)
    with pytest.raises(ConfigError, match="compactinst_r18"):
        build_for_export("compactinst_demo", None, ckpt, seed=0)


def test_checkpoint_that_does_not_fit_is_refused(tmp_path) -> None:
    ckpt = tmp_path / "x.pt"
    torch.save({"config": "compactinst_demo", "model": {"bogus": torch.zeros(1)}}, ckpt)
    with pytest.raises(ConfigError, match="does not fit"):
        build_for_export("compactinst_demo", None, ckpt, seed=0)


def test_bad_checkpoint_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        build_for_export("compactinst_demo", None, tmp_path / "none.pt", seed=0)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="weights_only"):
        build_for_export("compactinst_demo", None, junk, seed=0)
    plain = tmp_path / "plain.pt"
    torch.save({"weight": torch.zeros(1)}, plain)
    with pytest.raises(ConfigError, match="'config', 'model'"):
        build_for_export("compactinst_demo", None, plain, seed=0)


def test_unknown_config_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="compactinst_demo"):
        build_for_export("compactinst_r9000", None, None, seed=0)


def test_labels_by_name_and_file(tmp_path) -> None:
    assert resolve_labels("cityscapes") == CITYSCAPES_INSTANCE_LABELS
    assert resolve_labels("coco").num_classes == 80
    assert resolve_labels(None) is None
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"labels": [{"id": 3, "name": "cow", "isthing": True}]}))
    assert resolve_labels(str(path)).names == ("cow",)
    with pytest.raises(ConfigError, match="neither"):
        resolve_labels("imagenet")
    path.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        resolve_labels(str(path))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("512", "HxW"),
        ("axb", "HxW"),
        ("0x64", "positive"),
        ("500x1024", "multiple of 32"),
    ],
)
def test_bad_sizes(text, problem, tmp_path, capsys) -> None:
    out = tmp_path / "bundle"
    assert main(["export", "compactinst_demo", "--size", text, "--out", str(out)]) == 2
    assert problem in capsys.readouterr().err
    assert not out.exists()
