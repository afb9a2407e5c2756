"""Colour overlay of a FrameResult on its camera image (``FrameResult.overlay``, replay images).

``overlay_bgr`` makes the Pipeline's overlay: the instances only, on every backend (the CPU blend
here, or the TensorRT backend's device-rendered one), plus captions. ``draw_overlay`` (replay's
overlay images) shows instances when there are any, else panoptic segments, else the semantic
raster. The blend is a palette lookup over the id raster (no per-pixel Python), outlines are the
coloured pixels whose 4-neighbourhood holds another id, and captions are drawn with OpenCV per
instance by ``draw_captions``, the one caption function of both.
Instance colours are ``palette(...)[id]``; a row does not depend on the palette's length, so the
GPU overlay can keep one ``palette(MAX_QUERIES + 1)`` table on the device."""

from __future__ import annotations

import cv2
import numpy as np

from .image_formats import to_rgb
from .labels import LabelSet
from .palette import palette
from .structures import FrameResult

OUTLINE_COLOUR = (255, 255, 255)
TEXT_COLOUR = (255, 255, 255)
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def _caption_items(result: FrameResult, labels: LabelSet) -> list:
    """(x, y, caption, rgb colour) per instance, or none when the overlay shows no instances."""
    inst = result.instances
    if result.instance_raster is None or not len(inst):
        return []
    names = dict(zip(labels.ids, labels.names, strict=True))
    lut = palette(int(inst.ids.max()) + 1)
    return [
        (float(b[0]), float(b[1]), f"{names.get(int(lab), lab)} {s:.2f}", lut[int(i)])
        for i, lab, s, b in zip(inst.ids, inst.label_id, inst.score, inst.box, strict=True)
    ]


def _instance_index(result: FrameResult) -> tuple[np.ndarray, np.ndarray]:
    """(instance raster, RGB colour per instance id); all background when there are none."""
    ids = result.instances.ids
    return result.instance_raster, palette(int(ids.max()) + 1 if len(ids) else 1)


def _index_raster(result: FrameResult, labels: LabelSet) -> tuple[np.ndarray, np.ndarray]:
    """(index raster, colour LUT (RGB)) for what the overlay should show; index 0 = leave alone."""
    class_lut = palette(max(labels.ids) + 1)
    if result.instance_raster is not None and len(result.instances):
        return _instance_index(result)
    seg = result.segments
    if result.panoptic_raster is not None and len(seg):
        order = np.argsort(seg.ids, kind="stable")
        sorted_ids = seg.ids[order]
        raster = result.panoptic_raster
        pos = np.clip(np.searchsorted(sorted_ids, raster), 0, len(sorted_ids) - 1)
        index = np.where(sorted_ids[pos] == raster, pos + 1, 0)
        # things: one colour per segment; stuff: its class colour.
        seg_colours = np.where(
            seg.isthing[order, None],
            palette(len(seg) + 1)[1:],
            class_lut[seg.label_id[order]],
        )
        lut = np.concatenate([np.zeros((1, 3), np.uint8), seg_colours.astype(np.uint8)])
        return index, lut
    if result.semantic_raster is not None:
        return result.semantic_raster, class_lut
    return np.zeros((result.meta.src_h, result.meta.src_w), np.uint8), class_lut


def _check_frame(image: np.ndarray, result: FrameResult) -> None:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"overlay needs an HxWx3 uint8 image, got {image.shape} {image.dtype}")
    if image.shape[:2] != (result.meta.src_h, result.meta.src_w):
        raise ValueError(
            f"image {image.shape[:2]} is not the frame the result belongs to "
            f"({result.meta.src_h}x{result.meta.src_w})"
        )


def draw_captions(
    canvas: np.ndarray, result: FrameResult, labels: LabelSet, bgr: bool = True
) -> np.ndarray:
    """Draw the instances' class/score captions onto ``canvas`` in place and return it.

    Shared by ``draw_overlay`` and ``overlay_bgr`` (a device-rendered blend has no text).
    """
    _check_frame(canvas, result)
    scale = max(0.4, min(canvas.shape[:2]) / 800.0)
    thickness = max(1, round(scale * 1.5))
    for x, y, caption, colour in _caption_items(result, labels):
        (tw, th), base = cv2.getTextSize(caption, _FONT, scale, thickness)
        x0 = int(min(max(x, 0), max(canvas.shape[1] - tw, 0)))
        y0 = int(min(max(y, th + base), canvas.shape[0] - 1))
        fill = tuple(int(c) for c in (colour[::-1] if bgr else colour))
        cv2.rectangle(canvas, (x0, y0 - th - base), (x0 + tw, y0), fill, cv2.FILLED)
        cv2.putText(
            canvas, caption, (x0, y0 - base), _FONT, scale, TEXT_COLOUR, thickness, cv2.LINE_AA
        )
    return canvas


def outline_mask(index: np.ndarray) -> np.ndarray:
    """Pixels whose 4-neighbourhood holds another id: both sides of every region border."""
    edge = np.zeros(index.shape, bool)
    dx = index[:, :-1] != index[:, 1:]
    dy = index[:-1, :] != index[1:, :]
    edge[:, :-1] |= dx
    edge[:, 1:] |= dx
    edge[:-1, :] |= dy
    edge[1:, :] |= dy
    return edge


def _blend(image: np.ndarray, index: np.ndarray, lut: np.ndarray, alpha: float) -> np.ndarray:
    """Copy of ``image`` with ``lut[index]`` blended in where index > 0, outlines white; no text."""
    index = index.astype(np.intp, copy=False)
    colours = np.ascontiguousarray(lut)[index]
    fg = index > 0
    out = image.copy()
    blended = cv2.addWeighted(image, 1.0 - alpha, colours, alpha, 0.0)
    out[fg] = blended[fg]
    out[outline_mask(index) & fg] = OUTLINE_COLOUR
    return out


def draw_overlay(
    image: np.ndarray,
    result: FrameResult,
    labels: LabelSet,
    alpha: float = 0.5,
    bgr: bool = True,
) -> np.ndarray:
    """HxWx3 uint8 blend of ``image`` with the result's colours, outlines and captions.

    ``image`` is HxWx3 uint8 in BGR (``bgr=True``) or RGB order; the output uses the same order.
    Without instances it shows the panoptic, else the semantic raster (replay's overlay images).
    """
    _check_frame(image, result)
    index, lut = _index_raster(result, labels)
    if bgr:
        lut = lut[:, ::-1]
    return draw_captions(_blend(image, index, lut, alpha), result, labels, bgr)


def overlay_bgr(
    image: np.ndarray, encoding: str, result: FrameResult, labels: LabelSet, alpha: float
) -> np.ndarray:
    """The instance overlay of ``FrameResult.overlay``: bgr8 blend, outlines and captions.

    Takes the backend's device-rendered blend when there is one, else blends the instance raster
    over the camera frame (any supported encoding) on the CPU, the same picture. Instances only,
    so it does not depend on which other rasters were computed; ``alpha`` is the colour weight.
    """
    canvas = result.overlay
    if canvas is None:
        if result.instance_raster is None:
            raise ValueError("the overlay needs the instance raster; compute it with the overlay")
        bgr = image if encoding == "bgr8" else to_rgb(image, encoding)[..., ::-1]
        _check_frame(bgr, result)
        index, lut = _instance_index(result)
        canvas = _blend(bgr, index, lut[:, ::-1], alpha)
    return draw_captions(canvas, result, labels, bgr=True)
