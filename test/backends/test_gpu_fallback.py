"""backend auto on an NVIDIA machine without TensorRT/pycuda: the reason names what is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from compactinst_ros.backends import NVIDIA_GPU_MARKERS, gpu_fallback_reason


def _machine(root: Path, marker: str | None) -> Path:
    if marker is not None:
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).write_text("# R36 (release), REVISION: 4.0\n")
    return root


def test_no_nvidia_marker_means_the_cpu_is_expected(tmp_path):
    assert gpu_fallback_reason(_machine(tmp_path, None), ("no_such_module_xyz",)) is None


@pytest.mark.parametrize("marker", NVIDIA_GPU_MARKERS)
def test_a_gpu_without_its_runtime_names_the_failed_import(tmp_path, marker):
    root = _machine(tmp_path, marker)
    reason = gpu_fallback_reason(root, ("json", "no_such_module_xyz"))
    assert reason is not None
    assert f"/{marker}" in reason
    assert "no_such_module_xyz (No module named 'no_such_module_xyz')" in reason
    assert "json" not in reason, "only the modules that failed are named"
    assert "backend:=onnxruntime" in reason


def test_a_gpu_whose_runtime_imports_has_no_reason(tmp_path):
    root = _machine(tmp_path, NVIDIA_GPU_MARKERS[0])
    assert gpu_fallback_reason(root, ("json", "importlib.util")) is None


@pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here"
)
def test_default_modules_report_tensorrt_missing(tmp_path):
    reason = gpu_fallback_reason(_machine(tmp_path, NVIDIA_GPU_MARKERS[1]))
    assert reason is not None and "tensorrt (" in reason


def test_the_node_warns_only_when_auto_fell_back_to_the_cpu(tmp_path, monkeypatch):
    """cpu_fallback_warning: auto on onnxruntime under a GPU marker warns; a chosen backend,
    a resolved tensorrt or a machine without markers does not."""
    from compactinst_ros.ros.fallback import MARKER_ROOT_ENV, cpu_fallback_warning

    monkeypatch.setenv(MARKER_ROOT_ENV, str(_machine(tmp_path / "jetson", NVIDIA_GPU_MARKERS[0])))
    if importlib.util.find_spec("tensorrt") is None:
        assert "failed to import" in cpu_fallback_warning("auto", "onnxruntime")
    assert cpu_fallback_warning("onnxruntime", "onnxruntime") is None
    assert cpu_fallback_warning("auto", "tensorrt") is None
    (tmp_path / "pc").mkdir()
    monkeypatch.setenv(MARKER_ROOT_ENV, str(tmp_path / "pc"))
    assert cpu_fallback_warning("auto", "onnxruntime") is None


def test_cpu_loops_without_numba_are_named_with_the_install(monkeypatch) -> None:
    """The node puts ``jit.cpu_loops()`` on /diagnostics and logs ``cpu_loops_warning`` once at
    start: numpy loops on a CPU backend are said, with the extra that compiles them."""
    from compactinst_ros import jit
    from compactinst_ros.ros.fallback import cpu_loops_warning

    assert jit.cpu_loops() == ("numba" if jit.AVAILABLE else jit.cpu_loops())
    monkeypatch.setattr(jit, "AVAILABLE", True)
    assert jit.cpu_loops() == "numba" and cpu_loops_warning("onnxruntime") is None
    monkeypatch.setattr(jit, "AVAILABLE", False)
    said = cpu_loops_warning("openvino")
    assert said == jit.cpu_loops() and said.startswith("numpy: numba is not installed")
    assert "pip install 'compactinst_ros[fast]'" in said
    assert cpu_loops_warning("tensorrt") is None  # its post-processing runs on the GPU
