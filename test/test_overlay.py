"""Overlay: palette blend over the instance (or panoptic/semantic) raster, outlines, captions."""

import numpy as np
import pytest

from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.overlay import _apart, draw_overlay, place_captions
from compactinst_ros.palette import palette, palette_colours
from compactinst_ros.structures import FrameMeta, FrameResult, Instances, Segments

H, W = 120, 200


def _result(instances: bool = True, panoptic: bool = False) -> FrameResult:
    meta = FrameMeta.letterbox(H, W, 64, 96)
    result = FrameResult(meta=meta)
    if instances:
        raster = np.zeros((H, W), np.uint16)
        raster[10:30, 10:40] = 1
        raster[70:110, 120:190] = 2
        result.instance_raster = raster
        result.instances = Instances(
            ids=np.array([1, 2], np.uint16),
            class_index=np.array([0, 1], np.int32),
            label_id=np.array([1, 2], np.int32),
            score=np.array([0.9, 0.6], np.float32),
            box=np.array([[10, 10, 40, 30], [120, 70, 190, 110]], np.float32),
            area=np.array([600, 500], np.int64),
        )
    if panoptic:
        pan = np.zeros((H, W), np.int32)
        pan[:20] = 7  # sky (stuff)
        pan[40:, :30] = 1001  # person #1
        result.panoptic_raster = pan
        result.segments = Segments(
            ids=np.array([1001, 7], np.int32),
            label_id=np.array([1, 7], np.int32),
            isthing=np.array([True, False]),
            score=np.array([0.9, 0.8], np.float32),
            area=np.array([1200, 1600], np.int64),
        )
    return result


def test_palette_is_distinct_and_background_black() -> None:
    lut = palette(64)
    assert lut.shape == (64, 3) and lut.dtype == np.uint8
    assert (lut[0] == 0).all()
    assert len({tuple(c) for c in lut[1:]}) == 63


def test_instances_are_blended_background_untouched() -> None:
    image = np.full((H, W, 3), 100, np.uint8)
    out = draw_overlay(image, _result(), SYNTHETIC_LABELS, alpha=0.5, bgr=False)
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0:5, 0:5], image[0:5, 0:5])  # background
    expected = np.round(0.5 * 100 + 0.5 * palette(3)[2].astype(float))
    np.testing.assert_allclose(out[90, 150], expected, atol=1)  # inside instance 2, off the text
    assert not np.array_equal(out[90, 150], out[20, 25])  # two instances, two colours
    assert (out[29, 20] == 255).all() and (out[20, 10] == 255).all()  # bottom and left outline
    np.testing.assert_array_equal(out[20, 9], image[20, 9])  # outline stays inside the instance
    assert (image == 100).all()  # input not modified


def test_bgr_flag_swaps_channels() -> None:
    image = np.full((H, W, 3), 100, np.uint8)
    rgb = draw_overlay(image, _result(), SYNTHETIC_LABELS, bgr=False)
    bgr = draw_overlay(image, _result(), SYNTHETIC_LABELS, bgr=True)
    np.testing.assert_array_equal(rgb[90, 150], bgr[90, 150, ::-1])


def test_captions_are_drawn_at_boxes() -> None:
    image = np.zeros((H, W, 3), np.uint8)
    result = _result()
    plain = draw_overlay(image, result, SYNTHETIC_LABELS, alpha=0.0)
    # alpha 0 leaves only outlines and captions; the caption box sits above instance 1's box
    assert plain[:10, 10:40].any()


def test_captions_stay_inside_and_apart() -> None:
    # three boxes at one corner, one at the bottom-right edge, one caption wider than the image
    anchors = [(5.0, 5.0), (6.0, 4.0), (5.0, 8.0), (195.0, 119.0), (0.0, 60.0)]
    sizes = [(60, 14), (60, 14), (60, 14), (60, 14), (199, 14)]
    corners = place_captions(anchors, sizes, H, W)
    boxes = [(x, y, w, h) for (x, y), (w, h) in zip(corners, sizes, strict=True)]
    for x, y, w, h in boxes:
        assert x >= 0 and x + w <= W - 1 and y - h >= 0 and y <= H - 1
    for i, a in enumerate(boxes):
        assert all(_apart(a, b) for b in boxes[i + 1 :]), boxes
    assert corners[0] == (5, 14)  # the first (highest score) stays at its box
    assert not _apart((0, 14, 10, 14), (5, 20, 10, 14))  # the check can fail


def test_drawn_captions_of_crowded_instances_do_not_cover_each_other() -> None:
    result = _result()
    result.instances.box[1] = result.instances.box[0]  # both captions anchored at one corner
    out = draw_overlay(np.zeros((H, W, 3), np.uint8), result, SYNTHETIC_LABELS, 0.0, bgr=False)
    first, second = palette_colours(result.instances.ids)
    # above row 10 no outline is drawn, and instance 2's own outline starts at row 70: these
    # pixels are caption fills, each caption's mostly uncovered
    assert (out[:10] == first).all(axis=-1).sum() > 200
    assert (out[:60] == second).all(axis=-1).sum() > 200


def test_panoptic_used_when_no_instances() -> None:
    image = np.full((H, W, 3), 50, np.uint8)
    out = draw_overlay(image, _result(instances=False, panoptic=True), SYNTHETIC_LABELS, bgr=False)
    assert not np.array_equal(out[5, 5], image[5, 5])  # sky segment
    assert not np.array_equal(out[50, 10], image[50, 10])  # person segment
    np.testing.assert_array_equal(out[30, 60], image[30, 60])  # void


def test_empty_result_returns_copy() -> None:
    image = np.full((H, W, 3), 7, np.uint8)
    out = draw_overlay(image, _result(instances=False), SYNTHETIC_LABELS)
    np.testing.assert_array_equal(out, image)
    assert out is not image


def test_wrong_image_is_refused() -> None:
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        draw_overlay(np.zeros((H, W), np.uint8), _result(), SYNTHETIC_LABELS)
    with pytest.raises(ValueError, match="not the frame"):
        draw_overlay(np.zeros((H + 1, W, 3), np.uint8), _result(), SYNTHETIC_LABELS)
