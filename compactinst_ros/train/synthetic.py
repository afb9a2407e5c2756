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

With ``--bag`` (:func:`generate_bag`) OUT/bag is a rosbag2 (mcap) of the scenes as
``sensor_msgs/Image`` frames at ``--fps`` and every GT image carries its frame's ``stamp_ns``.
With several ``--cameras`` each camera has its own topic ``/<name>/image_raw``, frame_id
``<name>`` and scenes (camera k draws those of seed + k); its files are
``OUT/images/<name>/``, ``OUT/panoptic/<name>/``, and its GT images carry ``"camera": <name>``
in the one instances.json / panoptic.json (ids unique over the cameras).

Panoptic ids follow the runtime convention: stuff ``label_id``, things ``label_id * 1000 + k``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np

from ..coco import encode_rle, id_to_rgb
from ..errors import ConfigError
from ..labels import SYNTHETIC_LABELS, LabelSet
from ..progress import Progress
from ..sizes import parse_size
from . import synthetic_depth
from .scene import (
    ANIMAL,
    BALE,
    FIELD,
    PERSON,
    ROAD,
    SKY,
    VEGETATION,
    VEHICLE,
    Scene,
    camera_topic,
)

#: minimum visible pixels for an object to be kept (smaller ones are removed before painting)
MIN_AREA = 120
#: smallest image side the scene layout (horizon, perspective, object sizes) is drawn for
MIN_SIDE = 64
#: sequence track ids are video_id * TRACKS_PER_VIDEO + the object's number in its video
TRACKS_PER_VIDEO = 1000
#: header stamp of the first frame of a synthetic bag of seed 0 (same parameters, same bag)
BAG_T0_NS = 1_700_000_000 * 1_000_000_000
#: each seed's bag starts this much later (about 2.8 h, room for 100 000 frames at 10 Hz), so
#: that drives of different seeds never share stamps: a manifest that pairs a drive with another
#: drive's GT then matches no frame
SEED_START_STEP_NS = 10_000 * 1_000_000_000
#: seeds start over after this many steps: a header stamp's seconds are an int32, and
#: 1700000000 s + 40000 steps stays below 2**31 s
SEED_START_SLOTS = 40_000
#: the camera of a one-camera bag (its topic is /camera/image_raw)
SINGLE_CAMERA = "camera"
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


