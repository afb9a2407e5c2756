"""OrtBackend on the session's random bundle: stage chaining, timings, describe, load errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from ort_stages import raw_outputs

from compactinst_ros.backends import BackendOptions, create_backend
from compactinst_ros.backends.ort import OrtBackend
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.errors import BackendError, ConfigError
from compactinst_ros.postprocess.reference import postprocess
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import (
    BatchItem,
    FrameMeta,
    OutputSet,
    PostprocessOptions,
    RawOutputs,
)


@pytest.fixture(scope="module")
def backend(random_bundle: Path) -> OrtBackend:
    return OrtBackend(ModelBundle.load(random_bundle), BackendOptions(threads=1))


def _frame(h: int = 200, w: int = 240) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_describe_names_runtime_and_device(backend: OrtBackend) -> None:
    info = backend.describe()
    assert info["backend"] == "onnxruntime" == backend.name
    assert info["onnxruntime_version"] == onnxruntime.__version__
    assert info["providers"] == ["CPUExecutionProvider"] and info["device"] == "cpu"
    assert info["threads"] == 1


def test_infer_chains_stages_and_times_them(backend: OrtBackend) -> None:
    image = _frame()
    meta = FrameMeta.letterbox(200, 240, backend.bundle.input_h, backend.bundle.input_w)
    options = PostprocessOptions(score_threshold=0.0)
    result = backend.infer_batch([BatchItem(image, "rgb8", meta, OutputSet())], options)[0]
    assert set(result.timings_ms) >= {"preprocess", "encoder", "decoder", "postprocess"}
    assert all(v > 0 for v in result.timings_ms.values())
    assert result.instance_raster.shape == (200, 240)
    assert len(result.instances) > 0  # threshold 0 keeps the best candidates of random weights


def test_matches_hand_chained_stages(backend: OrtBackend, random_bundle: Path) -> None:
    """The backend equals letterbox -> encoder.onnx -> decoder.onnx (by name) -> postprocess."""
    image = _frame()
    bundle = backend.bundle
    meta = FrameMeta.letterbox(200, 240, bundle.input_h, bundle.input_w)
    options = PostprocessOptions(score_threshold=0.0)
    x = letterbox(image, "rgb8", meta, bundle.pad_value)
    enc = onnxruntime.InferenceSession(str(random_bundle / "encoder.onnx"))
    dec = onnxruntime.InferenceSession(str(random_bundle / "decoder.onnx"))
    names = [o.name for o in enc.get_outputs()]
    feats = dict(zip(names, enc.run(None, {"image": x}), strict=True))
    logits, masks = dec.run(["pred_logits", "pred_masks"], feats)
    raw = RawOutputs(logits[0], masks[0], bundle.mask_stride)
    expected = postprocess(raw, meta, bundle.labels, options, OutputSet())
    result = backend.infer_batch([BatchItem(image, "rgb8", meta, OutputSet())], options)[0]
    np.testing.assert_array_equal(result.instance_raster, expected.instance_raster)
    np.testing.assert_allclose(result.instances.score, expected.instances.score, rtol=1e-4)


def test_create_backend_by_name(random_bundle: Path) -> None:
    bundle = ModelBundle.load(random_bundle)
    backend = create_backend("onnxruntime", bundle, BackendOptions(threads=1))
    assert isinstance(backend, OrtBackend) and backend.describe()["threads"] == 1
    backend.close()


def test_option_fields_can_be_given_by_name(random_bundle: Path) -> None:
    """Keyword overrides replace BackendOptions fields; an unknown one names the known ones."""
    bundle = ModelBundle.load(random_bundle)
    backend = create_backend("onnxruntime", bundle, BackendOptions(threads=2), threads=1)
    assert backend.describe()["threads"] == 1
    backend.close()
    with pytest.raises(ConfigError, match=r"unknown backend options \['thread'\]; known: \["):
        create_backend("onnxruntime", bundle, thread=1)


def test_corrupt_onnx_is_a_backend_error(random_bundle: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(random_bundle, tmp_path / "b"))
    (root / "decoder.onnx").write_bytes(b"garbage")
    with pytest.raises(BackendError, match=r"cannot load .*decoder\.onnx.*re-export"):
        OrtBackend(ModelBundle.load(root, verify_hashes=False))


def test_mixed_stage_files_are_refused(random_bundle: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(random_bundle, tmp_path / "b"))
    shutil.copy(root / "encoder.onnx", root / "decoder.onnx")
    with pytest.raises(BackendError, match="different exports"):
        OrtBackend(ModelBundle.load(root, verify_hashes=False))


def test_bad_thread_count(random_bundle: Path) -> None:
    with pytest.raises(BackendError, match="threads=0"):
        OrtBackend(ModelBundle.load(random_bundle), BackendOptions(threads=0))


def test_raw_outputs_follow_the_bundle(backend: OrtBackend) -> None:
    bundle = backend.bundle
    meta = FrameMeta.letterbox(200, 240, bundle.input_h, bundle.input_w)
    raw = raw_outputs(backend, _frame(), "rgb8", meta)
    logits_spec, masks_spec = bundle.stage("decoder").outputs
    assert raw.class_logits.shape == logits_spec.shape[1:]
    assert raw.mask_logits.shape == masks_spec.shape[1:]
    assert raw.mask_stride == 8 and raw.class_logits.dtype == np.float32


def test_missing_onnxruntime_is_a_backend_error(random_bundle: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an absent package looks like
    with pytest.raises(BackendError, match="onnxruntime is not installed"):
        OrtBackend(ModelBundle.load(random_bundle))


def test_closed_backend_says_so(random_bundle: Path) -> None:
    backend = OrtBackend(ModelBundle.load(random_bundle), BackendOptions(threads=1))
    backend.close()
    meta = FrameMeta.letterbox(200, 240, backend.bundle.input_h, backend.bundle.input_w)
    with pytest.raises(BackendError, match="closed"):
        raw_outputs(backend, _frame(), "rgb8", meta)


def test_sessions_log_errors_only(capfd: pytest.CaptureFixture) -> None:
    """The FP16 decoder makes ONNX Runtime's optimiser warn that it cannot fold a Pow on the
    CPU, once per session; our sessions keep its log to errors so no command prints that."""
    from compactinst_ros.backends.ort import create_session

    graph = ModelBundle.load(default_bundle_path()).stage_graph("decoder", "fp16")
    capfd.readouterr()
    create_session(graph.model_bytes)
    assert "W:onnxruntime" not in capfd.readouterr().err


def test_session_pools_spin_only_while_a_run_lasts(random_bundle: Path) -> None:
    """Pool threads spin between a run's operators and stop when it returns: spinning on after
    it took the cores the next stage, post-processing and ROS callbacks need."""
    from compactinst_ros.backends.ort import create_session

    session = create_session(ModelBundle.load(random_bundle).stage("encoder").path, 2)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
