"""Batches on the TensorRT backend, on the stand-ins of emu/ (engines run the batch-axis graphs on
ONNX Runtime, the real kernel sources on the CPU emulator): a batch equals its frames run one at a
time, a partial batch runs padded at the next built size, each batch size has engines of its own
(cache key, profile, set_input_shape), and the overlay of any slot can be rendered."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "emu"))

import tensorrt_emu

from compactinst_ros.backends.base import BackendOptions
from compactinst_ros.backends.engine_cache import EngineCache
from compactinst_ros.backends.trt import batch_sizes
from compactinst_ros.backends.trt_build import (
    BuildOptions,
    device_info,
    engine_key,
)
from compactinst_ros.backends.trt_build import ensure_engines as ensure
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.errors import BackendError
from compactinst_ros.gpu.frames import encode, smooth_rgb
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import OutputSet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
RASTERS = ("instance_raster", "panoptic_raster", "semantic_raster")
#: three cameras: different sizes, contents and encodings
FRAMES = ((120, 168, 5, "bgr8"), (96, 128, 7, "rgb8"), (120, 168, 9, "yuyv"))


def camera_frames() -> list[tuple[np.ndarray, str]]:
    return [
        (np.ascontiguousarray(encode(smooth_rgb(h, w, seed), enc)), enc)
        for h, w, seed, enc in FRAMES
    ]


def assert_same(got, want) -> None:
    for name in RASTERS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    np.testing.assert_array_equal(got.instances.class_index, want.instances.class_index)
    np.testing.assert_allclose(got.instances.score, want.instances.score, rtol=1e-5)
    np.testing.assert_array_equal(got.segments.ids, want.segments.ids)
    np.testing.assert_array_equal(got.overlay, want.overlay)


def test_a_batch_equals_its_frames_one_at_a_time_and_pads_a_partial_one(emulated_gpu) -> None:
    """Batch sizes (1, 3): 3 cameras in one batch, then 2 (padded at 3 with slot 0's input, the
    padding's outputs discarded), each frame equal to its own batch-1 run, overlays included
    (rendered per slot: slot 1's is camera 1's)."""
    bundle = ModelBundle.load(default_bundle_path())
    asked = OutputSet(overlay=True)
    with Pipeline(bundle, backend="tensorrt", batch_sizes=(1, 3)) as pipe:
        items = [pipe.prepare(frame, enc, asked) for frame, enc in camera_frames()]
        single = [pipe.infer_batch([item], [pipe.make_tracker()])[0] for item in items]
        assert tensorrt_emu.last_inputs["image"].shape[0] == 1
        batch = pipe.infer_batch(items, [pipe.make_tracker() for _ in items])
        assert tensorrt_emu.last_inputs["image"].shape[0] == 3
        assert len(batch) == 3
        for got, want in zip(batch, single, strict=True):
            assert_same(got, want)
            assert got.timings_ms["encoder"] == batch[0].timings_ms["encoder"]  # the batch's
        assert not np.array_equal(batch[1].instance_raster, batch[0].instance_raster[:96, :128])
        assert pipe.batch_slots(2) == 3
        pair = pipe.infer_batch(items[1:], [pipe.make_tracker() for _ in range(2)])
        fed = tensorrt_emu.last_inputs["image"]
        assert fed.shape[0] == 3 and np.array_equal(fed[2], fed[0])  # padding: slot 0's input
        assert len(pair) == 2
        for got, want in zip(pair, single[1:], strict=True):
            assert_same(got, want)
        colours = np.full((101, 3), 200, np.uint8)
        assert pipe.backend.render_overlay(colours, 0.5, index=1).shape == (120, 168, 3)
        with pytest.raises(BackendError, match="frame 2 of the last batch"):
            pipe.backend.render_overlay(colours, 0.5, index=2)
        described = pipe.backend.describe()
        assert described["batch_sizes"] == [1, 3]
        memory = described["engine_memory_mib"]
        assert set(memory) == {"encoder@1", "decoder@1", "encoder@3", "decoder@3"}
        # each stage's largest: the encoder of one batch runs beside the decoder of another
        per_stage = [max(v for k, v in memory.items() if k.startswith(s)) for s in ("enc", "dec")]
        assert described["activation_memory_mib"] == pytest.approx(sum(per_stage), abs=0.1)
        with pytest.raises(BackendError, match=r"exceeds the TensorRT engines' batch sizes \[1, 3"):
            pipe.batch_slots(4)


def test_each_batch_size_has_its_own_engine_key_profile_and_shape(emulated_gpu, tmp_path) -> None:
    """The key's input shapes carry the batch; a batch-1 engine in the cache is not taken for
    batch 3; the batch-3 engine's profile is min = opt = max = 3 and its contexts refuse batch 1
    (as TensorRT refuses a shape outside the profile); its I/O dim 0 is -1 until a shape is set."""
    bundle = ModelBundle.load(default_bundle_path())
    stage, device = bundle.stages[0], device_info(0)
    graph = bundle.stage_graph(stage.name, "fp32")
    one, three = (engine_key(graph, stage, "10.3.0", device, BuildOptions(), b) for b in (1, 3))
    assert one.digest != three.digest and three.input_shapes["image"][0] == 3
    cache = EngineCache(tmp_path / "engines")
    runtime = sys.modules["tensorrt"].Runtime(None)
    ensure(bundle, cache, runtime.deserialize_cuda_engine, device, "fp32", log=lambda _: None)
    with pytest.raises(BackendError, match="no usable TensorRT engine for stage 'encoder'"):
        ensure(bundle, cache, runtime.deserialize_cuda_engine, device, "fp32", False, batch=3)
    engines = ensure(bundle, cache, runtime.deserialize_cuda_engine, device, "fp32", batch=3)
    encoder = engines["encoder"]
    frame = (3, bundle.input_h, bundle.input_w)
    assert encoder.get_tensor_profile_shape("image", 0) == [(3, *frame)] * 3
    assert encoder.get_tensor_shape("image")[0] == -1
    context = encoder.create_execution_context()
    assert context.get_tensor_shape(encoder.get_tensor_name(1))[0] == -1
    assert not context.set_input_shape("image", (1, *frame))
    assert context.set_input_shape("image", (3, *frame))
    assert context.get_tensor_shape(encoder.get_tensor_name(1))[0] == 3
    assert len(list(cache.root.glob("*.engine"))) == 4


def test_batch_sizes_default_to_max_batch_and_need_the_batch_axis(tmp_path) -> None:
    bundle = ModelBundle.load(default_bundle_path())
    assert bundle.batched
    assert batch_sizes(bundle, BackendOptions()) == (1,)
    assert batch_sizes(bundle, BackendOptions(max_batch=3)) == (1, 2, 3)
    assert batch_sizes(bundle, BackendOptions(batch_sizes=(4, 2, 2))) == (2, 4)
    unbatched = ModelBundle(**{**bundle.__dict__, "stages": tuple(
        type(s)(s.name, s.path, s.sha256,
                tuple(type(t)(t.name, t.shape, t.dtype) for t in s.inputs), s.outputs)
        for s in bundle.stages
    )})  # fmt: skip
    assert batch_sizes(unbatched, BackendOptions()) == (1,)
    with pytest.raises(BackendError, match=r"fixed batch of 1.*re-export it"):
        batch_sizes(unbatched, BackendOptions(max_batch=2))
