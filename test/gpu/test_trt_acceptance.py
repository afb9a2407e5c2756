"""The acceptance check after every engine build, both ways, on the TensorRT stand-in: engines that
reproduce the golden outputs (ONNX Runtime on the fp32 graphs, written with ``write_golden``) are
cached; an engine the stand-in's ``perturb`` knob makes wrong is refused with its stage and worst
tensor named, is not cached, and the backend does not start on it. The metrics themselves are
checked on small arrays."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import tensorrt_emu

from compactinst_ros.backends import acceptance
from compactinst_ros.backends.engine_cache import EngineCache
from compactinst_ros.backends.ort import OrtBackend
from compactinst_ros.backends.trt_build import device_info, ensure_engines
from compactinst_ros.bundle import (
    METADATA_FILE,
    GoldenCase,
    ModelBundle,
    default_bundle_path,
    write_golden,
)
from compactinst_ros.errors import BackendError
from compactinst_ros.pipeline import Pipeline

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture(scope="module")
def golden_bundle(tmp_path_factory) -> ModelBundle:
    """A copy of the default bundle with its fp32 graphs only (engines build in fp32) and one
    golden case: a random image and their ONNX Runtime outputs, the encoder's features included."""
    root = tmp_path_factory.mktemp("golden") / "bundle"
    shutil.copytree(default_bundle_path(), root)
    meta = json.loads((root / METADATA_FILE).read_text())
    meta.pop("variants", None)
    (root / METADATA_FILE).write_text(json.dumps(meta))
    bundle = ModelBundle.load(root)
    image = np.random.default_rng(0).uniform(0, 255, (1, 3, bundle.input_h, bundle.input_w))
    image = image.astype(np.float32)
    backend = OrtBackend(bundle)
    try:
        features = backend.run_encoder(image)
        raw = backend.run_decoder(features)[0]
    finally:
        backend.close()
    names = [t.name for t in bundle.stages[0].outputs]
    outputs = dict(zip(names, features, strict=True))
    outputs.update(pred_logits=raw.class_logits[None], pred_masks=raw.mask_logits[None])
    write_golden(root, {"fp32": [GoldenCase(image, outputs)]})
    return bundle


def build_all(bundle: ModelBundle, cache: EngineCache, batch: int = 1) -> dict:
    trt = sys.modules["tensorrt"]
    runtime = trt.Runtime(trt.Logger())
    return ensure_engines(
        bundle, cache, runtime.deserialize_cuda_engine, device_info(0), batch=batch
    )


def test_engines_that_match_the_golden_outputs_are_cached(
    emulated_gpu, golden_bundle, tmp_path
) -> None:
    cache = EngineCache(tmp_path / "engines")
    assert set(build_all(golden_bundle, cache)) == {"encoder", "decoder"}
    assert len(list(cache.root.glob("*.engine"))) == 2


@pytest.mark.parametrize(
    ("tensor", "change", "stage", "named"),
    [
        ("pred_masks", lambda a: -a, "decoder", acceptance.DECISIONS),
        ("pred_logits", lambda a: a[..., ::-1].copy(), "decoder", acceptance.DECISIONS),
        ("e3", lambda a: a * 1.5, "encoder", "e3"),
    ],
    ids=["masks", "logits", "features"],
)
def test_a_perturbed_engine_is_refused_named_and_not_cached(
    emulated_gpu, golden_bundle, tmp_path, monkeypatch, tensor, change, stage, named
) -> None:
    """Nothing stays cached: a failing decoder also takes the encoder built with it. The
    decoder outputs are judged together, by the decisions they make."""
    monkeypatch.setitem(tensorrt_emu.perturb, tensor, change)
    cache = EngineCache(tmp_path / "engines")
    message = rf"stage '{stage}'.*worst tensor '{named}'.*not cached"
    with pytest.raises(BackendError, match=message):
        build_all(golden_bundle, cache)
    assert list(cache.root.glob("*.engine")) == []


