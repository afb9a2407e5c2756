"""The numpy twin of the overlay kernels against compactinst_ros.overlay (the CPU overlay)."""

from __future__ import annotations

import numpy as np

from compactinst_ros import overlay as cpu_overlay
from compactinst_ros.gpu import twin
from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.structures import FrameMeta, FrameResult, Segments


def panoptic_result() -> FrameResult:
    """Two stuff bands and a thing square on a 60x90 frame."""
    meta = FrameMeta.letterbox(60, 90, 64, 128)
    raster = np.zeros((60, 90), np.int32)
    raster[:30] = 5
    raster[30:] = 6
    raster[10:25, 20:40] = 1001
    raster[50:, 80:] = 0
    ids = np.array([5, 1001, 6], np.int32)
    segments = Segments(
        ids=ids,
        label_id=np.array([5, 1, 6], np.int32),
        isthing=np.array([False, True, False]),
        score=np.ones(3, np.float32),
        area=np.array([(raster == i).sum() for i in ids], np.int64),
    )
    return FrameResult(meta=meta, segments=segments, panoptic_raster=raster)


def test_overlay_twin_matches_cpu_overlay() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
    result = panoptic_result()
    cpu = cpu_overlay.draw_overlay(image, result, SYNTHETIC_LABELS, alpha=0.4, bgr=False)
    _, lut = cpu_overlay._index_raster(result, SYNTHETIC_LABELS)
    gpu = twin.overlay(
        image, "rgb8", result.panoptic_raster, lut, 0.4, sorted_ids=np.sort(result.segments.ids)
    )
    diff = np.abs(gpu.astype(int) - cpu.astype(int))
    assert diff.max() <= 1  # cv2.addWeighted's float order may round the other way
    assert (diff > 0).mean() < 0.01
    assert (gpu[50:, 80:] == image[50:, 80:]).all()  # void stays untouched


def test_overlay_twin_instance_ids_and_bgr_input() -> None:
    """Instance ids index the LUT directly; a bgr8 frame is read as RGB."""
    image = np.zeros((20, 30, 3), np.uint8)
    image[..., 0] = 200  # blue in BGR
    ids = np.zeros((20, 30), np.uint16)
    ids[5:15, 5:15] = 1
    lut = np.array([[0, 0, 0], [0, 255, 0]], np.uint8)
    out = twin.overlay(image, "bgr8", ids, lut, 0.5)
    assert out[0, 0].tolist() == [0, 0, 200]
    assert out[10, 10].tolist() == [0, 128, 100]
    assert out[5, 10].tolist() == [255, 255, 255]  # outline
