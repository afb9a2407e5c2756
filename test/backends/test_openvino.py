"""OpenVinoBackend on the default bundle: it agrees with ONNX Runtime in FP32, runs the TensorRT
INT8 graph on OpenVINO's kernels within the acceptance tolerances under every ISA the CPU has,
batches, and refuses what it cannot run or what fails the acceptance check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino
import pytest

from compactinst_ros.backends import BackendOptions, acceptance, create_backend
from compactinst_ros.backends.openvino import (
    ISA_VARIABLE,
    ONEDNN_ISAS,
    OpenVinoBackend,
    host_isas,
)
from compactinst_ros.backends.ort import OrtBackend
from compactinst_ros.bundle import (
    DECODER_OUTPUTS,
    METADATA_FILE,
    GoldenCase,
    ModelBundle,
    default_bundle_path,
    read_golden,
    typed_graph_path,
    write_golden,
)
from compactinst_ros.errors import BackendError
from compactinst_ros.pipeline import Pipeline


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return ModelBundle.load(default_bundle_path())


@pytest.fixture(scope="module")
def int8(bundle: ModelBundle) -> OpenVinoBackend:
    return OpenVinoBackend(bundle, BackendOptions(threads=1, precision="int8"))


def _decoder(backend: OrtBackend, image: np.ndarray) -> dict[str, np.ndarray]:
    raw = backend.run_decoder(backend.run_encoder(image))[0]
    return {DECODER_OUTPUTS[0]: raw.class_logits[None], DECODER_OUTPUTS[1]: raw.mask_logits[None]}


def test_fp32_agrees_with_onnxruntime(bundle: ModelBundle) -> None:
    image = bundle.golden_cases("fp32")[1].image
    ours = OpenVinoBackend(bundle, BackendOptions(threads=1))
    theirs = OrtBackend(bundle, BackendOptions(threads=1))
    want = _decoder(theirs, image)
    got = acceptance.matched(want, _decoder(ours, image))  # near-tied proposals may swap
    for name in DECODER_OUTPUTS:
        span = float(np.ptp(want[name]))
        assert np.abs(got[name] - want[name]).max() < 1e-4 * span, name
    assert ours.describe() == {
        "backend": "openvino", "openvino_version": openvino.get_version(), "threads": 1,
        "device": "cpu", "precision": "fp32",
    }  # fmt: skip


def test_int8_runs_the_tensorrt_graph_within_the_tolerances(
    int8: OpenVinoBackend, bundle: ModelBundle
) -> None:
    assert int8.describe()["int8_graph"] == "tensorrt"
    tol = acceptance.TOLERANCES["int8"]
    for case in bundle.golden_cases("int8"):
        got = _decoder(int8, case.image)
        # not the as-written arithmetic: these are OpenVINO's own INT8 kernels
        assert np.abs(got["pred_masks"] - case.outputs["pred_masks"]).max() > 1e-3
        findings = acceptance.compare(case.outputs, got, tol, 0)
        assert all(f.passed for f in findings), findings


#: run in a fresh process: oneDNN reads its ISA cap once, when the plugin loads
OPEN_INT8 = """
import sys
from compactinst_ros.backends import BackendOptions
from compactinst_ros.backends.openvino import OpenVinoBackend
from compactinst_ros.bundle import ModelBundle
backend = OpenVinoBackend(ModelBundle.load(sys.argv[1]),
                          BackendOptions(threads=1, precision="int8"))
print(backend.describe()["precision"])
"""


@pytest.fixture(scope="module")
def int8_derived(int8: OpenVinoBackend, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the default bundle holding the INT8 TensorRT graphs that ``int8`` derived, so a
    fresh process loads them (checked against their recorded sha256) instead of deriving them
    again (a few seconds per stage on 2 cores)."""
    root = Path(shutil.copytree(default_bundle_path(), tmp_path_factory.mktemp("ov") / "bundle"))
    for stage in ("encoder", "decoder"):
        graph = int8.bundle.stage_graph(stage, "int8", "tensorrt")
        path = typed_graph_path(root, graph.sha256)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(graph.model_bytes)
    return root