def bag_start_ns(seed: int) -> int:
    """Header stamp of the first frame of the synthetic bag of ``seed``: seeds that differ by
    less than SEED_START_SLOTS never share a stamp, and every stamp fits a ROS header."""
    return BAG_T0_NS + (seed % SEED_START_SLOTS) * SEED_START_STEP_NS


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
        torso = np.array(
            [
                [w * 0.1, hh * 0.22],
                [w * 0.9, hh * 0.22],
                [w * 0.8, hh * 0.58],
                [w * 0.2, hh * 0.58],
            ],
            np.int32,
        )
        cv2.fillPoly(m, [torso], 2, cv2.LINE_8)
        legw = max(int(w * 0.22), 1)
        cv2.rectangle(m, (int(w * 0.22), int(hh * 0.58)), (int(w * 0.22) + legw, hh - 1), 3, -1)
        cv2.rectangle(m, (int(w * 0.78) - legw, int(hh * 0.58)), (int(w * 0.78), hh - 1), 3, -1)
        colours = [(225, 180, 140), tuple(PALETTE["shirt"][rng.integers(5)]), (40, 40, 70)]
    elif cls == VEHICLE:
        w = max(int(hh * rng.uniform(1.6, 2.2)), 8)
        m = np.zeros((hh, w), np.uint8)
        cv2.rectangle(m, (0, int(hh * 0.4)), (w - 1, int(hh * 0.85)), 1, -1)
        cab = np.array(
            [
                [w * 0.2, hh * 0.42],
                [w * 0.3, hh * 0.05],
                [w * 0.7, hh * 0.05],
                [w * 0.82, hh * 0.42],
            ],
            np.int32,
        )
        cv2.fillPoly(m, [cab], 1, cv2.LINE_8)
        win = np.array(
            [
                [w * 0.27, hh * 0.38],
                [w * 0.34, hh * 0.12],
                [w * 0.66, hh * 0.12],
                [w * 0.75, hh * 0.38],
            ],
            np.int32,
        )
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
                cv2.ellipse(
                    m,
                    (w // 2, hh // 2),
                    (max(int(w * k / 2), 1), max(int(hh * k / 2), 1)),
                    0,
                    0,
                    360,
                    2,
                    max(hh // 24, 1),
                )
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
    return _composite(rng, rgb, stuff, objects)[0]


def _rasterise(objects: list, height: int, width: int) -> np.ndarray:
    """Object index raster (1-based, 0 = none) of objects listed far to near (nearer wins)."""
    raster = np.zeros((height, width), np.int32)
    for i, (_, _, x0, y0, mask, _) in enumerate(objects, start=1):
        ys, xs = max(y0, 0), max(x0, 0)
        ye, xe = min(y0 + mask.shape[0], height), min(x0 + mask.shape[1], width)
        if ye <= ys or xe <= xs:
            continue
        local = mask[ys - y0 : ye - y0, xs - x0 : xe - x0] > 0
        raster[ys:ye, xs:xe][local] = i
    return raster


def _composite(
    rng: np.random.Generator, rgb: np.ndarray, stuff: np.ndarray, objects: list
) -> tuple[Scene, list[int]]:
    """Paint ``objects`` (bottom, cls, x0, y0, mask, colours; far to near) over the stuff.

    Objects with fewer than MIN_AREA visible pixels are dropped before painting. Returns the
    scene and, per thing segment in order, the index of its object in ``objects``.
    """
    height, width = stuff.shape
    raster = _rasterise(objects, height, width)
    areas = np.bincount(raster.ravel(), minlength=len(objects) + 1)
    kept = [i for i in range(len(objects)) if areas[i + 1] >= MIN_AREA]
    objects = [objects[i] for i in kept]
    raster = _rasterise(objects, height, width)  # removing objects only grows the others' areas

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
    contact_rows = {}
    for i, (bottom, cls, *_rest) in enumerate(objects, start=1):
        per_label[cls] = per_label.get(cls, 0) + 1
        seg_id = cls * 1000 + per_label[cls]
        panoptic[raster == i] = seg_id
        segments.append({"id": seg_id, "category_id": cls, "isthing": True})
        contact_rows[seg_id] = int(bottom) - 1
    segments = [{**s, "id": int(s["id"]), "category_id": int(s["category_id"])} for s in segments]
    horizon = int(np.argmax((stuff != SKY) & (stuff != VEGETATION), axis=0).min())
    scene = Scene(image, panoptic, segments, horizon, contact_rows)
    return scene, kept


def _moving_object(
    rng: np.random.Generator,
    cls: int,
    role: str,
    horizon: int,
    height: int,
    width: int,
    frames: int,
) -> tuple:
    """(bottom, cls, left x at frame 0, x step per frame, mask, colours) of one moving object.

    Speeds are 4-12 % of the object's width per frame, so consecutive masks overlap well.
    ``role``: "right"/"left" cross the image centre region mid-sequence in that direction,
    "enter" starts just outside an edge and moves in, "leave" starts at an edge moving out,
    "free" is placed at random (bales stand still).
    """
    bottom = int(rng.uniform(horizon + 0.22 * (height - horizon), height + 0.1 * height))
    depth = (bottom - horizon) / (height - horizon)
    obj_h = int(BASE_HEIGHT[cls] * height * depth * rng.uniform(0.85, 1.15))
    mask, colours = _draw_thing(rng, cls, obj_h)
    w = mask.shape[1]
    speed = 0.0 if cls == BALE else w * rng.uniform(0.04, 0.12)
    direction = {"right": 1, "left": -1}.get(role, 1 if rng.random() < 0.5 else -1)
    if role in ("right", "left"):
        meet = width * rng.uniform(0.35, 0.65)
        x_start = meet - w / 2 - direction * speed * (frames - 1) / 2
    elif role == "enter":
        x_start = -w if direction > 0 else width
    elif role == "leave":
        x_start = width - 1.1 * w if direction > 0 else 0.1 * w
    else:
        x_start = rng.uniform(-w / 4, width - 3 * w / 4)
    if direction < 0:
        mask = mask[:, ::-1]
    return bottom, cls, float(x_start), float(direction * speed), mask, colours


def render_sequence(seed: int, index: int, frames: int, height: int, width: int) -> list[Scene]:
    """Render sequence ``index`` of ``seed``: ``frames`` scenes of one place with moving things.

    A static camera over one stuff layout; two objects cross each other mid-sequence, one enters
    through an image edge, one leaves through one, the rest move or stand at random. Each thing
    segment carries ``"track_id"``: its object's number in the sequence (1, 2, ...), the same in
    every frame where it is visible (MIN_AREA pixels or more). Deterministic.
    """
    if frames < 1:
        raise ConfigError(f"a sequence needs at least one frame, got {frames}")
    rng = np.random.default_rng([seed, index, frames])
    rgb, stuff = _paint_stuff(rng, height, width)
    horizon = int(np.argmax((stuff != SKY) & (stuff != VEGETATION), axis=0).min())
    roles = ["right", "left", "enter", "leave"] + ["free"] * int(rng.integers(0, 3))
    movers = []
    for role in roles:
        classes = [PERSON, VEHICLE, ANIMAL] + ([BALE] if role == "free" else [])
        cls = int(rng.choice(classes))
        movers.append(_moving_object(rng, cls, role, horizon, height, width, frames))
    order = sorted(range(len(movers)), key=lambda k: movers[k][0])  # far to near
    scenes = []
    for frame in range(frames):
        objects = []
        for k in order:
            bottom, cls, x_start, step, mask, colours = movers[k]
            x0 = round(x_start + step * frame)
            objects.append((bottom, cls, x0, bottom - mask.shape[0], mask, colours))
        scene, kept = _composite(rng, rgb.copy(), stuff, objects)
        things = iter(order[i] + 1 for i in kept)
        segments = [{**s, "track_id": next(things)} if s["isthing"] else s for s in scene.segments]
        scenes.append(dataclasses.replace(scene, segments=segments))
    return scenes


def _bbox(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    return [float(xs[0]), float(ys[0]), float(xs[-1] - xs[0] + 1), float(ys[-1] - ys[0] + 1)]


def coco_categories(labels: LabelSet) -> list[dict]:
    """COCO/COCO-panoptic category list for a label set (``isthing`` as 0/1)."""
    return [
        {"id": i, "name": n, "supercategory": "thing" if t else "stuff", "isthing": int(t)}
        for n, i, t in zip(labels.names, labels.ids, labels.isthing, strict=True)
    ]


def _scenes(
    num: int, seed: int, height: int, width: int, sequence: int
) -> Iterator[tuple[Scene, dict]]:
    """(scene, extra image fields) of the ``num`` images :func:`generate` writes, in order.

    Sequence scenes get ``video_id`` and ``frame_index``, and their thing segments a data-set
    wide ``track_id`` = video_id * TRACKS_PER_VIDEO + the object's number in its video.
    """
    if not sequence:
        for index in range(num):
            yield render_scene(seed, index, height, width), {}
        return
    for video in range(-(-num // sequence)):
        frames = min(sequence, num - video * sequence)
        base = (video + 1) * TRACKS_PER_VIDEO
        for frame, scene in enumerate(render_sequence(seed, video, frames, height, width)):
            segments = [
                {**s, "track_id": base + s["track_id"]} if s["isthing"] else s
                for s in scene.segments
            ]
            yield (
                dataclasses.replace(scene, segments=segments),
                {"video_id": video + 1, "frame_index": frame},
            )


def generate(
    out: str | Path,
    num: int,
    seed: int,
    height: int,
    width: int,
    progress: bool = True,
    sequence: int = 0,
    depth: bool = False,
) -> dict:
    """Write ``num`` scenes with COCO instance + panoptic annotations under ``out``.

    With ``depth`` each scene also gets the depth its camera's sensor reports,
    OUT/depth/000000.png (uint16 millimetres, 0 = no return), and OUT/objects3d.json holds the
    camera and every thing's 3-D truth (``synthetic_depth``).

    With ``sequence`` > 0 the images are videos of ``sequence`` frames (the last may be shorter)
    with moving objects: images carry ``video_id`` and ``frame_index``, a top-level ``videos``
    list names the videos, and every thing annotation and panoptic thing segment carries a
    ``track_id`` unique in the data set and constant while its object is visible.
    """
    if sequence < 0:
        raise ConfigError(f"sequence={sequence}: give frames per video, or 0 for single scenes")
    if height < MIN_SIDE or width < MIN_SIDE:
        raise ConfigError(
            f"size {height}x{width} is too small for the synthetic scenes; use at "
            f"least {MIN_SIDE}x{MIN_SIDE}"
        )
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "panoptic").mkdir(parents=True, exist_ok=True)
    if depth:
        (out / "depth").mkdir(parents=True, exist_ok=True)
    images, instances, pan_annos, depth_images = [], [], [], []
    ann_id = 0
    start = time.perf_counter()
    bar = Progress(num, "synth", progress, unit="images", rate_unit="img/s")
    for index, (scene, video_fields) in enumerate(_scenes(num, seed, height, width, sequence)):
        name = f"{index:06d}"
        cv2.imwrite(
            str(out / "images" / f"{name}.jpg"),
            scene.image[..., ::-1],
            [cv2.IMWRITE_JPEG_QUALITY, 95],
        )
        cv2.imwrite(str(out / "panoptic" / f"{name}.png"), id_to_rgb(scene.panoptic)[..., ::-1])
        if depth:
            depth_images.append(_write_depth(out, name, index + 1, scene, seed))
        images.append(
            {
                "id": index + 1,
                "file_name": f"{name}.jpg",
                "height": height,
                "width": width,
                **video_fields,
            }
        )
        seg_info = []
        for seg in scene.segments:
            mask = scene.panoptic == seg["id"]
            area, box = int(mask.sum()), _bbox(mask)
            track = {"track_id": seg["track_id"]} if "track_id" in seg else {}
            seg_info.append(
                {
                    "id": seg["id"],
                    "category_id": seg["category_id"],
                    "area": area,
                    "bbox": box,
                    "iscrowd": 0,
                    **track,
                }
            )
            if seg["isthing"]:
                ann_id += 1
                rle = encode_rle(mask)
                instances.append(
                    {
                        "id": ann_id,
                        "image_id": index + 1,
                        "category_id": seg["category_id"],
                        "segmentation": rle,
                        "area": area,
                        "bbox": box,
                        "iscrowd": 0,
                        **track,
                    }
                )
        pan_annos.append(
            {"image_id": index + 1, "file_name": f"{name}.png", "segments_info": seg_info}
        )
        bar.update(index + 1)
    bar.close()
    cats = coco_categories(SYNTHETIC_LABELS)
    info = {"description": f"compactinst synthetic scenes seed={seed}", "seed": seed}
    videos = (
        {
            "videos": [
                {"id": v, "name": f"{v:06d}"} for v in sorted({img["video_id"] for img in images})
            ]
        }
        if sequence
        else {}
    )
    (out / "instances.json").write_text(
        json.dumps(
            {
                "info": info,
                "images": images,
                "annotations": instances,
                "categories": [c for c in cats if c["isthing"]],
                **videos,
            }
        )
    )
    (out / "panoptic.json").write_text(
        json.dumps(
            {"info": info, "images": images, "annotations": pan_annos, "categories": cats, **videos}
        )
    )
    if depth:
        (out / synthetic_depth.OBJECTS_3D).write_text(
            json.dumps(synthetic_depth.objects_file(info, height, width, depth_images))
        )
    return {
        "images": num,
        "instances": len(instances),
        "seconds": round(time.perf_counter() - start, 2),
    }


def _write_depth(out: Path, name: str, image_id: int, scene: Scene, seed: int) -> dict:
    """Write scene ``name``'s sensor depth PNG; its entry of objects3d.json."""
    true_depth, camera = synthetic_depth.scene_depth(scene)
    rng = np.random.default_rng([seed, image_id, synthetic_depth.NOISE_STREAM])
    cv2.imwrite(
        str(out / "depth" / f"{name}.png"), synthetic_depth.sensor_depth_mm(true_depth, rng)
    )
    return {
        "id": image_id,
        "file_name": f"{name}.png",
        "pitch_deg": round(float(np.degrees(camera.pitch)), 4),
        "objects": synthetic_depth.objects_3d(scene, true_depth, camera),
    }


def camera_names(spec: str) -> tuple[str, ...]:
    """``--cameras``: a count (``3`` -> cam0, cam1, cam2; ``1`` -> the one ``camera``) or a
    comma-separated list of names; ConfigError for anything that is not a valid, unique name."""
    spec = spec.strip()
    if spec.isdigit():
        count = int(spec)
        if count < 1:
            raise ConfigError(f"--cameras {spec}: need at least one camera")
        return (SINGLE_CAMERA,) if count == 1 else tuple(f"cam{k}" for k in range(count))
    names = tuple(n.strip() for n in spec.split(","))
    for name in names:
        if not name or not (name[0].isalpha() and name.replace("_", "a").isalnum()):
            raise ConfigError(
                f"--cameras {spec}: camera name {name!r} must start with a letter and hold only "
                "letters, digits and '_' (it names the topic /<name>/image_raw)"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"--cameras {spec}: a camera name is given twice")
    return names


def _merge_camera(
    out: Path, part: Path, camera: str, offset: int, stamps: list[int], merged: dict
) -> None:
    """Move camera ``camera``'s data set ``part`` under ``out`` (images/<camera>/ and
    panoptic/<camera>/) and add its GT to ``merged`` with ids after ``offset``, its stamps and
    its camera; video and track ids are shifted so that they stay unique over the cameras."""
    for folder in ("images", "panoptic", "depth"):
        if (part / folder).is_dir():
            (out / folder).mkdir(parents=True, exist_ok=True)
            shutil.move(str(part / folder), str(out / folder / camera))
    if (part / synthetic_depth.OBJECTS_3D).is_file():
        objects = json.loads((part / synthetic_depth.OBJECTS_3D).read_text())
        target = merged.setdefault(synthetic_depth.OBJECTS_3D, {**objects, "images": []})
        for entry in objects["images"]:
            entry["stamp_ns"] = stamps[int(entry["id"]) - 1]
            entry["camera"] = camera
            entry["id"] += offset
            entry["file_name"] = f"{camera}/{entry['file_name']}"
        target["images"] += objects["images"]
    videos = offset  # a camera has at most as many videos as images
    for name in ("instances.json", "panoptic.json"):
        coco = json.loads((part / name).read_text())
        empty = {"images": [], "annotations": [], **({"videos": []} if "videos" in coco else {})}
        target = merged.setdefault(name, {**coco, **empty})
        for entry in coco["images"]:
            entry["stamp_ns"] = stamps[int(entry["id"]) - 1]
            entry["camera"] = camera
            entry["id"] += offset
            entry["file_name"] = f"{camera}/{entry['file_name']}"
            if "video_id" in entry:
                entry["video_id"] += videos
        for number, ann in enumerate(coco["annotations"], start=len(target["annotations"]) + 1):
            ann["image_id"] += offset
            if "id" in ann:
                ann["id"] = number
            if "file_name" in ann:
                ann["file_name"] = f"{camera}/{ann['file_name']}"
            for seg in [ann, *ann.get("segments_info", [])]:
                if "track_id" in seg:
                    seg["track_id"] += videos * TRACKS_PER_VIDEO
        for video in coco.get("videos", []):
            shifted = {"id": video["id"] + videos, "name": f"{camera}/{video['name']}"}
            target["videos"].append(shifted)
        target["images"] += coco["images"]
        target["annotations"] += coco["annotations"]
    shutil.rmtree(part)


def generate_bag(
    out: str | Path,
    num: int,
    seed: int,
    height: int,
    width: int,
    cameras: Sequence[str] = (SINGLE_CAMERA,),
    fps: float = 10.0,
    sequence: int = 0,
    progress: bool = True,
    depth: str | None = None,
    lidar_speed: float | None = None,
) -> dict:
    """:func:`generate` per camera plus OUT/bag: ``num`` frames per camera at ``fps``, every
    camera stamped alike (one trigger), each GT image with its ``stamp_ns`` (and ``camera`` with
    several cameras), so that ``compactinst replay OUT/bag --gt-...`` matches by stamp.

    ``depth`` (an encoding of ``synthetic_depth.DEPTH_ENCODINGS``) makes every camera an RGB-D
    camera: its camera_info, a registered depth topic and objects3d.json (stamped alike).
    ``lidar_speed`` (m/s) makes the one camera a vehicle's, driving at that speed, with a
    spinning LiDAR instead of depth (``synthetic_lidar``) and the same objects3d.json."""
    from ..eval.bags import write_camera_bag

    if fps <= 0:
        raise ConfigError(f"--fps {fps} must be positive")
    if depth is not None:
        synthetic_depth.check_encoding(depth)
    if lidar_speed is not None and (depth is not None or tuple(cameras) != (SINGLE_CAMERA,)):
        raise ConfigError("--lidar-drive takes one camera and no --depth (the LiDAR replaces it)")
    if lidar_speed is not None:
        depth = "16UC1"  # the scenes' depth feeds the LiDAR; the bag gets no depth topic
    out = Path(out)
    period_ns = round(1e9 / fps)
    stamps = [bag_start_ns(seed) + i * period_ns for i in range(num)]
    start = time.perf_counter()
    instances = 0
    gt_files = ("instances.json", "panoptic.json")
    if depth is not None:
        gt_files += (synthetic_depth.OBJECTS_3D,)
    if tuple(cameras) == (SINGLE_CAMERA,):
        summary = generate(out, num, seed, height, width, progress, sequence, depth is not None)
        instances = summary["instances"]
        for name in gt_files:
            coco = json.loads((out / name).read_text())
            for entry in coco["images"]:
                entry["stamp_ns"] = stamps[int(entry["id"]) - 1]
            (out / name).write_text(json.dumps(coco))
        folders = {SINGLE_CAMERA: out / "images"}
    else:
        merged: dict = {}
        for k, camera in enumerate(cameras):
            part = out / f".{camera}.part"
            shutil.rmtree(part, ignore_errors=True)
            summary = generate(
                part, num, seed + k, height, width, progress, sequence, depth is not None
            )
            instances += summary["instances"]
            _merge_camera(out, part, camera, k * num, stamps, merged)
        for name, coco in merged.items():
            (out / name).write_text(json.dumps(coco))
        folders = {camera: out / "images" / camera for camera in cameras}

    def frames(folder: Path) -> Iterator[tuple[int, np.ndarray]]:
        images = sorted(folder.glob("*.jpg"))
        for stamp, path in zip(stamps, images, strict=True):
            yield stamp, cv2.imread(str(path), cv2.IMREAD_COLOR)

    def rgbd_frames(camera: str, folder: Path) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        depth_folder = out / "depth" / ("" if camera == SINGLE_CAMERA else camera)
        depths = sorted(depth_folder.glob("*.png"))
        for (stamp, bgr), path in zip(frames(folder), depths, strict=True):
            yield stamp, bgr, cv2.imread(str(path), cv2.IMREAD_UNCHANGED)

    if lidar_speed is not None:
        from .synthetic_lidar import write_lidar_drive

        write_lidar_drive(
            out / "bag", rgbd_frames(SINGLE_CAMERA, folders[SINGLE_CAMERA]),
            synthetic_depth.camera_intrinsics(height, width), SINGLE_CAMERA, lidar_speed, seed,
        )  # fmt: skip
    elif depth is not None:
        synthetic_depth.write_depth_bag(
            out / "bag",
            {c: rgbd_frames(c, folder) for c, folder in folders.items()},
            synthetic_depth.camera_intrinsics(height, width),
            depth,
        )
    else:
        write_camera_bag(
            out / "bag",
            {camera_topic(c): (c, frames(folder)) for c, folder in folders.items()},
        )
    return {
        "images": num * len(folders),
        "instances": instances,
        "cameras": list(folders),
        "bag": str(out / "bag"),
        "seconds": round(time.perf_counter() - start, 2),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst synth``."""
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num", type=int, default=1000, help="number of images")
    parser.add_argument("--seed", type=int, default=0, help="scene seed (held-out sets: another)")
    parser.add_argument("--size", default="256x384", help="image size HxW")
    parser.add_argument(
        "--sequence",
        type=int,
        default=0,
        metavar="N",
        help="write videos of N frames with moving objects and a track_id per "
        "object (0: independent scenes)",
    )
    parser.add_argument(
        "--bag",
        action="store_true",
        help="also write OUT/bag (mcap, sensor_msgs/Image per camera) and stamp the GT images",
    )
    parser.add_argument(
        "--cameras",
        default="1",
        help="with --bag: a count (names cam0, cam1, ...) or comma-separated names; each camera "
        "gets its own topic /<name>/image_raw, frame_id and scenes",
    )
    parser.add_argument("--fps", type=float, default=10.0, help="with --bag: the camera rate")
    parser.add_argument(
        "--depth",
        choices=synthetic_depth.DEPTH_ENCODINGS,
        help="with --bag: RGB-D cameras: camera_info, a registered depth topic "
        "/<name>/depth/image_raw in this encoding (16UC1 mm, 32FC1 m), OUT/depth/*.png and the "
        "3-D ground truth OUT/objects3d.json (default: none, colour cameras only)",
    )
    parser.add_argument(
        "--lidar-drive",
        type=float,
        metavar="MPS",
        help="with --bag: the camera rides a vehicle at MPS m/s with a spinning LiDAR "
        "(/lidar/points, per-point times), odom <- base_link on /tf, the mounts on /tf_static, "
        "and OUT/objects3d.json (default: none)",
    )


def run(args: argparse.Namespace) -> int:
    """Generate the data set and print a one-line summary."""
    if args.num < 1:
        raise ConfigError(f"--num {args.num}: need at least one image")
    h, w = parse_size(args.size)
    out = Path(args.out)
    earlier = [out / name for name in ("instances.json", "panoptic.json") if (out / name).exists()]
    if earlier:
        raise ConfigError(
            f"{earlier[0]} exists: {out} holds a data set already; remove it or pick another --out"
        )
    cameras = camera_names(args.cameras)
    if args.bag:
        if (out / "bag").exists():
            raise ConfigError(f"{out / 'bag'} exists; remove it or pick another --out")
        summary = generate_bag(
            out,
            args.num,
            args.seed,
            h,
            w,
            cameras,
            args.fps,
            sequence=args.sequence,
            depth=args.depth,
            lidar_speed=args.lidar_drive,
        )
        print(
            f"wrote {summary['images']} images of {len(cameras)} camera(s) "
            f"({', '.join(summary['cameras'])}), {summary['instances']} instances, "
            f"{out / 'instances.json'}, {out / 'panoptic.json'} and the bag {summary['bag']} "
            f"in {summary['seconds']} s"
        )
        return 0
    if cameras != (SINGLE_CAMERA,):
        raise ConfigError(f"--cameras {args.cameras} needs --bag (cameras are bag topics)")
    if args.depth is not None:
        raise ConfigError(f"--depth {args.depth} needs --bag (depth is a bag topic)")
    if args.lidar_drive is not None:
        raise ConfigError("--lidar-drive needs --bag (the drive is a bag)")
    summary = generate(out, args.num, args.seed, h, w, sequence=args.sequence)
    print(
        f"wrote {summary['images']} images ({out / 'images'}, {out / 'panoptic'}), "
        f"{summary['instances']} instances, {out / 'instances.json'}, {out / 'panoptic.json'} "
        f"in {summary['seconds']} s"
    )
    return 0
