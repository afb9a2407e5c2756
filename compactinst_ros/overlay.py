"""Colour overlay of a FrameResult on its camera image (for ~/overlay and ``compactinst infer``).

Instances are drawn when there are any, else panoptic segments, else the semantic raster. The
blend is a palette lookup over the id raster (no per-pixel Python), outlines are the coloured pixels
whose 4-neighbourhood holds another id, and labels are drawn with OpenCV per instance.
"""

from __future__ import annotations

import cv2
import numpy as np

from .labels import LabelSet
from .structures import FrameResult

OUTLINE_COLOUR = (255, 255, 255)
TEXT_COLOUR = (255, 255, 255)
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def palette(n: int) -> np.ndarray:
    """(n, 3) uint8 RGB colours, well separated (golden-ratio hues); row 0 is black (background)."""
    hues = (np.arange(n) * 0.618033988749895 * 180.0) % 180.0
    hsv = np.stack(
        [hues, np.full(n, 200.0), np.where(np.arange(n) % 2, 255.0, 210.0)], axis=-1
    ).astype(np.uint8)
    rgb = cv2.cvtColor(hsv[None], cv2.COLOR_HSV2RGB)[0]
    rgb[0] = 0
    return rgb


def _index_raster(result: FrameResult, labels: LabelSet) -> tuple[np.ndarray, np.ndarray, list]:
    """(index raster, colour LUT (RGB), text items) for what the overlay should show.

    Index 0 means "leave the pixel alone"; text items are (x, y, caption, rgb colour).
    """
    names = dict(zip(labels.ids, labels.names, strict=True))
    class_lut = palette(max(labels.ids) + 1)
    inst = result.instances
    if result.instance_raster is not None and len(inst):
        lut = palette(int(inst.ids.max()) + 1)
        texts = [
            (float(b[0]), float(b[1]), f"{names.get(int(lab), lab)} {s:.2f}", lut[int(i)])
            for i, lab, s, b in zip(inst.ids, inst.label_id, inst.score, inst.box, strict=True)
        ]
        return result.instance_raster, lut, texts
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
        return index, lut, []
    if result.semantic_raster is not None:
        return result.semantic_raster, class_lut, []
    return np.zeros((result.meta.src_h, result.meta.src_w), np.uint8), class_lut, []


def draw_overlay(
    image: np.ndarray,
    result: FrameResult,
    labels: LabelSet,
    alpha: float = 0.5,
    bgr: bool = True,
) -> np.ndarray:
    """HxWx3 uint8 blend of ``image`` with the result's colours, outlines and captions.

    ``image`` is HxWx3 uint8 in BGR (``bgr=True``) or RGB order; the output uses the same order.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"overlay needs an HxWx3 uint8 image, got {image.shape} {image.dtype}")
    if image.shape[:2] != (result.meta.src_h, result.meta.src_w):
        raise ValueError(
            f"image {image.shape[:2]} is not the frame the result belongs to "
            f"({result.meta.src_h}x{result.meta.src_w})"
        )
    index, lut, texts = _index_raster(result, labels)
    if bgr:
        lut = lut[:, ::-1]
    lut = np.ascontiguousarray(lut)
    index = index.astype(np.intp, copy=False)
    colours = lut[index]
    fg = index > 0
    out = image.copy()
    blended = cv2.addWeighted(image, 1.0 - alpha, colours, alpha, 0.0)
    out[fg] = blended[fg]

    edge = np.zeros(index.shape, bool)
    dx = index[:, :-1] != index[:, 1:]
    dy = index[:-1, :] != index[1:, :]
    edge[:, :-1] |= dx
    edge[:, 1:] |= dx
    edge[:-1, :] |= dy
    edge[1:, :] |= dy
    out[edge & fg] = OUTLINE_COLOUR

    scale = max(0.4, min(image.shape[:2]) / 800.0)
    thickness = max(1, round(scale * 1.5))
    for x, y, caption, colour in texts:
        (tw, th), base = cv2.getTextSize(caption, _FONT, scale, thickness)
        x0 = int(min(max(x, 0), max(image.shape[1] - tw, 0)))
        y0 = int(min(max(y, th + base), image.shape[0] - 1))
        fill = tuple(int(c) for c in (colour[::-1] if bgr else colour))
        cv2.rectangle(out, (x0, y0 - th - base), (x0 + tw, y0), fill, cv2.FILLED)
        cv2.putText(
            out, caption, (x0, y0 - base), _FONT, scale, TEXT_COLOUR, thickness, cv2.LINE_AA
        )
    return out
