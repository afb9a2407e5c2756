"""What a synthetic scene is, shared by the scene renderer (``synthetic``) and its depth and 3-D
truth (``synthetic_depth``): the category ids, the ``Scene`` record and the camera topics of a
synthetic bag."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PERSON, VEHICLE, ANIMAL, BALE, FIELD, ROAD, SKY, VEGETATION = range(1, 9)


@dataclass(frozen=True)
class Scene:
    """One rendered scene: RGB image, panoptic id raster and its segments."""

    image: np.ndarray  # (H, W, 3) uint8 RGB
    panoptic: np.ndarray  # (H, W) int32 segment ids (0 = void, never present here)
    segments: list[dict]  # {"id", "category_id", "isthing"}
    # The layout's geometry (``synthetic_depth`` builds the depth from it): the first ground
    # row, and per thing segment id the image row where the object stands on the ground (its
    # lowest row; below the image for objects cut off by the bottom edge).
    horizon: int = 0
    contact_rows: dict[int, int] = field(default_factory=dict)


def camera_topic(camera: str) -> str:
    """The image topic of ``camera`` in a synthetic bag (image_transport's layout)."""
    return f"/{camera}/image_raw"
