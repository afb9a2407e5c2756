"""The TensorRT backend and builder import lazily: the CPU path never needs tensorrt/pycuda, and
using them where they are missing fails with a BackendError that names the fix."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compactinst_ros.backends import BackendOptions, create_backend, resolve_backend_name
from compactinst_ros.bundle import ModelBundle
from compactinst_ros.cli import main as cli_main
from compactinst_ros.errors import BackendError
from compactinst_ros.labels import SYNTHETIC_LABELS

HAVE_TRT = importlib.util.find_spec("tensorrt") is not None
HAVE_PYCUDA = importlib.util.find_spec("pycuda") is not None


def tiny_bundle(root: Path) -> Path:
    """A schema-valid bundle folder with placeholder stage files (never parsed here)."""
    root.mkdir()
    k1 = SYNTHETIC_LABELS.num_classes + 1
    stages = []
    for name, inputs, outputs in (
        ("encoder", [("image", [1, 3, 64, 128])], [("e3", [1, 32, 8, 16]), ("e4", [1, 32, 4, 8])]),
        (
            "decoder",
            [("e3", [1, 32, 8, 16]), ("e4", [1, 32, 4, 8])],
            [("pred_logits", [1, 10, k1]), ("pred_masks", [1, 10, 8, 16])],
        ),
    ):
        (root / f"{name}.onnx").write_bytes(b"placeholder")
        stages.append(
            {
                "name": name,
                "file": f"{name}.onnx",
                "sha256": "",
                "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in inputs],
                "outputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in outputs],
            }
        )
    meta = {
        "format": 1,
        "architecture": {"name": "tiny", "mask_stride": 8},
        "input": {"height": 64, "width": 128, "pad_value": [123.675, 116.28, 103.53]},
        "labels": SYNTHETIC_LABELS.to_json(),
        "stages": stages,
    }
    (root / "bundle.json").write_text(json.dumps(meta))
    return root


#: What the TensorRT backend imports, up front or when it sets up its GPU thread.
GPU_RUNTIME = (
    "compactinst_ros.backends.trt",
    "compactinst_ros.backends.trt_build",
    "compactinst_ros.backends.engine_cache",
    "compactinst_ros.gpu.constants",
    "compactinst_ros.gpu.launch",
    "compactinst_ros.gpu.loader",
    "compactinst_ros.gpu.images",
    "compactinst_ros.gpu.preprocess",
    "compactinst_ros.gpu.postprocess",
    "compactinst_ros.gpu.overlay",
    "compactinst_ros.palette",
)


def loaded_after_importing(modules: tuple[str, ...], watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has in sys.modules after importing ``modules``."""
    code = (
        "import importlib, sys\n"
        f"for m in {list(modules)!r}:\n"
        "    importlib.import_module(m)\n"
        f"print([m for m in {list(watched)!r} if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


def test_modules_import_without_tensorrt_or_pycuda() -> None:
    assert loaded_after_importing(GPU_RUNTIME, ("tensorrt", "pycuda", "torch")) == []


def test_gpu_runtime_holds_no_twin_and_no_opencv() -> None:
    """The numpy twin and the check frames are test material, and the TensorRT path needs no
    OpenCV: none of them is loaded by the backend and the launchers."""
    watched = ("compactinst_ros.gpu.twin", "compactinst_ros.gpu.frames", "cv2")
    assert loaded_after_importing(GPU_RUNTIME, watched) == []
    # the check can fail: the twin itself brings cv2 (through overlay.outline_mask)
    twin_loads = loaded_after_importing(("compactinst_ros.gpu.twin",), watched)
    assert twin_loads == ["compactinst_ros.gpu.twin", "cv2"]


@pytest.mark.skipif(HAVE_TRT, reason="TensorRT is installed here")
def test_constructing_without_tensorrt_names_the_fix(tmp_path: Path) -> None:
    from compactinst_ros.backends.trt import TensorRTBackend

    bundle = ModelBundle.load(tiny_bundle(tmp_path / "b"))
    with pytest.raises(BackendError, match="TensorRT Python bindings are not importable"):
        TensorRTBackend(bundle, BackendOptions(engine_cache_dir=tmp_path / "cache"))
    # the CPU alternative in the syntax of whoever opened the backend: a command or the node
    with pytest.raises(BackendError, match="on the CPU with --backend onnxruntime"):
        create_backend("tensorrt", bundle)
    with pytest.raises(BackendError, match="on the CPU with backend:=onnxruntime"):
        create_backend("tensorrt", bundle, BackendOptions(settings="node"))
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(HAVE_TRT and HAVE_PYCUDA, reason="TensorRT and pycuda are installed here")
def test_auto_falls_back_to_onnxruntime() -> None:
    assert resolve_backend_name("auto") == "onnxruntime"


@pytest.mark.skipif(HAVE_TRT, reason="TensorRT is installed here")
def test_build_engine_cli_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bundle = tiny_bundle(tmp_path / "b")
    code = cli_main(["build-engine", str(bundle), "--cache-dir", str(tmp_path / "c")])
    assert code == 1
    err = capsys.readouterr().err
    assert "TensorRT Python bindings are not importable" in err
    assert "onnxruntime" not in err  # build-engine has no use for the CPU backend
    # building engines needs TensorRT: no CPU backend to suggest, and the Jetson's bindings are
    # the system Python's (apt), not a venv's
    assert "onnxruntime" not in err and "system python3" in err and "venv" not in err


def test_build_engine_cli_help(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["build-engine", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--cache-dir" in out and "--force" in out


@pytest.mark.parametrize("queries", [0, 257])
def test_gpu_postprocessor_refuses_unsupported_models(queries: int) -> None:
    """Capacity limits fail with the limit and the way out, before touching CUDA."""
    from compactinst_ros.gpu.postprocess import GpuPostprocessor

    with pytest.raises(BackendError, match="supports 1 to 256 queries"):
        GpuPostprocessor(SYNTHETIC_LABELS, queries, 16, 32, 8)


@pytest.mark.parametrize(
    ("importable", "chosen"),
    [
        ({"tensorrt", "pycuda.driver", "tensorrt_rtx"}, "tensorrt"),
        ({"tensorrt_rtx", "pycuda.driver"}, "tensorrt_rtx"),
        ({"tensorrt_rtx_bindings", "pycuda.driver"}, "tensorrt_rtx"),
        ({"tensorrt", "tensorrt_rtx"}, "onnxruntime"),  # no pycuda: no GPU backend
        (set(), "onnxruntime"),
    ],
)
def test_auto_prefers_tensorrt_then_tensorrt_for_rtx_then_the_cpu(
    importable: set[str], chosen: str
) -> None:
    assert resolve_backend_name("auto", imports=importable.__contains__) == chosen


@pytest.mark.skipif(HAVE_PYCUDA, reason="pycuda is installed here")
def test_tensorrt_rtx_without_pycuda_names_the_fix(tmp_path: Path) -> None:
    """TensorRT for RTX imports here (the dev extra), pycuda does not: the backend says so."""
    bundle = ModelBundle.load(tiny_bundle(tmp_path / "b"))
    with pytest.raises(BackendError, match=r"pycuda is not importable.*pip install pycuda"):
        create_backend("tensorrt_rtx", bundle, engine_cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
