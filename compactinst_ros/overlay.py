"""Colour overlay of a FrameResult on its camera image (``FrameResult.overlay``, replay images).

``overlay_bgr`` makes the Pipeline's overlay: the instances only, on every backend (the CPU blend
here, or the TensorRT backend's device-rendered one), plus captions. ``draw_overlay`` (replay's
overlay images) shows instances when there are any, else panoptic segments, else the semantic
raster. The blend is a palette lookup over the id raster (no per-pixel Python), outlines are the
coloured pixels whose 4-neighbourhood holds another id, and captions are drawn with OpenCV per
instance by ``draw_captions``, the one caption function of both.
Instance colours are ``palette_colours(id)``: with tracking the id is the track id, so an object
keeps its colour from frame to frame; a raster of per-frame ids is drawn through an
``id_colours`` table (the GPU overlay's table too).

``panoptic_color`` and ``semantic_color`` are the colour images of the rasters for viewers that
cannot show 32SC1 or unnormalised label ids (rviz2): a fixed colour per class, things shaded
apart, bgr8, made with OpenCV's table lookups (no per-pixel Python)."""

from __future__ import annotations

import cv2
import numpy as np

from .image_formats import to_rgb
from .labels import LabelSet
from .palette import id_colours, palette, palette_colours, shaded
from .structures import FrameResult, Segments

OUTLINE_COLOUR = (255, 255, 255)
TEXT_COLOUR = (255, 255, 255)
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def _caption_items(
    result: FrameResult, labels: LabelSet, distances: np.ndarray | None = None
) -> list:
    """(x, y, caption, rgb colour) per instance, or none when the overlay shows no instances.
    A finite ``distances[i]`` (metres, row i of the table) is added to instance i's caption."""
    inst = result.instances
    if result.instance_raster is None or not len(inst):
        return []
    names = dict(zip(labels.ids, labels.names, strict=True))
    colours = palette_colours(inst.ids)
    metres = np.full(len(inst), np.nan) if distances is None else np.asarray(distances, float)
    return [
        (
            float(b[0]),
            float(b[1]),
            f"{names.get(int(lab), lab)} {s:.2f}" + (f" {d:.1f} m" if np.isfinite(d) else ""),
            c,
        )
        for lab, s, b, c, d in zip(
            inst.label_id, inst.score, inst.box, colours, metres, strict=True
        )
    ]


def _instance_index(result: FrameResult) -> tuple[np.ndarray, np.ndarray]:
    """(instance raster, RGB colour per instance id); all background when there are none."""
    ids = result.instances.ids
    return result.instance_raster, id_colours(ids, ids)


