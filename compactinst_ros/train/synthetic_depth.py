"""Depth for the synthetic scenes: a pinhole camera over flat ground, and each object's 3-D truth.

The scene painter lays out a horizon row and objects standing on the ground, each sized in
proportion to its distance below the horizon. This module gives that layout a camera:

* intrinsics: 90 degrees horizontal field of view (``fx = fy = width / 2``), principal point
  at the image centre; the same K for every scene of a size (one camera_info per camera);
* extrinsics: ``CAMERA_HEIGHT_M`` above the ground, no roll, pitched down so that the ground's
  vanishing line falls on the scene's horizon row (so the pitch varies from scene to scene);
* ground (field, road): the ray of each pixel meets the ground plane; the tree line is a vertical
  wall ``TREE_LINE_M`` ahead; the sky has no depth;
* each object is an upright board, facing the camera, standing on the ground where its lowest
  row meets it, so that its depth is exact at every one of its pixels.

The depth a sensor reports adds noise growing with the square of the distance (as a stereo
camera's does), a fraction of holes and a range limit; the truth uses the noise-free depth. An
object's 3-D truth is the centroid of its **visible** surface in the camera's optical frame
(x right, y down, z forward, metres): what any depth sensor can observe (its hidden parts are
unknowable from this camera).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError
from ..spatial import Intrinsics
from .scene import FIELD, ROAD, VEGETATION, camera_topic

if TYPE_CHECKING:
    from .scene import Scene

#: camera mount height above the ground (a harvester's cab roof)
CAMERA_HEIGHT_M = 2.3
#: the tree line: a vertical wall this far ahead of the camera
TREE_LINE_M = 35.0
#: the depth sensor's range; nearer or farther returns are holes
DEPTH_RANGE_M = (0.3, 40.0)
#: depth noise sigma = NOISE_PER_M * z^2 (a stereo camera's error grows with the distance squared)
NOISE_PER_M = 0.002
#: fraction of pixels without a return (holes)
HOLES = 0.02
#: encodings of the depth topic: millimetres (0 = no return) or metres (NaN = no return)
DEPTH_ENCODINGS = ("16UC1", "32FC1")
#: the 3-D ground truth file of a synthetic data set
OBJECTS_3D = "objects3d.json"
#: third element of a scene's sensor-noise seed ([seed, image id, NOISE_STREAM]): the noise
#: has its own random stream, so the scene's pixels stay those of the scene without depth
NOISE_STREAM = 3


def camera_intrinsics(height: int, width: int) -> Intrinsics:
    """The synthetic camera's K at ``height`` x ``width`` (90 degrees horizontal FOV)."""
    f = width / 2.0
    return Intrinsics(f, f, (width - 1) / 2.0, (height - 1) / 2.0, width, height)


@dataclass(frozen=True)
class GroundCamera:
    """The synthetic camera of one scene: its K, its pitch (radians, down positive) and height."""

    k: Intrinsics
    pitch: float
    height_m: float = CAMERA_HEIGHT_M

    @classmethod
    def for_horizon(cls, height: int, width: int, horizon: int) -> GroundCamera:
        """The camera whose view of the ground vanishes between rows horizon - 1 and horizon."""
        k = camera_intrinsics(height, width)
        return cls(k, math.atan2(k.cy - (horizon - 0.5), k.fy))

    def ray_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per image row: (forward, down) world components of the ray with optical z = 1."""
        y = (np.asarray(rows, np.float64) - self.k.cy) / self.k.fy
        c, s = math.cos(self.pitch), math.sin(self.pitch)
        return c - y * s, s + y * c

    def forward_of_contact(self, row: float) -> float:
        """Horizontal distance ahead of the camera of the ground point seen at ``row``."""
        forward, down = self.ray_rows(np.array([row]))
        return float(self.height_m * forward[0] / down[0])


def scene_depth(scene: Scene) -> tuple[np.ndarray, GroundCamera]:
    """Noise-free optical depth (H, W) float32 metres of a synthetic ``Scene`` (NaN: sky, and
    ground beyond the horizon), and the scene's camera."""
    panoptic = scene.panoptic
    height, width = panoptic.shape
    camera = GroundCamera.for_horizon(height, width, scene.horizon)
    forward, down = camera.ray_rows(np.arange(height))
    with np.errstate(divide="ignore", invalid="ignore"):
        ground = np.where(down > 0, camera.height_m / down, np.nan)
        wall = TREE_LINE_M / forward
    # A pixel's depth depends on its row and what it shows: per-kind row profiles, then a gather.
    ids = np.array(sorted(set(np.unique(panoptic).tolist())), np.int64)
    profiles = np.full((len(ids), height), np.nan)
    for row, seg in enumerate(ids):
        if seg in scene.contact_rows:  # a board at its contact's forward distance
            profiles[row] = camera.forward_of_contact(scene.contact_rows[seg]) / forward
        elif seg in (FIELD, ROAD):
            profiles[row] = ground
        elif seg == VEGETATION:
            profiles[row] = wall
    which = np.searchsorted(ids, panoptic)
    depth = profiles[which, np.arange(height)[:, None]]
    return depth.astype(np.float32), camera


