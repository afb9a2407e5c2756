"""The real kernels on a real GPU (skipped cleanly without pycuda or a CUDA device): the same
parity checks as scripts/gpu_check.py, and a TensorRT engine build/cache round trip."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cuda_device() -> bool:
    if importlib.util.find_spec("pycuda") is None:
        return False
    try:
        import pycuda.driver as cuda

        cuda.init()
        return cuda.Device.count() > 0
    except Exception:  # no driver / no device: skip, never fail
        return False


HAVE_GPU = _cuda_device()
HAVE_TRT = importlib.util.find_spec("tensorrt") is not None


@pytest.fixture(scope="module")
def gpu():
    """(pycuda.driver, stream, gpu_check module) with the primary context pushed."""
    if not HAVE_GPU:
        pytest.skip("needs pycuda and a CUDA device")
    import pycuda.driver as cuda

    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    yield cuda, cuda.Stream(), gpu_check
    ctx.pop()


@pytest.mark.gpu
@pytest.mark.parametrize("kernels", ["preprocess", "overlay", "postprocess"])
def test_kernel_parity(gpu, kernels: str) -> None:
    """gpu_check.check_<kernels> on the device: every parity row it records passes."""
    cuda, stream, gpu_check = gpu
    checks = gpu_check.Checks()
    quick = (True,) if kernels == "postprocess" else ()
    getattr(gpu_check, f"check_{kernels}")(cuda, stream, checks, *quick)
    assert checks.rows and checks.passed, checks.rows


@pytest.mark.gpu
@pytest.mark.trt
@pytest.mark.skipif(not (HAVE_GPU and HAVE_TRT), reason="needs TensorRT and a CUDA device")
def test_engine_build_and_cache_hit(tmp_path: Path) -> None:
    """A tiny ONNX graph builds into a cached engine that the next resolve loads, not rebuilds."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from compactinst_ros.backends.engine_cache import EngineCache
    from compactinst_ros.backends.trt_build import (
        BuildOptions,
        build_serialized,
        device_info,
        engine_key,
        import_tensorrt,
    )
    from compactinst_ros.bundle import StageGraph, StageSpec, TensorSpec, sha256_file

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    stage = StageSpec(
        "encoder", path, sha256_file(path),
        (TensorSpec("x", (1, 3, 8, 8), "float32"),), (TensorSpec("y", (1, 3, 8, 8), "float32"),),
    )  # fmt: skip
    trt = import_tensorrt()
    options = BuildOptions(workspace_mib=256)
    graph = StageGraph("encoder", "fp32", path.read_bytes(), sha256_file(path))
    key = engine_key(graph, stage, trt.__version__, device_info(0), options)
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    cache = EngineCache(tmp_path / "cache")
    builds = []

    def build(k, timing):
        builds.append(k)
        return build_serialized(graph, stage, timing, options, progress=False)

    engine = cache.resolve(key, runtime.deserialize_cuda_engine, build, log=lambda _: None)
    assert engine.num_io_tensors == 2
    cache.resolve(key, runtime.deserialize_cuda_engine, build, log=lambda _: None)
    assert len(builds) == 1
    assert cache.timing_cache_path(key).is_file()