@pytest.mark.parametrize("isa", list(ONEDNN_ISAS))
def test_int8_passes_the_acceptance_check_under_each_isa_the_cpu_has(
    isa: str, int8_derived: Path
) -> None:
    """Each ISA has its own INT8 kernels (16-bit sums before VNNI, 32-bit with it, AMX tiles):
    the acceptance check must hold on every one, not on the one that calibrated it."""
    if isa not in host_isas():
        pytest.skip(f"this CPU lacks {isa}")
    env = {**os.environ, ISA_VARIABLE: isa}
    done = subprocess.run([sys.executable, "-c", OPEN_INT8, str(int8_derived)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "int8"


def test_int8_pipeline_and_its_threads(bundle: ModelBundle) -> None:
    with Pipeline(bundle, "openvino", precision="int8", threads=1) as pipe:
        stage = pipe.backend._encoder
        compiled = stage._request(1).get_compiled_model()
        assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1
        assert compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
        image = np.random.default_rng(2).integers(0, 256, (360, 640, 3), np.uint8)
        result = pipe(image, "bgr8")
        assert result.instance_raster.shape == (360, 640)
        assert pipe.describe()["precision"] == "int8"


def test_a_batch_equals_its_frames_one_by_one(int8: OpenVinoBackend, bundle: ModelBundle) -> None:
    images = [c.image for c in bundle.golden_cases("int8")[:2]]
    features = int8.run_encoder(np.concatenate(images))
    batched = int8.run_decoder(features)
    assert sorted(int8._decoder._requests) == [1, 2]  # one static model per batch size
    for image, raw in zip(images, batched, strict=True):
        alone = int8.run_decoder(int8.run_encoder(image))[0]
        assert np.allclose(raw.mask_logits, alone.mask_logits, atol=1e-4)
        assert np.allclose(raw.class_logits, alone.class_logits, atol=1e-4)


def test_create_backend_by_name(bundle: ModelBundle) -> None:
    backend = create_backend("openvino", bundle, threads=1)
    assert isinstance(backend, OpenVinoBackend) and backend.precision == "fp32"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (BackendOptions(precision="fp16"), "runs fp32 or int8, not fp16"),
        (BackendOptions(providers=("CUDAExecutionProvider",)), "providers are ONNX Runtime's"),
        (BackendOptions(threads=0), "threads=0 must be >= 1"),
    ],
)
def test_refuses_what_it_cannot_run(bundle: ModelBundle, options, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        OpenVinoBackend(bundle, options)


@pytest.mark.parametrize(
    ("settings", "remedy"),
    [("cli", r"--precision fp32.*--backend onnxruntime"),
     ("node", r"precision:=fp32.*backend:=onnxruntime")],
)  # fmt: skip
def test_a_model_that_fails_the_acceptance_check_is_refused(
    tmp_path: Path, settings: str, remedy: str
) -> None:
    """Golden outputs that the model cannot reproduce (its masks negated) stop the backend, with
    the stage, the worst tensor and the way out named in the opener's syntax (a command's
    options, the node's parameters)."""
    root = Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))
    meta = json.loads((root / METADATA_FILE).read_text())
    meta.pop("variants")
    (root / METADATA_FILE).write_text(json.dumps(meta))
    cases = [
        GoldenCase(c.image, {**c.outputs, "pred_masks": -c.outputs["pred_masks"]})
        for c in read_golden(default_bundle_path(), "fp32")
    ]
    write_golden(root, {"fp32": cases})
    message = (r"fp32 OpenVINO model of stage 'decoder'.*worst tensor 'pred_logits x pred_masks'"
               r".*" + remedy)  # fmt: skip
    with pytest.raises(BackendError, match=message):
        OpenVinoBackend(ModelBundle.load(root), BackendOptions(threads=1, settings=settings))
