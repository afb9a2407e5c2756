"""The TensorRT builder (trt_build.py) and backend (trt.py), executed end to end without a GPU:
TensorRT is the stand-in of emu/tensorrt_emu.py (engines run the bundle's ONNX graphs on ONNX
Runtime), pycuda the stand-in of emu/pycuda_emu.py (the real kernel sources on the CPU emulator).
This exercises the engine cache, the build CLI with its progress display, the GPU thread, buffer
binding by tensor name, the stage chain, events, the overlay path and teardown; the names used
are checked against real TensorRT 10.3 and 11.x by test_api_names.py. What it cannot show:
TensorRT's parser and FP16 numerics, real streams and timing."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent / "emu"))

import tensorrt_emu  # noqa: E402

from compactinst_ros.backends.base import BackendOptions  # noqa: E402
from compactinst_ros.backends.engine_cache import EngineCache  # noqa: E402
from compactinst_ros.backends.ort import OrtBackend  # noqa: E402
from compactinst_ros.backends.trt_build import (  # noqa: E402
    BuildOptions,
    engine_key,
    engine_precision,
)
from compactinst_ros.bundle import METADATA_FILE, ModelBundle, default_bundle_path  # noqa: E402
from compactinst_ros.cli import main as cli_main  # noqa: E402
from compactinst_ros.errors import BackendError  # noqa: E402
from compactinst_ros.gpu.frames import encode, smooth_rgb  # noqa: E402
from compactinst_ros.pipeline import Pipeline  # noqa: E402
from compactinst_ros.postprocess import reference  # noqa: E402
from compactinst_ros.preprocess import letterbox  # noqa: E402
from compactinst_ros.structures import (  # noqa: E402
    FrameMeta,
    OutputSet,
    PostprocessOptions,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")


def test_build_engine_cli_builds_caches_and_rebuilds_corrupt(
    emulated_gpu, tmp_path, capsys
) -> None:
    cache_dir = tmp_path / "engines"
    bundle = shutil.copytree(default_bundle_path(), tmp_path / "fp32_only")
    meta = json.loads((bundle / METADATA_FILE).read_text())
    del meta["variants"]  # the shipped fp16/int8 variants: this bundle has only fp32 graphs
    (bundle / METADATA_FILE).write_text(json.dumps(meta))
    assert cli_main(["build-engine", str(bundle), "--cache-dir", str(cache_dir)]) == 0
    out, err = capsys.readouterr()
    assert err.count("Building engine (2 steps)") == 2  # progress display, one per stage
    assert "no usable TensorRT engine for 'encoder' in the cache (missing" in out
    assert "has no fp16 graphs, so the TensorRT engines are fp32" in out
    assert "TensorRT 10.3.0 on CPU kernel emulator (device 0, sm 0.0), fp32 strongly typed" in out
    engines = sorted(cache_dir.glob("*.engine"))
    assert [p.name.split("-")[0] for p in engines] == ["decoder", "encoder"]
    # FP32 math, not TF32 (on by default in TensorRT): the builder cleared it
    assert all(p.read_bytes().startswith(tensorrt_emu.PLAN_MAGIC + b"fp32") for p in engines)
    timing = next(cache_dir.glob("timing-trt1030-cuda0-*-1sm-1024mib.cache")).read_bytes()
    assert timing == tensorrt_emu.TIMING_MAGIC + b"emulated-0:++"  # loaded, saved per build

    assert cli_main(["build-engine", str(bundle), "--cache-dir", str(cache_dir)]) == 0
    assert "no usable" not in capsys.readouterr().out  # both cached

    engines[0].write_bytes(engines[0].read_bytes()[:100])
    assert cli_main(["build-engine", str(bundle), "--cache-dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    assert "no usable TensorRT engine for 'decoder' in the cache (corrupt" in out


def test_foreign_engine_is_refused_when_building_is_disabled(emulated_gpu, tmp_path) -> None:
    bundle = ModelBundle.load(default_bundle_path())
    cache = EngineCache(tmp_path / "engines")
    with pytest.raises(BackendError, match="building is disabled; run 'compactinst build-engine"):
        Pipeline(bundle, backend="tensorrt", allow_build=False)
    Pipeline(bundle, backend="tensorrt").backend.close()  # builds both
    other_options = BuildOptions(opt_level=5)
    stage = bundle.stages[0]
    graph = bundle.stage_graph(stage.name, "fp32")
    other = engine_key(graph, stage, "10.3.0", pycuda_info(), other_options)
    assert not cache.paths(other)[0].exists()
    with pytest.raises(BackendError, match="no usable TensorRT engine for stage 'encoder'"):
        Pipeline(bundle, backend="tensorrt", allow_build=False, build_options=other_options)


def pycuda_info():
    from compactinst_ros.backends.trt_build import device_info

    return device_info(0)


def cpu_frame_result(bundle: ModelBundle, tensor: np.ndarray, meta, outputs: OutputSet):
    """ONNX Runtime stages (the typed graphs of the precision the engines are built in) and the
    numpy reference post-processing on a given encoder input."""
    precision = engine_precision(bundle, None, log=lambda _: None)
    backend = OrtBackend(bundle, BackendOptions(precision=precision))
    try:
        raw = backend.run_decoder(backend.run_encoder(tensor))[0]
    finally:
        backend.close()
    return reference.postprocess(raw, meta, bundle.labels, PostprocessOptions(), outputs)


def test_the_host_copies_of_a_batch_come_before_its_first_event(
    emulated_gpu, monkeypatch
) -> None:
    """The frames' copies into pinned memory are host work: they happen before the event that
    starts ``preprocess``, which then times the device's upload and letterbox only, and are
    reported as ``host_copy``."""
    import pycuda_emu

    from compactinst_ros.gpu.preprocess import GpuPreprocessor

    order: list[str] = []
    stage, record = GpuPreprocessor.stage, pycuda_emu.Event.record
    monkeypatch.setattr(
        GpuPreprocessor, "stage", lambda *a, **k: (order.append("copy"), stage(*a, **k))[1]
    )
    monkeypatch.setattr(
        pycuda_emu.Event, "record", lambda *a, **k: (order.append("event"), record(*a, **k))[1]
    )
    bundle = ModelBundle.load(default_bundle_path())
    frame = np.ascontiguousarray(smooth_rgb(120, 168, 5))
    with Pipeline(bundle, backend="tensorrt") as trt_pipe:
        order.clear()  # the warm-up at start
        got = trt_pipe(frame, "rgb8")
    assert order[0] == "copy" and "copy" not in order[order.index("event") :], order
    assert got.timings_ms["host_copy"] >= 0.0


@pytest.mark.parametrize(("encoding", "levels"), [("bgr8", 0.76), ("yuyv", 1.2)])
def test_tensorrt_backend_frame_path(emulated_gpu, encoding: str, levels: float) -> None:
    """The whole GPU frame path on the default model. Given the encoder input the kernel made,
    the rasters and tables equal ONNX Runtime + the numpy reference; that input (in half: the
    FP16 engine takes it so) is within the documented grey levels of the CPU letterbox
    (docs/gpu.md) and half's rounding; stage times come from events;
    the overlay is made only when asked for."""
    bundle = ModelBundle.load(default_bundle_path())
    frame = np.ascontiguousarray(encode(smooth_rgb(120, 168, 5), encoding))
    meta = FrameMeta.letterbox(120, 168, bundle.input_h, bundle.input_w)
    with Pipeline(bundle, backend="tensorrt") as trt_pipe:
        got = trt_pipe(frame, encoding)
        tensor = tensorrt_emu.last_inputs["image"]
        want = cpu_frame_result(bundle, tensor, meta, OutputSet())
        for name in RASTERS:
            a, b = getattr(got, name), getattr(want, name)
            assert a.shape == b.shape == (120, 168) and a.dtype == b.dtype, name
            assert (a == b).mean() >= 0.999, (name, (a != b).mean())
        np.testing.assert_array_equal(got.instances.class_index, want.instances.class_index)
        np.testing.assert_allclose(got.instances.score, want.instances.score, rtol=1e-5)
        np.testing.assert_array_equal(got.instances.box, want.instances.box)
        np.testing.assert_array_equal(got.segments.ids, want.segments.ids)
        assert len(got.segments) > 1 and len(got.instances) > 1
        cpu_input = letterbox(frame, encoding, meta, bundle.pad_value)
        assert tensor.dtype == np.float16  # the FP16 engine takes the image in half
        rounding = 2.0**-4  # half of half's spacing (2^-3) between 128 and 256
        assert np.abs(tensor.astype(np.float32) - cpu_input).max() <= levels + rounding
        assert got.overlay is None
        stages = {"preprocess", "encoder", "decoder", "postprocess", "enqueue", "inference",
                  "host_copy"}  # fmt: skip
        assert stages <= set(got.timings_ms)
        shown = trt_pipe(frame, encoding, OutputSet(overlay=True))
        assert shown.overlay is not None and shown.overlay.shape == (120, 168, 3)
        assert shown.overlay.dtype == np.uint8 and shown.overlay.flags.c_contiguous
        described = trt_pipe.backend.describe()  # fp16: the shipped variant
        assert described["tensorrt"] == "10.3.0" and described["precision"] == "fp16"
        assert described["gpu_memory_total_mib"] == 1024
    kernels = {"pre_letterbox_half", "pp_stats", "pp_tiles", "pp_remap", "ov_instance"}  # fp16
    assert set(emulated_gpu.launches) >= kernels
    with pytest.raises(BackendError, match="closed"):
        trt_pipe(frame, encoding)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_build_progress_rewrites_a_line_on_a_terminal_and_logs_lines_otherwise(
    emulated_gpu, monkeypatch
) -> None:
    """The node builds at start with stderr going to a log: whole lines, throttled, no \\r."""
    from compactinst_ros.backends import trt_build

    trt = sys.modules["tensorrt"]
    network = tensorrt_emu.Network()
    network.onnx_bytes = b"graph"
    for stream, throttle in ((Terminal(), 5.0), (io.StringIO(), 5.0), (io.StringIO(), 0.0)):
        monkeypatch.setattr(trt_build, "LOG_PROGRESS_S", throttle)
        config = tensorrt_emu.BuilderConfig(b"emulated-0")
        config.progress_monitor = trt_build._progress_monitor(trt, "encoder", stream)
        assert tensorrt_emu.Builder(trt.Logger()).build_serialized_network(network, config)
        text = stream.getvalue()
        assert text.startswith("[encoder] Building engine (2 steps)\n")
        if isinstance(stream, Terminal):
            assert "\r[encoder] Tactic selection: 3/3" in text
        else:
            assert "\r" not in text
            assert text.rstrip().split("\n")[-1].startswith("[encoder] built in")
            # the stand-in reports 2 x 3 tactic steps; throttled to 5 s, a fast build shows none
            assert text.count("Tactic selection: ") == (6 if throttle == 0.0 else 0)