def value_index(raster: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Raster of ``i + 1`` where ``raster == values[i]``, 0 elsewhere (``values`` unique).

    A table over 0..max(values) taken with ``np.take`` when that range is small (about 3x faster
    than a binary search at 1080p), else ``np.searchsorted``. uint8 up to 255 values.
    """
    values = np.asarray(values, np.int64)
    dtype = np.uint8 if values.size < 256 else np.int32
    if not values.size:
        return np.zeros(raster.shape, dtype)
    if values.min() >= 0 and values.max() < _INDEX_TABLE_LIMIT:
        table = np.zeros(int(values.max()) + 2, dtype)  # the last row: every larger value
        table[values] = np.arange(1, values.size + 1)
        return np.take(table, raster, mode="clip")  # clip: negative values to row 0
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    pos = np.clip(np.searchsorted(ordered, raster), 0, values.size - 1)
    return np.where(ordered[pos] == raster, order[pos] + 1, 0).astype(dtype)


#: largest value range ``value_index`` turns into a table (4 MB of int32)
_INDEX_TABLE_LIMIT = 1 << 20


def _index_raster(result: FrameResult, labels: LabelSet) -> tuple[np.ndarray, np.ndarray]:
    """(index raster, colour LUT (RGB)) for what the overlay should show; index 0 = leave alone."""
    class_lut = class_colours(labels)
    if result.instance_raster is not None and len(result.instances):
        return _instance_index(result)
    seg = result.segments
    if result.panoptic_raster is not None and len(seg):
        order = np.argsort(seg.ids, kind="stable")
        index = value_index(result.panoptic_raster, seg.ids[order])
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


def _apart(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two caption boxes (x0, bottom y0, width, height; pixels inclusive) share no pixel."""
    (ax, ay, aw, ah), (bx, by, bw, bh) = a, b
    return ax > bx + bw or bx > ax + aw or ay - ah > by or by - bh > ay


def place_captions(
    anchors: list[tuple[float, float]], sizes: list[tuple[int, int]], height: int, width: int
) -> list[tuple[int, int]]:
    """Bottom-left corner of each caption box (``sizes``: width, height): inside the image, at
    its box's top-left corner where free, else the nearest free row above or below; captions
    come in priority (score) order and the later one moves. A box that finds no free row keeps
    its anchor (overlapping beats vanishing)."""
    placed: list[tuple[int, int, int, int]] = []
    for (x, y), (tw, h) in zip(anchors, sizes, strict=True):
        x0 = int(min(max(x, 0), max(width - 1 - tw, 0)))
        top = int(min(max(y, h), height - 1))
        steps = (k * (h + 1) for n in range(1, 2 * len(anchors) + 1) for k in (-n, n))
        rows = [top, *(r for r in (top + d for d in steps) if h <= r <= height - 1)]
        y0 = next((r for r in rows if all(_apart((x0, r, tw, h), p) for p in placed)), top)
        placed.append((x0, y0, tw, h))
    return [(x0, y0) for x0, y0, _, _ in placed]


def draw_captions(
    canvas: np.ndarray,
    result: FrameResult,
    labels: LabelSet,
    bgr: bool = True,
    distances: np.ndarray | None = None,
) -> np.ndarray:
    """Draw the instances' class/score captions onto ``canvas`` in place and return it: each
    inside the image (a caption wider than the image is drawn smaller) and none on another.
    ``distances`` (metres per table row, NaN for none) adds "<d> m" to the captions: the node
    lifts a frame in 3-D after inference, then captions its overlay.

    Shared by ``draw_overlay`` and ``overlay_bgr`` (a device-rendered blend has no text).
    """
    _check_frame(canvas, result)
    height, width = canvas.shape[:2]
    base_scale = max(0.4, min(height, width) / 800.0)
    thickness = max(1, round(base_scale * 1.5))
    items, fonts, sizes = _caption_items(result, labels, distances), [], []
    for _, _, caption, _ in items:
        scale = base_scale
        (tw, th), base = cv2.getTextSize(caption, _FONT, scale, thickness)
        if tw > width:
            scale *= width / tw
            (tw, th), base = cv2.getTextSize(caption, _FONT, scale, thickness)
        fonts.append((scale, base))
        sizes.append((tw, th + base))
    corners = place_captions([(x, y) for x, y, _, _ in items], sizes, height, width)
    for (_, _, caption, colour), (scale, base), (tw, h), (x0, y0) in zip(
        items, fonts, sizes, corners, strict=True
    ):
        fill = tuple(int(c) for c in (colour[::-1] if bgr else colour))
        cv2.rectangle(canvas, (x0, y0 - h), (x0 + tw, y0), fill, cv2.FILLED)
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
    image: np.ndarray,
    encoding: str,
    result: FrameResult,
    labels: LabelSet,
    alpha: float,
    colours: np.ndarray | None = None,
    captions: bool = True,
) -> np.ndarray:
    """The instance overlay of ``FrameResult.overlay``: bgr8 blend, outlines and, unless
    ``captions`` is False (the caller draws them later with ``draw_captions``), captions.

    Takes the backend's device-rendered blend when there is one, else blends the instance raster
    over the camera frame (any supported encoding) on the CPU, the same picture. Instances only,
    so it does not depend on which other rasters were computed; ``alpha`` is the colour weight.
    ``colours`` (RGB row per raster value, ``id_colours``) draws a raster whose values are not
    the table's ids (per-frame ids under track-id colours); default: colour by raster value.
    """
    canvas = result.overlay
    if canvas is None:
        if result.instance_raster is None:
            raise ValueError("the overlay needs the instance raster; compute it with the overlay")
        bgr = image if encoding == "bgr8" else to_rgb(image, encoding)[..., ::-1]
        _check_frame(bgr, result)
        index, lut = _instance_index(result)
        if colours is not None:
            lut = colours
        canvas = _blend(bgr, index, lut[:, ::-1], alpha)
    return draw_captions(canvas, result, labels, bgr=True) if captions else canvas


def _lookup_bgr(index: np.ndarray, rgb_table: np.ndarray) -> np.ndarray:
    """HxWx3 bgr8 ``rgb_table[index]`` (row 0 black): ``cv2.applyColorMap``'s table lookup for
    uint8 indices (about 15x faster than numpy's gather), ``np.take`` beyond."""
    bgr = np.ascontiguousarray(rgb_table[:, ::-1])
    if index.dtype == np.uint8:
        table = np.zeros((256, 1, 3), np.uint8)
        table[: min(len(bgr), 256), 0] = bgr[:256]
        return cv2.applyColorMap(index, table)
    return np.take(bgr, index, axis=0, mode="clip")


def class_colours(labels: LabelSet) -> np.ndarray:
    """(max label id + 1, 3) RGB colour of each label id: the one class palette of every image."""
    return palette(max(labels.ids) + 1)


def semantic_color(result: FrameResult, labels: LabelSet) -> np.ndarray | None:
    """bgr8 image of the semantic raster, one fixed colour per class (void black); None if the
    raster was not computed."""
    raster = result.semantic_raster
    if raster is None:
        return None
    return _lookup_bgr(raster, class_colours(labels))


def panoptic_color(result: FrameResult, labels: LabelSet) -> np.ndarray | None:
    """bgr8 image of the panoptic raster: stuff in its class colour, the k-th thing of a class in
    that colour's ``SHADES`` shade, void black; None if the raster was not computed."""
    raster = result.panoptic_raster
    if raster is None:
        return None
    seg: Segments = result.segments
    classes = class_colours(labels)
    label = np.clip(seg.label_id, 0, len(classes) - 1)
    colours = np.where(seg.isthing[:, None], shaded(classes[label], seg.ids % 1000), classes[label])
    table = np.concatenate([np.zeros((1, 3), np.uint8), colours.astype(np.uint8)])
    return _lookup_bgr(value_index(raster, seg.ids), table)
