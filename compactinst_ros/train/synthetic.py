"""Synthetic field / road scenes with exact COCO instance and COCO panoptic annotations.

Every scene is drawn from ``numpy.random.default_rng([seed, index])``, so a scene depends only
on the seed and its index (deterministic, and any subset can be regenerated). Stuff
(sky, vegetation, field, road) is painted as vectorised row/column masks; things (person,
vehicle, animal, bale) are drawn far-to-near with OpenCV (no anti-aliasing), so nearer objects
occlude farther ones and the panoptic id raster *is* the ground truth the image was painted from.

Layout written by :func:`generate`::

    OUT/images/000000.jpg       RGB scene (JPEG, quality 95)
    OUT/panoptic/000000.png     COCO panoptic PNG, id = R + 256 G + 256^2 B
    OUT/instances.json          COCO instances (things only, RLE masks)
    OUT/panoptic.json           COCO panoptic (segments_info per image)

Panoptic ids follow the runtime convention: stuff ``label_id``, things ``label_id * 1000 + k``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..errors import ConfigError
from ..labels import SYNTHETIC_LABELS, LabelSet
from ..sizes import parse_size

PERSON, VEHICLE, ANIMAL, BALE, FIELD, ROAD, SKY, VEGETATION = range(1, 9)
#: minimum visible pixels for an object to be kept (smaller ones are removed before painting)
MIN_AREA = 120
#: smallest image side the scene layout (horizon, perspective, object sizes) is drawn for
MIN_SIDE = 64
#: object height at the bottom image row, as a fraction of the image height
BASE_HEIGHT = {PERSON: 0.46, VEHICLE: 0.36, ANIMAL: 0.3, BALE: 0.24}
PALETTE = {
    "shirt": np.array(
        [[200, 30, 30], [30, 60, 200], [240, 140, 20], [120, 40, 160], [20, 150, 160]]
    ),
    "car": np.array(
        [[180, 20, 20], [20, 40, 150], [230, 230, 235], [160, 165, 170], [230, 200, 20]]
    ),
    "animal": np.array([[110, 60, 30], [30, 25, 25], [235, 230, 220], [160, 110, 60]]),
}


@dataclass(frozen=True)
class Scene:
    """One rendered scene: RGB image, panoptic id raster and its segments."""

    image: np.ndarray  # (H, W, 3) uint8 RGB
    panoptic: np.ndarray  # (H, W) int32 segment ids (0 = void, never present here)
    segments: list[dict]  # {"id", "category_id", "isthing"}


def _smooth_noise(rng: np.random.Generator, h: int, w: int, cells: int, amp: float) -> np.ndarray:
    """Low-frequency noise (H, W) from a small random grid, bilinearly upsampled."""
    grid = rng.normal(0.0, amp, (max(2, h // cells), max(2, w // cells))).astype(np.float32)
    return cv2.resize(grid, (w, h), interpolation=cv2.INTER_LINEAR)


def _paint_stuff(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Sky, tree line, field and (sometimes) a road in perspective; returns (rgb float, labels)."""
    yy = np.arange(h, dtype=np.float32)[:, None]
    xx = np.arange(w, dtype=np.float32)[None, :]
    horizon = h * rng.uniform(0.3, 0.45)
    labels = np.full((h, w), FIELD, np.int32)
    labels[yy[:, 0] < horizon] = SKY
    if rng.random() < 0.85:
        phase, freq = rng.uniform(0, 6.28, 2), rng.uniform(0.01, 0.05, 2)
        top = horizon - h * rng.uniform(0.04, 0.12) * (
            1.3 + 0.5 * np.sin(xx * freq[0] + phase[0]) + 0.3 * np.sin(xx * freq[1] * 3 + phase[1])
        )
        labels[(yy >= top) & (yy < horizon)] = VEGETATION
    if rng.random() < 0.65:
        vx = w * rng.uniform(0.25, 0.75)
        half_bottom = w * rng.uniform(0.18, 0.4)
        t = np.clip((yy - horizon) / (h - horizon), 0.0, None)
        centre = vx + t * w * rng.uniform(-0.3, 0.3)
        labels[(yy >= horizon) & (np.abs(xx - centre) < 2 + t * half_bottom)] = ROAD

    rgb = np.empty((h, w, 3), np.float32)
    sky_top, sky_bottom = np.array([70, 120, 210]), np.array([170, 200, 235])
    frac = np.clip(yy / max(horizon, 1.0), 0, 1)[..., None]
    sky = sky_top * (1 - frac) + sky_bottom * frac + rng.uniform(-15, 15, 3)
    field_base = np.array([150, 160, 70]) + rng.uniform(-25, 25, 3)
    stripes = 12 * np.sin(yy * rng.uniform(0.3, 0.6) + xx * rng.uniform(-0.2, 0.2))
    field = field_base + stripes[..., None] + _smooth_noise(rng, h, w, 16, 10)[..., None]
    veg_noise = _smooth_noise(rng, h, w, 6, 18)[..., None]
    veg = np.array([40, 85, 40]) + veg_noise * np.array([0.6, 1, 0.6])
    road_noise = _smooth_noise(rng, h, w, 24, 5)[..., None]
    road = np.array([95, 95, 100]) + rng.uniform(-15, 15) + road_noise
    for label, colour in ((SKY, sky), (FIELD, field), (VEGETATION, veg), (ROAD, road)):
        sel = labels == label
        rgb[sel] = np.broadcast_to(colour, (h, w, 3))[sel]
    return rgb, labels


