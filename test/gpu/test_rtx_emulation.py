"""The TensorRT for RTX backend (backends/rtx.py) end to end without a GPU: TensorRT for RTX is the
stand-in of emu/tensorrt_rtx_emu.py (``install``: plans record the compute capability they were
built for, contexts JIT-compile into a runtime cache), pycuda the emulator's, reporting an RTX
A4000's compute capability 8.6. This exercises ``backend: auto``'s order, where engines come from
(the bundle's AOT plans, the private cache, a build here), the acceptance check, the runtime
cache's round trip and the refusal of a GPU TensorRT for RTX does not run on. What it cannot
show: TensorRT for RTX's runtime itself (test/backends/test_real_builder.py builds with its real
builder; no RTX GPU has run these engines)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu
import tensorrt_rtx_emu

from compactinst_ros.backends import create_backend, resolve_backend_name
from compactinst_ros.backends.rtx_build import write_bundle_engines
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.errors import BackendError
from compactinst_ros.gpu.frames import encode, smooth_rgb
from compactinst_ros.pipeline import Pipeline

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture
def rtx_pc(emu_lib, monkeypatch, tmp_path) -> Path:
    """An x86 PC with an RTX A4000 (compute capability 8.6), TensorRT for RTX and pycuda, and
    no TensorRT; returns the engine cache folder."""
    cache = tmp_path / "engines"
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(cache))
    pycuda_emu.install(monkeypatch, emu_lib, target="sm_86", compute_capability=(8, 6))
    tensorrt_rtx_emu.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt fails
    return cache


def frame() -> np.ndarray:
    return np.ascontiguousarray(encode(smooth_rgb(120, 168, 5), "bgr8"))


def test_auto_chooses_tensorrt_rtx_builds_for_the_gpu_and_keeps_the_runtime_cache(
    rtx_pc, capsys
) -> None:
    """First start: auto picks TensorRT for RTX, the engines are built for sm 8.6, checked and
    cached, the kernels JIT-compiled and the runtime cache written at close. Second start:
    nothing is built or compiled, and the results are the same."""
    assert resolve_backend_name("auto") == "tensorrt_rtx"
    bundle = ModelBundle.load(default_bundle_path())
    with Pipeline(bundle, backend="auto") as pipe:
        first = pipe(frame(), "bgr8")
        described = pipe.backend.describe()
    out = capsys.readouterr().out
    assert "building TensorRT for RTX engine for 'encoder' for sm 8.6" in out
    assert described["backend"] == "tensorrt_rtx" and described["tensorrt_rtx"] == "1.7.1.116"
    assert described["precision"] == "fp16" and described["runtime_cache_loaded"] is False
    runtime_cache = Path(described["runtime_cache"])
    assert runtime_cache.is_file() and runtime_cache.stat().st_mode & 0o077 == 0
    assert len(list(rtx_pc.glob("*.engine"))) == 2 and len(first.instances) > 1

    tensorrt_rtx_emu.jit_compiles = 0
    with Pipeline(bundle, backend="tensorrt_rtx") as pipe:
        second = pipe(frame(), "bgr8")
        assert pipe.backend.describe()["runtime_cache_loaded"] is True
    assert "no usable" not in capsys.readouterr().out
    assert tensorrt_rtx_emu.jit_compiles == 0  # every kernel came from the runtime cache
    np.testing.assert_array_equal(first.instance_raster, second.instance_raster)
    np.testing.assert_array_equal(first.instances.box, second.instances.box)


def test_a_runtime_cache_of_another_gpu_is_refused_and_rewritten(rtx_pc, capsys) -> None:
    bundle = ModelBundle.load(default_bundle_path())
    with Pipeline(bundle, backend="tensorrt_rtx") as pipe:
        path = Path(pipe.backend.describe()["runtime_cache"])
    path.write_bytes(path.read_bytes().replace(b"sm86", b"sm89"))
    tensorrt_rtx_emu.jit_compiles = 0
    with Pipeline(bundle, backend="tensorrt_rtx") as pipe:
        assert pipe.backend.describe()["runtime_cache_loaded"] is False
    assert "is for another GPU, driver or TensorRT for RTX version" in capsys.readouterr().out
    assert tensorrt_rtx_emu.jit_compiles == 2 and b"sm86" in path.read_bytes()


def test_the_bundles_aot_plans_are_used_where_they_match_the_gpu_and_graph(
    rtx_pc, tmp_path, capsys
) -> None:
    """Plans the bundle carries (``build-engine --rtx``) for this GPU's compute capability load
    without a build; plans for another one, or built from another graph, do not."""
    root = Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))
    bundle = ModelBundle.load(root)
    write_bundle_engines(bundle, ["8.9"], "fp16", log=lambda _: None)
    with Pipeline(bundle, backend="tensorrt_rtx", engine_cache_dir=tmp_path / "a"):
        pass
    out = capsys.readouterr().out
    assert "(the bundle has no engines for TensorRT for RTX 1.7.1.116, sm 8.6)" in out

    written = write_bundle_engines(bundle, ["8.6"], "fp16", log=lambda _: None)
    with Pipeline(bundle, backend="tensorrt_rtx", engine_cache_dir=tmp_path / "b"):
        pass
    out = capsys.readouterr().out
    assert "building TensorRT for RTX" not in out
    assert out.count("TensorRT for RTX engine for") == 2 and str(written[0]) in out

    manifest = written[0].parent / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"onnx_sha256": "', '"onnx_sha256": "0'))
    with Pipeline(bundle, backend="tensorrt_rtx", engine_cache_dir=tmp_path / "c"):
        pass
    assert "was built from another fp16 graph (stale)" in capsys.readouterr().out


def test_a_gpu_tensorrt_for_rtx_does_not_run_on_is_refused_naming_tensorrt(
    emu_lib, monkeypatch, tmp_path
) -> None:
    """A Jetson Orin (8.7) has no TensorRT for RTX: the error says which backend runs there."""
    pycuda_emu.install(monkeypatch, emu_lib, compute_capability=(8, 7))
    tensorrt_rtx_emu.install(monkeypatch)
    bundle = ModelBundle.load(default_bundle_path())
    with pytest.raises(BackendError, match=r"compute capability 8\.7.*use backend:=tensorrt"):
        create_backend("tensorrt_rtx", bundle, engine_cache_dir=tmp_path)
