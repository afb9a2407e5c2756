"""Post-processing replayed as one CUDA graph per batch (gpu/graphs.py, the driver API through
ctypes), on the stand-ins of emu/: the emulated driver library takes the same ctypes calls as
``libcuda.so.1``, a capture diverts a stream's work into a graph, and a replay runs it again with
the arguments of the capture, reading the buffers as they are then. Real GPU behaviour stays
unverified."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import pycuda_emu
import tensorrt_emu

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.gpu import graphs
from compactinst_ros.gpu.frames import encode, smooth_rgb
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import OutputSet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")
CUDA_H = Path("/usr/local/cuda/include/cuda.h")
POST_KERNELS = ("pp_stats", "pp_tiles", "pp_remap")


def stand_ins(monkeypatch, emu_lib, tmp_path, **emulation):
    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    driver = pycuda_emu.install(monkeypatch, emu_lib, **emulation)
    tensorrt_emu.install(monkeypatch)
    return driver


def run_batches(pipe: Pipeline, sizes: list[tuple[int, int]]) -> list:
    """One batch of two cameras per entry of ``sizes`` (each batch its own frame contents)."""
    results = []
    for index, (h, w) in enumerate(sizes):
        items = [
            pipe.prepare(np.ascontiguousarray(encode(smooth_rgb(h, w, 7 * index + c), "bgr8")),
                         "bgr8", OutputSet())
            for c in range(2)
        ]  # fmt: skip
        results.append(pipe.infer_batch(items, [pipe.make_tracker() for _ in items]))
    return results


SIZES = [(96, 128), (96, 128), (72, 140), (96, 128)]


def test_a_batch_replays_as_one_graph_and_equals_the_launches_one_by_one(
    emu_lib, monkeypatch, tmp_path
) -> None:
    """Four batches of two cameras, the third at another camera size: one graph launch per
    batch; the post-processing kernels are launched by the host only while a batch shape is
    captured (the first batch, the new size, and the first size again, whose arenas the new size
    replaced); every raster and table equals the run without graphs, each batch its own frames
    (the replays read them as they are at the replay)."""
    stand_ins(monkeypatch, emu_lib, tmp_path / "direct", graphs=False)
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        assert pipe.describe()["postprocess_launch"].startswith("three kernels per frame: no CUDA")
        want = run_batches(pipe, SIZES)
    driver = stand_ins(monkeypatch, emu_lib, tmp_path / "graphs")
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        assert pipe.describe()["postprocess_launch"] == "one CUDA graph per batch"
        trial = driver.library.graph_launches  # the backend's trial of the API at start
        before = len(driver.launches)
        got = run_batches(pipe, SIZES)
        post = [name for name in driver.launches[before:] if name in POST_KERNELS]
        assert driver.library.graph_launches - trial == len(SIZES)
        assert post == [*POST_KERNELS, *POST_KERNELS] * 3  # captured: batches 1, 3 and 4
        assert len(driver.library.executables) == 1  # a new size frees the graphs it outdates
    assert not driver.library.executables  # close frees the rest
    assert not np.array_equal(want[0][0].instance_raster, want[1][0].instance_raster)
    for got_batch, want_batch in zip(got, want, strict=True):
        for one, other in zip(got_batch, want_batch, strict=True):
            for name in RASTERS:
                np.testing.assert_array_equal(getattr(one, name), getattr(other, name), name)
            np.testing.assert_array_equal(one.instances.score, other.instances.score)
            np.testing.assert_array_equal(one.segments.ids, other.segments.ids)


def test_a_refused_capture_is_said_once_and_the_kernels_run_one_by_one(
    emu_lib, monkeypatch, tmp_path, capsys
) -> None:
    """A capture the driver refuses at run time (after the start's trial passed): said once,
    /diagnostics' ``postprocess_launch`` names it, and the batches still come out right."""
    driver = stand_ins(monkeypatch, emu_lib, tmp_path)
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        driver.library.captures_allowed = 0  # the start's trial passed; now the driver refuses
        got = run_batches(pipe, SIZES[:2])
        said = capsys.readouterr().out
        assert said.count("launches its kernels one by one from now on") == 1, said
        assert "cuStreamBeginCapture_v2 failed with CUresult 900" in said
        assert "cuStreamBeginCapture_v2 failed" in pipe.describe()["postprocess_launch"]
    stand_ins(monkeypatch, emu_lib, tmp_path / "direct", graphs=False)
    with Pipeline(default_bundle_path(), backend="tensorrt", batch_sizes=(2,)) as pipe:
        want = run_batches(pipe, SIZES[:2])
    for got_batch, want_batch in zip(got, want, strict=True):
        for one, other in zip(got_batch, want_batch, strict=True):
            np.testing.assert_array_equal(one.panoptic_raster, other.panoptic_raster)


def test_a_capture_refuses_what_a_graph_cannot_hold(emu_lib, monkeypatch) -> None:
    """The stand-in's teeth: a synchronous copy while a stream captures fails and invalidates
    the capture (the driver's CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), and the replay of a graph
    reads its buffers at replay time, not at capture."""
    cuda = pycuda_emu.install(monkeypatch, emu_lib)
    api = graphs.CudaGraphs()
    stream = cuda.Stream()
    source, target = cuda.mem_alloc(16), cuda.mem_alloc(16)
    with pytest.raises(graphs.GraphError, match="cuStreamEndCapture failed"):
        api.capture(stream, lambda: cuda.memcpy_htod(source, np.zeros(16, np.uint8)))
    copy = api.capture(stream, lambda: cuda.memcpy_dtod_async(target, source, 16, stream))
    out = np.empty(16, np.uint8)
    for value in (3, 5):
        cuda.memcpy_htod(source, np.full(16, value, np.uint8))
        api.launch(copy, stream)
        stream.synchronize()
        cuda.memcpy_dtoh(out, target)
        assert (out == value).all()
    api.destroy(copy)
    with pytest.raises(graphs.GraphError, match="cuGraphLaunch failed"):
        api.launch(copy, stream)


@pytest.mark.skipif(not CUDA_H.exists(), reason="no CUDA toolkit header here")
def test_the_bound_signatures_match_cuda_h() -> None:
    """Each entry point the graphs module binds is what cuda.h's declaration compiles to (the
    header declares some under an older name that a macro maps to the exported symbol, as
    cuGraphInstantiate -> cuGraphInstantiateWithFlags), with as many parameters as the ctypes
    signature gives it (a wrong count corrupts the call)."""
    header = re.sub(r"[ \t]+", " ", CUDA_H.read_text())
    declared: dict[str, str] = {}
    for name, params in re.findall(r"CUresult CUDAAPI (\w+)\(([^)]*)\);", header):
        declared.setdefault(name, params)  # the first: later ones are the legacy symbols
    aliases = {
        target: alias
        for alias, target in re.findall(
            r"#define (\w+) +(?:__CUDA_API_PTSZ\()?(\w+)\)?\s*$", header, re.M
        )
    }
    for name, argtypes in graphs.SIGNATURES.items():
        params = declared.get(name, declared.get(aliases.get(name, "")))
        assert params is not None, f"{name} is declared in {CUDA_H} under no name"
        assert len(params.split(",")) == len(argtypes), (name, params)