def _draw_thing(rng: np.random.Generator, cls: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Local part mask (uint8, 0 = outside) and part colours (P, 3) for one object of ``cls``."""
    hh = max(height, 8)
    if cls == PERSON:
        w = max(int(hh * 0.42), 5)
        m = np.zeros((hh, w), np.uint8)
        head_r = max(hh // 9, 2)
        cv2.circle(m, (w // 2, head_r), head_r, 1, -1, cv2.LINE_8)
        torso = np.array([[w * 0.1, hh * 0.22], [w * 0.9, hh * 0.22], [w * 0.8, hh * 0.58],
                          [w * 0.2, hh * 0.58]], np.int32)
        cv2.fillPoly(m, [torso], 2, cv2.LINE_8)
        legw = max(int(w * 0.22), 1)
        cv2.rectangle(m, (int(w * 0.22), int(hh * 0.58)), (int(w * 0.22) + legw, hh - 1), 3, -1)
        cv2.rectangle(m, (int(w * 0.78) - legw, int(hh * 0.58)), (int(w * 0.78), hh - 1), 3, -1)
        colours = [(225, 180, 140), tuple(PALETTE["shirt"][rng.integers(5)]), (40, 40, 70)]
    elif cls == VEHICLE:
        w = max(int(hh * rng.uniform(1.6, 2.2)), 8)
        m = np.zeros((hh, w), np.uint8)
        cv2.rectangle(m, (0, int(hh * 0.4)), (w - 1, int(hh * 0.85)), 1, -1)
        cab = np.array([[w * 0.2, hh * 0.42], [w * 0.3, hh * 0.05], [w * 0.7, hh * 0.05],
                        [w * 0.82, hh * 0.42]], np.int32)
        cv2.fillPoly(m, [cab], 1, cv2.LINE_8)
        win = np.array([[w * 0.27, hh * 0.38], [w * 0.34, hh * 0.12], [w * 0.66, hh * 0.12],
                        [w * 0.75, hh * 0.38]], np.int32)
        cv2.fillPoly(m, [win], 2, cv2.LINE_8)
        r = max(int(hh * 0.17), 2)
        for cx in (int(w * 0.22), int(w * 0.78)):
            cv2.circle(m, (cx, hh - 1 - r), r, 3, -1, cv2.LINE_8)
        colours = [tuple(PALETTE["car"][rng.integers(5)]), (60, 80, 100), (20, 20, 20)]
    elif cls == ANIMAL:
        w = max(int(hh * rng.uniform(1.3, 1.6)), 8)
        m = np.zeros((hh, w), np.uint8)
        body_c = (int(w * 0.45), int(hh * 0.42))
        cv2.ellipse(m, body_c, (max(int(w * 0.33), 2), max(int(hh * 0.22), 2)), 0, 0, 360, 1, -1)
        head = (int(w * 0.85), int(hh * 0.25))
        cv2.ellipse(m, head, (max(int(w * 0.1), 1), max(int(hh * 0.13), 1)), 20, 0, 360, 1, -1)
        legw = max(int(w * 0.06), 1)
        for lx in (0.2, 0.32, 0.58, 0.7):
            x0 = int(w * lx)
            cv2.rectangle(m, (x0, int(hh * 0.55)), (x0 + legw, hh - 1), 2, -1)
        colour = tuple(PALETTE["animal"][rng.integers(4)])
        colours = [colour, tuple(int(c * 0.7) for c in colour)]
    else:
        round_bale = rng.random() < 0.6
        w = max(int(hh * (1.15 if round_bale else 1.7)), 6)
        m = np.zeros((hh, w), np.uint8)
        if round_bale:
            cv2.ellipse(m, (w // 2, hh // 2), (w // 2 - 1, hh // 2 - 1), 0, 0, 360, 1, -1)
            for k in (0.55, 0.3):
                cv2.ellipse(m, (w // 2, hh // 2), (max(int(w * k / 2), 1), max(int(hh * k / 2), 1)),
                            0, 0, 360, 2, max(hh // 24, 1))
        else:
            m[:] = 1
            m[:: max(hh // 5, 2)] = 2
        colours = [(215, 180, 70), (170, 135, 45)]
    return m, np.asarray(colours, np.float32)


def render_scene(seed: int, index: int, height: int, width: int) -> Scene:
    """Render scene ``index`` of ``seed`` at ``height`` x ``width`` (deterministic)."""
    rng = np.random.default_rng([seed, index])
    rgb, stuff = _paint_stuff(rng, height, width)
    horizon = int(np.argmax((stuff != SKY) & (stuff != VEGETATION), axis=0).min())
    n_things = int(rng.integers(1, 7))
    objects = []
    for _ in range(n_things):
        cls = int(rng.choice([PERSON, VEHICLE, ANIMAL, BALE], p=[0.3, 0.25, 0.25, 0.2]))
        bottom = int(rng.uniform(horizon + 0.22 * (height - horizon), height + 0.1 * height))
        depth = (bottom - horizon) / (height - horizon)
        obj_h = int(BASE_HEIGHT[cls] * height * depth * rng.uniform(0.85, 1.15))
        mask, colours = _draw_thing(rng, cls, obj_h)
        x0 = int(rng.integers(-mask.shape[1] // 4, width - 3 * mask.shape[1] // 4))
        if rng.random() < 0.5:
            mask = mask[:, ::-1]
        objects.append((bottom, cls, x0, bottom - mask.shape[0], mask, colours))
    objects.sort(key=lambda o: o[0])

    def rasterise(objs: list) -> np.ndarray:
        raster = np.zeros((height, width), np.int32)
        for i, (_, _, x0, y0, mask, _) in enumerate(objs, start=1):
            ys, xs = max(y0, 0), max(x0, 0)
            ye, xe = min(y0 + mask.shape[0], height), min(x0 + mask.shape[1], width)
            if ye <= ys or xe <= xs:
                continue
            local = mask[ys - y0 : ye - y0, xs - x0 : xe - x0] > 0
            raster[ys:ye, xs:xe][local] = i
        return raster

    raster = rasterise(objects)
    areas = np.bincount(raster.ravel(), minlength=len(objects) + 1)
    objects = [o for i, o in enumerate(objects, start=1) if areas[i] >= MIN_AREA]
    raster = rasterise(objects)  # removing objects only grows the others' visible areas

    texture = rng.normal(0, 6, (height, width, 1)).astype(np.float32)
    for i, (_, _, x0, y0, mask, colours) in enumerate(objects, start=1):
        ys, xs = max(y0, 0), max(x0, 0)
        ye, xe = min(y0 + mask.shape[0], height), min(x0 + mask.shape[1], width)
        if ye <= ys or xe <= xs:
            continue
        local = mask[ys - y0 : ye - y0, xs - x0 : xe - x0]
        sel = raster[ys:ye, xs:xe] == i
        shade = np.linspace(1.1, 0.85, ye - ys, dtype=np.float32)[:, None, None]
        painted = colours[np.maximum(local.astype(np.int64) - 1, 0)] * shade
        rgb[ys:ye, xs:xe][sel] = painted[sel]
    rgb += texture + rng.normal(0, 3, (height, width, 3)).astype(np.float32)
    image = np.clip(rgb, 0, 255).astype(np.uint8)

    panoptic = np.where(raster > 0, 0, stuff).astype(np.int32)
    segments = [
        {"id": label, "category_id": label, "isthing": False}
        for label in np.unique(stuff)
        if np.any(panoptic == label)
    ]
    per_label: dict[int, int] = {}
    for i, (_, cls, *_rest) in enumerate(objects, start=1):
        per_label[cls] = per_label.get(cls, 0) + 1
        seg_id = cls * 1000 + per_label[cls]
        panoptic[raster == i] = seg_id
        segments.append({"id": seg_id, "category_id": cls, "isthing": True})
    segments = [{**s, "id": int(s["id"]), "category_id": int(s["category_id"])} for s in segments]
    return Scene(image=image, panoptic=panoptic, segments=segments)


def id_to_rgb(ids: np.ndarray) -> np.ndarray:
    """COCO panoptic encoding: id -> (R, G, B) with id = R + 256 G + 256^2 B."""
    ids = ids.astype(np.uint32)
    return np.stack([ids & 255, (ids >> 8) & 255, (ids >> 16) & 255], axis=-1).astype(np.uint8)


def rgb_to_id(rgb: np.ndarray) -> np.ndarray:
    """COCO panoptic decoding: (H, W, 3) uint8 RGB -> (H, W) int32 ids."""
    rgb = rgb.astype(np.int32)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def _bbox(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    return [float(xs[0]), float(ys[0]), float(xs[-1] - xs[0] + 1), float(ys[-1] - ys[0] + 1)]


def coco_categories(labels: LabelSet) -> list[dict]:
    """COCO/COCO-panoptic category list for a label set (``isthing`` as 0/1)."""
    return [
        {"id": i, "name": n, "supercategory": "thing" if t else "stuff", "isthing": int(t)}
        for n, i, t in zip(labels.names, labels.ids, labels.isthing, strict=True)
    ]


def generate(out: str | Path, num: int, seed: int, height: int, width: int,
             progress: bool = True) -> dict:
    """Write ``num`` scenes with COCO instance + panoptic annotations under ``out``."""
    from pycocotools import mask as mask_utils

    if height < MIN_SIDE or width < MIN_SIDE:
        raise ConfigError(f"size {height}x{width} is too small for the synthetic scenes; use at "
                          f"least {MIN_SIDE}x{MIN_SIDE}")
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "panoptic").mkdir(parents=True, exist_ok=True)
    images, instances, pan_annos = [], [], []
    ann_id = 0
    start = time.perf_counter()
    for index in range(num):
        scene = render_scene(seed, index, height, width)
        name = f"{index:06d}"
        cv2.imwrite(str(out / "images" / f"{name}.jpg"), scene.image[..., ::-1],
                    [cv2.IMWRITE_JPEG_QUALITY, 95])
        cv2.imwrite(str(out / "panoptic" / f"{name}.png"), id_to_rgb(scene.panoptic)[..., ::-1])
        images.append({"id": index + 1, "file_name": f"{name}.jpg", "height": height,
                       "width": width})
        seg_info = []
        for seg in scene.segments:
            mask = scene.panoptic == seg["id"]
            area, box = int(mask.sum()), _bbox(mask)
            seg_info.append({"id": seg["id"], "category_id": seg["category_id"], "area": area,
                             "bbox": box, "iscrowd": 0})
            if seg["isthing"]:
                ann_id += 1
                rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
                rle["counts"] = str(rle["counts"], "ascii")
                instances.append({"id": ann_id, "image_id": index + 1,
                                  "category_id": seg["category_id"], "segmentation": rle,
                                  "area": area, "bbox": box, "iscrowd": 0})
        pan_annos.append({"image_id": index + 1, "file_name": f"{name}.png",
                          "segments_info": seg_info})
        if progress and ((index + 1) % 50 == 0 or index + 1 == num):
            rate = (index + 1) / max(time.perf_counter() - start, 1e-9)
            print(f"\rsynth: {index + 1}/{num} images  {rate:.0f} img/s  "
                  f"ETA {(num - index - 1) / rate:.0f} s", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    cats = coco_categories(SYNTHETIC_LABELS)
    info = {"description": f"compactinst synthetic scenes seed={seed}", "seed": seed}
    (out / "instances.json").write_text(json.dumps({
        "info": info, "images": images, "annotations": instances,
        "categories": [c for c in cats if c["isthing"]]}))
    (out / "panoptic.json").write_text(json.dumps({
        "info": info, "images": images, "annotations": pan_annos, "categories": cats}))
    return {"images": num, "instances": len(instances),
            "seconds": round(time.perf_counter() - start, 2)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst synth``."""
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num", type=int, default=1000, help="number of images")
    parser.add_argument("--seed", type=int, default=0, help="scene seed (held-out sets: another)")
    parser.add_argument("--size", default="256x384", help="image size HxW")


def run(args: argparse.Namespace) -> int:
    """Generate the data set and print a one-line summary."""
    if args.num < 1:
        raise ConfigError(f"--num {args.num}: need at least one image")
    h, w = parse_size(args.size)
    summary = generate(args.out, args.num, args.seed, h, w)
    print(f"wrote {summary['images']} images, {summary['instances']} instances to {args.out} "
          f"in {summary['seconds']} s")
    return 0
