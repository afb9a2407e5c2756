"""OutputSet.overlay end to end: the Pipeline fills FrameResult.overlay on every backend, and the
TensorRT path (kernel twin + captions) gives the same picture as the CPU blend."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from compactinst_ros.backends import BackendOptions
from compactinst_ros.errors import ConfigError
from compactinst_ros.gpu import twin
from compactinst_ros.gpu.constants import MAX_QUERIES
from compactinst_ros.image_formats import to_rgb
from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.overlay import draw_captions, draw_overlay, overlay_bgr
from compactinst_ros.palette import palette
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import (
    BatchItem,
    FrameMeta,
    FrameResult,
    Instances,
    OutputSet,
    PostprocessOptions,
    Segments,
)

H, W = 90, 140
ALPHA = 0.45


def _instances_result() -> FrameResult:
    """Three instances (one touching the border) on an H x W frame."""
    result = FrameResult(meta=FrameMeta.letterbox(H, W, 64, 96))
    raster = np.zeros((H, W), np.uint16)
    raster[5:40, 10:60] = 1
    raster[30:80, 50:120] = 2  # overlaps 1: the later write wins, as in the raster rule
    raster[70:, 125:] = 3
    result.instance_raster = raster
    boxes = []
    for i in (1, 2, 3):
        ys, xs = np.nonzero(raster == i)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
    result.instances = Instances(
        ids=np.array([1, 2, 3], np.uint16),
        class_index=np.array([0, 1, 0], np.int32),
        label_id=np.array([1, 2, 1], np.int32),
        score=np.array([0.9, 0.7, 0.4], np.float32),
        box=np.array(boxes, np.float32),
        area=np.array([(raster == i).sum() for i in (1, 2, 3)], np.int64),
    )
    return result


def _gpu_path(raw: np.ndarray, encoding: str, result: FrameResult) -> np.ndarray:
    """What TensorRTBackend puts in FrameResult.overlay: ov_instance over the raw frame with the
    device palette table, RGB -> bgr8."""
    rgb = twin.overlay(raw, encoding, result.instance_raster, palette(MAX_QUERIES + 1), ALPHA)
    return rgb[..., ::-1].copy()


def test_palette_rows_do_not_depend_on_its_length() -> None:
    """The GPU keeps palette(MAX_QUERIES + 1); the CPU uses palette(max id + 1)."""
    table = palette(MAX_QUERIES + 1)
    for n in (1, 2, 3, 7, 16, 33, 100, MAX_QUERIES):
        np.testing.assert_array_equal(palette(n), table[:n])


@pytest.mark.parametrize("encoding", ["bgr8", "rgb8", "mono8"])
def test_gpu_overlay_twin_plus_captions_matches_draw_overlay(encoding: str) -> None:
    rng = np.random.default_rng(1)
    bgr = cv2.GaussianBlur(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), (5, 5), 0)
    raw = {"bgr8": bgr, "rgb8": bgr[..., ::-1].copy(), "mono8": bgr[..., :1].copy()}[encoding]
    result = _instances_result()
    cpu = overlay_bgr(raw, encoding, result, SYNTHETIC_LABELS, ALPHA)
    result.overlay = _gpu_path(raw, encoding, result)
    gpu = overlay_bgr(raw, encoding, result, SYNTHETIC_LABELS, ALPHA)
    assert gpu.shape == cpu.shape == (H, W, 3) and gpu.dtype == np.uint8
    diff = np.abs(gpu.astype(int) - cpu.astype(int))
    assert diff.max() <= 1  # cv2.addWeighted vs the kernel's float blend: rounding only
    assert (diff > 0).mean() < 0.02
    fg = result.instance_raster > 0
    assert not np.array_equal(gpu[fg], bgr_of(raw, encoding)[fg])  # it did blend
    assert (gpu[85, 5] == bgr_of(raw, encoding)[85, 5]).all()  # background untouched


def bgr_of(raw: np.ndarray, encoding: str) -> np.ndarray:
    """The bgr8 view of a raw test frame."""
    return to_rgb(raw, encoding)[..., ::-1]


def test_captions_are_one_function_for_both_paths() -> None:
    """draw_overlay = blend + outlines + draw_captions; the captions are the only text."""
    image = np.full((H, W, 3), 90, np.uint8)
    result = _instances_result()
    with_text = draw_overlay(image, result, SYNTHETIC_LABELS, ALPHA)
    result.overlay = _gpu_path(image, "bgr8", result)
    no_text = result.overlay.copy()
    assert not np.array_equal(with_text, no_text)  # captions add pixels
    captioned = draw_captions(no_text, result, SYNTHETIC_LABELS)
    assert np.abs(captioned.astype(int) - with_text.astype(int)).max() <= 1


def test_distances_join_the_captions_and_the_pipeline_can_leave_them_to_the_node() -> None:
    """captions=False gives the uncaptioned blend; draw_captions then adds "<d> m" to each
    instance with a finite distance (the node's 3-D lifting), nothing to one without."""
    from compactinst_ros.overlay import _caption_items

    image = np.full((H, W, 3), 60, np.uint8)
    result = _instances_result()
    bare = overlay_bgr(image, "bgr8", result, SYNTHETIC_LABELS, ALPHA, captions=False)
    assert np.array_equal(bare, _gpu_path(image, "bgr8", result))
    distances = np.array([4.26, np.nan, 12.0])
    texts = [c for _, _, c, _ in _caption_items(result, SYNTHETIC_LABELS, distances)]
    plain = [c for _, _, c, _ in _caption_items(result, SYNTHETIC_LABELS)]
    assert texts == [plain[0] + " 4.3 m", plain[1], plain[2] + " 12.0 m"]
    with_metres = draw_captions(bare.copy(), result, SYNTHETIC_LABELS, distances=distances)
    without = draw_captions(bare.copy(), result, SYNTHETIC_LABELS)
    assert not np.array_equal(with_metres, without)


def test_without_instances_the_overlay_is_the_plain_frame_on_both_paths() -> None:
    """Without instances the overlay is the camera frame on the GPU and on the CPU, whatever else
    was computed; only draw_overlay (replay's images) falls back to the panoptic raster."""
    image = np.full((H, W, 3), 70, np.uint8)
    result = FrameResult(meta=FrameMeta.letterbox(H, W, 64, 96))
    result.instance_raster = np.zeros((H, W), np.uint16)
    result.panoptic_raster = np.full((H, W), 7, np.int32)
    result.segments = Segments(
        ids=np.array([7], np.int32),
        label_id=np.array([7], np.int32),
        isthing=np.array([False]),
        score=np.ones(1, np.float32),
        area=np.array([H * W], np.int64),
    )
    cpu = overlay_bgr(image, "bgr8", result, SYNTHETIC_LABELS, ALPHA)
    result.overlay = _gpu_path(image, "bgr8", result)
    gpu = overlay_bgr(image, "bgr8", result, SYNTHETIC_LABELS, ALPHA)
    np.testing.assert_array_equal(gpu, image)
    np.testing.assert_array_equal(cpu, image)
    result.overlay = None
    assert not np.array_equal(draw_overlay(image, result, SYNTHETIC_LABELS, ALPHA), image)


def _frame() -> np.ndarray:
    frame = np.zeros((120, 200, 3), np.uint8)
    frame[:] = np.linspace(30, 220, 200, dtype=np.uint8)[None, :, None]
    cv2.circle(frame, (60, 60), 35, (20, 40, 220), -1)
    return frame


def test_pipeline_draws_the_overlay_on_the_onnxruntime_backend(random_bundle: Path) -> None:
    """OutputSet(overlay=True) on ONNX Runtime: the backend renders none, the Pipeline draws it
    on the CPU with the options' alpha, the same picture whatever else is asked for."""
    frame = _frame()
    options = PostprocessOptions(score_threshold=0.0, overlay_alpha=ALPHA)
    backend_options = BackendOptions(threads=1)
    with Pipeline(random_bundle, "onnxruntime", options, backend_options) as pipeline:
        labels = pipeline.bundle.labels
        meta = FrameMeta.letterbox(120, 200, pipeline.bundle.input_h, pipeline.bundle.input_w)
        asked = OutputSet(instance=True, panoptic=False, semantic=False, overlay=True)
        item = BatchItem(frame, "bgr8", meta, asked)
        assert pipeline.backend.infer_batch([item], options)[0].overlay is None
        result = pipeline(frame, "bgr8", asked)
        assert result.instance_raster is not None and len(result.instances) > 0
        assert result.overlay.shape == (120, 200, 3) and result.overlay.dtype == np.uint8
        np.testing.assert_array_equal(
            result.overlay, draw_overlay(frame, result, labels, ALPHA, bgr=True)
        )
        for others in (OutputSet(False, False, False, True), OutputSet(False, True, True, True)):
            np.testing.assert_array_equal(pipeline(frame, "bgr8", others).overlay, result.overlay)
        assert pipeline(frame, "bgr8").overlay is None  # the default OutputSet asks for none


def test_overlay_alpha_is_checked_before_any_gpu_work(random_bundle: Path) -> None:
    """A bad blend weight is a ConfigError naming the range, even where TensorRT is missing."""
    with pytest.raises(ConfigError, match=r"overlay_alpha=1.5 must be in \[0, 1\]"):
        Pipeline(random_bundle, "tensorrt", PostprocessOptions(overlay_alpha=1.5))