def objects_3d(scene: Scene, depth: np.ndarray, camera: GroundCamera) -> list[dict]:
    """Per thing segment of ``scene``: its 3-D truth (centroid of the visible surface in the
    optical frame, its distance, the board's forward distance) and its 2-D box."""
    k = camera.k
    out = []
    for seg in scene.segments:
        if not seg["isthing"]:
            continue
        v, u = np.nonzero(scene.panoptic == seg["id"])
        z = depth[v, u].astype(np.float64)
        centroid = np.array(
            [((u - k.cx) * z / k.fx).mean(), ((v - k.cy) * z / k.fy).mean(), z.mean()]
        )
        box = [int(u.min()), int(v.min()), int(u.max() - u.min() + 1), int(v.max() - v.min() + 1)]
        out.append(
            {
                "segment_id": int(seg["id"]),
                "category_id": int(seg["category_id"]),
                **({"track_id": int(seg["track_id"])} if "track_id" in seg else {}),
                "bbox": box,
                "centroid": [round(float(c), 5) for c in centroid],
                "distance": round(float(np.linalg.norm(centroid)), 5),
                "forward_m": round(camera.forward_of_contact(scene.contact_rows[seg["id"]]), 5),
                "visible_px": len(u),
            }
        )
    return out


def objects_file(info: dict, height: int, width: int, images: list[dict]) -> dict:
    """The content of objects3d.json: the camera and, per image, its objects' 3-D truth."""
    k = camera_intrinsics(height, width)
    return {
        "info": {**info, "frame": "camera optical frame: x right, y down, z forward, metres"},
        "camera": {
            "k": [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0],
            "width": width,
            "height": height,
            "height_m": CAMERA_HEIGHT_M,
            "depth_range_m": list(DEPTH_RANGE_M),
            "noise_per_m": NOISE_PER_M,
            "holes": HOLES,
        },
        "images": images,
    }


def sensor_depth_mm(depth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """What a depth camera reports for the true ``depth``: uint16 millimetres, 0 = no return
    (sky, holes, out of range), with distance-squared noise."""
    noisy = depth + rng.normal(0.0, 1.0, depth.shape) * NOISE_PER_M * np.square(depth)
    low, high = DEPTH_RANGE_M
    with np.errstate(invalid="ignore"):
        ok = (noisy >= low) & (noisy <= high) & (rng.random(depth.shape) >= HOLES)
    return np.where(ok, np.rint(noisy * 1000.0), 0).astype(np.uint16)


def check_encoding(encoding: str) -> None:
    """ConfigError unless ``encoding`` is one of DEPTH_ENCODINGS."""
    if encoding not in DEPTH_ENCODINGS:
        raise ConfigError(
            f"--depth {encoding} is unknown; choose one of {', '.join(DEPTH_ENCODINGS)}"
        )


def depth_image(depth_mm: np.ndarray, encoding: str) -> np.ndarray:
    """The depth topic's array in ``encoding``: 16UC1 millimetres or 32FC1 metres (NaN holes)."""
    check_encoding(encoding)
    if encoding == "16UC1":
        return depth_mm
    return np.where(depth_mm > 0, depth_mm / np.float32(1000.0), np.nan).astype(np.float32)


def depth_topic(camera: str) -> str:
    """The depth topic of ``camera`` in a synthetic bag (registered to the colour camera)."""
    return f"/{camera}/depth/image_raw"


def camera_info_message(k: Intrinsics, stamp_ns: int, frame_id: str) -> object:
    """sensor_msgs/CameraInfo (rosbags dataclass) of an undistorted pinhole camera ``k``."""
    from ..eval.bags import CAMERA_INFO, _header, typestore

    ts = typestore()
    matrix = [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0]
    projection = [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    roi = ts.types["sensor_msgs/msg/RegionOfInterest"](
        x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
    )
    return ts.types[CAMERA_INFO](
        header=_header(stamp_ns, frame_id),
        height=k.height,
        width=k.width,
        distortion_model="plumb_bob",
        d=np.zeros(5),
        k=np.array(matrix),
        r=np.eye(3).reshape(-1),
        p=np.array(projection),
        binning_x=0,
        binning_y=0,
        roi=roi,
    )


def write_depth_bag(
    path: object,
    cameras: Mapping[str, Iterable[tuple[int, np.ndarray, np.ndarray]]],
    k: Intrinsics,
    encoding: str,
) -> None:
    """A bag of RGB-D cameras: ``{camera: (stamp_ns, bgr8, depth mm) frames}`` as
    ``/<camera>/image_raw``, ``/<camera>/camera_info``, the registered ``depth_topic`` and its
    ``/<camera>/depth/camera_info`` (the same K), interleaved by stamp (log time = stamp)."""
    import heapq

    from ..eval.bags import CAMERA_INFO, IMAGE, BagWriter, image_message

    def stream(order: int, camera: str, frames: Iterable) -> Iterator[tuple]:
        for stamp, bgr, depth_mm in frames:
            yield stamp, order, camera, bgr, depth_mm

    streams = [stream(n, camera, frames) for n, (camera, frames) in enumerate(cameras.items())]
    with BagWriter(path) as writer:
        for stamp, _, camera, bgr, depth_mm in heapq.merge(*streams, key=lambda f: f[:2]):
            image = image_message(bgr, "bgr8", stamp, camera)
            writer.write(camera_topic(camera), IMAGE, stamp, image)
            info = camera_info_message(k, stamp, camera)
            writer.write(f"/{camera}/camera_info", CAMERA_INFO, stamp, info)
            depth = image_message(depth_image(depth_mm, encoding), encoding, stamp, camera)
            writer.write(depth_topic(camera), IMAGE, stamp, depth)
            writer.write(f"/{camera}/depth/camera_info", CAMERA_INFO, stamp, info)
