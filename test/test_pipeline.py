"""Pipeline end to end on CPU with the random bundle: camera-resolution outputs, timings, errors."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from compactinst_ros.errors import ConfigError, InputError
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import INFERENCE, OutputSet, PostprocessOptions


@pytest.fixture(scope="module")
def pipeline(random_bundle: Path) -> Pipeline:
    with Pipeline(
        random_bundle,
        backend="onnxruntime",
        options=PostprocessOptions(score_threshold=0.0),
        threads=1,
    ) as p:
        yield p


def _scene(h: int = 300, w: int = 500) -> np.ndarray:
    """A bgr8 frame with a few shapes over a gradient (not the model's input size)."""
    image = np.zeros((h, w, 3), np.uint8)
    image[:] = np.linspace(40, 200, w, dtype=np.uint8)[None, :, None]
    cv2.circle(image, (120, 150), 60, (30, 30, 220), -1)
    cv2.rectangle(image, (300, 80), (450, 250), (20, 200, 40), -1)
    return image


def test_end_to_end_shapes_dtypes_timings(pipeline: Pipeline) -> None:
    result = pipeline(_scene(), "bgr8")
    assert (result.meta.src_h, result.meta.src_w) == (300, 500)
    assert result.instance_raster.shape == (300, 500) and result.instance_raster.dtype == np.uint16
    assert result.panoptic_raster.shape == (300, 500) and result.panoptic_raster.dtype == np.int32
    assert result.semantic_raster.shape == (300, 500)
    assert result.semantic_raster.dtype in (np.uint8, np.uint16)
    n = len(result.instances)
    assert n > 0
    assert set(np.unique(result.instance_raster)) <= set(range(n + 1))
    assert result.instances.box.shape == (n, 4)
    for key in ("preprocess", "encoder", "decoder", "postprocess", "inference"):
        assert result.timings_ms[key] > 0
    assert result.timings_ms["inference"] >= result.timings_ms["encoder"]
    labels = set(pipeline.bundle.labels.ids)
    assert set(result.instances.label_id.tolist()) <= labels


def test_same_frame_in_rgb_and_bgr_agrees(pipeline: Pipeline) -> None:
    bgr = _scene()
    a = pipeline(bgr, "bgr8")
    b = pipeline(np.ascontiguousarray(bgr[:, :, ::-1]), "rgb8")
    np.testing.assert_array_equal(a.instance_raster, b.instance_raster)
    np.testing.assert_array_equal(a.instances.score, b.instances.score)


def test_only_requested_outputs(pipeline: Pipeline) -> None:
    result = pipeline(_scene(), "bgr8", OutputSet(instance=True, panoptic=False, semantic=False))
    assert result.instance_raster is not None
    assert result.panoptic_raster is None and result.semantic_raster is None


def test_describe(pipeline: Pipeline) -> None:
    info = pipeline.describe()
    assert info["model"] == "compactinst_demo" and info["input_size"] == "256x320"
    assert info["backend"] == "onnxruntime" == pipeline.backend_name


@pytest.mark.parametrize(
    ("image", "encoding", "message"),
    [
        (np.zeros((300, 500, 3), np.float32), "bgr8", "dtype float32"),
        (np.zeros((300, 500, 4), np.uint8), "bgr8", "HxWx3"),
        (np.zeros((300, 500), np.uint8), "rgb8", "HxWx3"),
        (np.zeros((0, 500, 3), np.uint8), "rgb8", "zero size"),
        (np.zeros((30, 50, 3), np.uint8), "32SC1", "unsupported image encoding"),
        (np.zeros((30, 50, 3), np.uint16), "rgb16", "converted on arrival"),
    ],
)
def test_bad_frames_are_refused(pipeline: Pipeline, image, encoding, message) -> None:
    with pytest.raises(InputError, match=message):
        pipeline(image, encoding)


def test_unknown_backend(random_bundle: Path) -> None:
    with pytest.raises(ConfigError, match="unknown backend 'cuda'"):
        Pipeline(random_bundle, backend="cuda")


def test_a_batch_equals_its_frames_run_one_by_one(pipeline: Pipeline) -> None:
    """Three cameras' frames (different sizes and encodings) in one batch give each camera the
    result of its frame alone: the batch axis changes no arithmetic that reaches the rasters."""
    frames = [
        (_scene(), "bgr8"),
        (_scene(240, 320)[..., ::-1].copy(), "rgb8"),
        (cv2.flip(_scene(), 1), "bgr8"),
    ]
    outputs = OutputSet(overlay=True)
    single = [pipeline(image, encoding, outputs) for image, encoding in frames]
    trackers = [pipeline.make_tracker() for _ in frames]
    items = [pipeline.prepare(image, encoding, outputs) for image, encoding in frames]
    batch = pipeline.infer_batch(items, trackers)
    assert len(batch) == 3
    for one, many in zip(single, batch, strict=True):
        np.testing.assert_array_equal(many.instance_raster, one.instance_raster)
        np.testing.assert_array_equal(many.panoptic_raster, one.panoptic_raster)
        np.testing.assert_array_equal(many.semantic_raster, one.semantic_raster)
        np.testing.assert_allclose(many.instances.score, one.instances.score, atol=1e-5)
        assert many.overlay.shape == one.overlay.shape
    stage_times = {k: batch[0].timings_ms[k] for k in ("encoder", "decoder")}
    assert all({k: r.timings_ms[k] for k in stage_times} == stage_times for r in batch)


def test_the_two_halves_on_two_threads_equal_one_infer_batch(pipeline: Pipeline) -> None:
    """encode_batch here, decode_batch on another thread: the same rasters and overlay as one
    infer_batch, with the options the batch started with although they changed in between."""
    frames = [_scene(), cv2.flip(_scene(240, 320), 0), cv2.flip(_scene(), 1)]
    outputs = OutputSet(overlay=True)
    items = [pipeline.prepare(image, "bgr8", outputs) for image in frames]
    whole = pipeline.infer_batch(items, [pipeline.make_tracker() for _ in frames])
    assert pipeline.splits_stages
    started = pipeline.options
    pending = pipeline.encode_batch(items)
    pipeline.options = replace(started, score_threshold=0.99, overlay_alpha=0.9)
    halves: dict[str, object] = {}

    def finish() -> None:
        trackers = [pipeline.make_tracker() for _ in frames]
        halves["results"] = pipeline.decode_batch(pending, trackers)
        halves["thread"] = threading.get_ident()

    try:
        thread = threading.Thread(target=finish)
        thread.start()
        thread.join(30)
    finally:
        pipeline.options = started
    assert halves["thread"] != threading.get_ident()
    split = halves["results"]
    assert isinstance(split, list) and len(split) == 3
    for one, two in zip(whole, split, strict=True):
        assert len(two.instances.ids) == len(one.instances.ids) > 0
        np.testing.assert_array_equal(two.instance_raster, one.instance_raster)
        np.testing.assert_array_equal(two.panoptic_raster, one.panoptic_raster)
        np.testing.assert_array_equal(two.overlay, one.overlay)
        timings = two.timings_ms
        assert timings[INFERENCE] >= timings["encoder"] + timings["decoder"] > 0


def test_a_backend_without_halves_runs_the_whole_batch_in_decode_batch(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend that is not a StagedBackend (TensorRT) starts nothing in encode_batch."""
    monkeypatch.setattr(type(pipeline), "splits_stages", property(lambda self: False))
    items = [pipeline.prepare(_scene(), "bgr8")]
    pending = pipeline.encode_batch(items)
    assert pending.encoded is None
    (result,) = pipeline.decode_batch(pending, [pipeline.make_tracker()])
    (whole,) = pipeline.infer_batch(items, [pipeline.make_tracker()])
    np.testing.assert_array_equal(result.instance_raster, whole.instance_raster)


def test_padded_batch_sizes_and_fixed_batch_bundles(random_bundle: Path, tmp_path: Path) -> None:
    """batch_sizes pads a batch to the next listed size and refuses a larger one; a bundle
    exported before the batch axis runs single frames and names the re-export for more."""
    import json
    import shutil

    from compactinst_ros.bundle import METADATA_FILE, ModelBundle
    from compactinst_ros.errors import BackendError

    with Pipeline(random_bundle, "onnxruntime", threads=1, batch_sizes=(1, 3)) as padded:
        assert padded.bundle.batched
        assert [padded.batch_slots(n) for n in (1, 2, 3)] == [1, 3, 3]
        with pytest.raises(BackendError, match="exceeds batch_sizes"):
            padded.batch_slots(4)
        items = [padded.prepare(_scene(), "bgr8") for _ in range(2)]
        assert len(padded.infer_batch(items, [padded.make_tracker() for _ in items])) == 2
    old = tmp_path / "fixed_batch"
    shutil.copytree(random_bundle, old)
    meta = json.loads((old / METADATA_FILE).read_text())
    for stage in meta["stages"]:
        for tensor in (*stage["inputs"], *stage["outputs"]):
            assert tensor["shape"][0] == "batch"
            tensor["shape"][0] = 1
    (old / METADATA_FILE).write_text(json.dumps(meta))
    bundle = ModelBundle.load(old)
    assert not bundle.batched
    assert bundle.stages[0].inputs[0].batch_shape(1) == (1, 3, bundle.input_h, bundle.input_w)
    with Pipeline(bundle, "onnxruntime", threads=1) as fixed:
        assert fixed(_scene(), "bgr8").instance_raster.shape == (300, 500)
        with pytest.raises(BackendError, match=r"fixed batch of 1.*compactinst export"):
            fixed.batch_slots(2)