def test_batch_3_engines_are_checked_slot_by_slot(
    emulated_gpu, golden_bundle, tmp_path, monkeypatch
) -> None:
    """The golden case fills all 3 slots and passes; an engine wrong in slot 2 only (batch 1
    is unaffected) is refused with the batch size and the slot named."""
    cache = EngineCache(tmp_path / "engines")
    assert set(build_all(golden_bundle, cache, batch=3)) == {"encoder", "decoder"}
    assert tensorrt_emu.last_inputs["e3"].shape[0] == 3  # the decoder ran at batch 3

    def slot_2_wrong(masks: np.ndarray) -> np.ndarray:
        if len(masks) == 3:
            masks = masks.copy()
            masks[2] = -masks[2]
        return masks

    monkeypatch.setitem(tensorrt_emu.perturb, "pred_masks", slot_2_wrong)
    other = EngineCache(tmp_path / "other")
    build_all(golden_bundle, other)  # batch 1 passes
    message = (r"stage 'decoder' at batch 3 .*worst tensor 'pred_logits x pred_masks'.*golden "
               r"case 0 in slot 2")  # fmt: skip
    with pytest.raises(BackendError, match=message):
        build_all(golden_bundle, other, batch=3)
    assert len(list(other.root.glob("*.engine"))) == 2  # the batch-1 pair only


def test_slot_cases_cycle_the_cases_through_every_slot() -> None:
    assert acceptance.slot_cases(2, 3) == [[0, 1, 0]]
    assert acceptance.slot_cases(3, 2) == [[0, 1], [2, 0]]
    assert acceptance.slot_cases(0, 3) == []


@pytest.mark.parametrize(
    ("settings", "remedy"), [("cli", "--precision fp32"), ("node", "precision:=fp32")]
)
def test_the_backend_refuses_an_engine_that_fails(
    emulated_gpu, golden_bundle, monkeypatch, settings, remedy
) -> None:
    """The remedy is written as the backend's opener takes settings: a command, or the node."""
    monkeypatch.setitem(tensorrt_emu.perturb, "pred_masks", lambda a: a - 3.0)
    with pytest.raises(BackendError, match=rf"fails the acceptance check.*\({remedy}\)"):
        Pipeline(golden_bundle, backend="tensorrt", settings=settings)


def test_mask_ious_are_per_query_at_logit_zero_over_masks_that_count() -> None:
    want = np.full((1, 3, 8, 8), -1.0, np.float32)
    want[0, 0, :4] = 1.0  # 32 texels
    want[0, 1, 0, :2] = 1.0  # 2 texels: below MIN_MASK_TEXELS, not counted
    got = want.copy()
    assert acceptance.mask_ious(want, got).tolist() == [1.0]
    got[0, 0, :2] = -0.01  # half of query 0 just below 0
    got[0, 1] = -1.0
    assert acceptance.mask_ious(want, got).tolist() == pytest.approx([0.5])


def test_reordered_queries_fail_the_decisions_and_name_the_worst() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 4, 3)).astype(np.float32) * 4
    masks = rng.normal(size=(1, 4, 6, 6)).astype(np.float32) * 4
    want = {"pred_logits": logits, "pred_masks": masks}
    tol = acceptance.TOLERANCES["fp16"]
    assert all(f.passed for f in acceptance.compare(want, dict(want), tol, 0))
    swapped = {"pred_logits": logits[:, ::-1].copy(), "pred_masks": masks}
    failed = {f.metric for f in acceptance.compare(want, swapped, tol, 0) if not f.passed}
    assert any("class probability" in m for m in failed), failed
    case = GoldenCase(np.zeros((1, 3, 2, 2), np.float32), want)
    with pytest.raises(BackendError, match=r"stage 'decoder'.*'pred_logits x pred_masks'.*case 0"):
        acceptance.check("decoder", "fp16", [case], [swapped])
    with pytest.raises(BackendError, match="non-finite values"):
        acceptance.check("decoder", "fp16", [case], [{**want, "pred_masks": masks * np.inf}])
    with pytest.raises(BackendError, match="re-export the bundle"):
        acceptance.compare(want, {"pred_logits": logits[:, :2]}, tol, 0)
