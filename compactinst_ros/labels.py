"""Label sets: contiguous model class index <-> dataset label id, names and thing/stuff flags.

Label ids are the dataset's category ids and must be >= 1, because id 0 means "void" in the
panoptic and semantic rasters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import BundleError


@dataclass(frozen=True)
class LabelSet:
    """The K foreground classes of a model, in model output order (index 0..K-1)."""

    names: tuple[str, ...]
    ids: tuple[int, ...]
    isthing: tuple[bool, ...]

    def __post_init__(self) -> None:
        if not (len(self.names) == len(self.ids) == len(self.isthing)):
            raise BundleError("label set: names, ids and isthing must have the same length")
        if not self.names:
            raise BundleError("label set is empty: a model needs at least one class")
        if min(self.ids) < 1:
            raise BundleError("label ids must be >= 1 (0 is reserved for void); renumber them")
        if len(set(self.ids)) != len(self.ids):
            raise BundleError("label ids must be unique")

    @property
    def num_classes(self) -> int:
        """K, the number of foreground classes (the class head has K+1 outputs)."""
        return len(self.names)

    @property
    def id_array(self) -> np.ndarray:
        """Label id per class index, int32 (K,)."""
        return np.asarray(self.ids, dtype=np.int32)

    @property
    def thing_mask(self) -> np.ndarray:
        """True for thing classes, bool (K,)."""
        return np.asarray(self.isthing, dtype=bool)

    def to_json(self) -> list[dict]:
        """Serialise as the bundle's ``labels`` list."""
        return [
            {"id": i, "name": n, "isthing": t}
            for n, i, t in zip(self.names, self.ids, self.isthing, strict=True)
        ]

    @classmethod
    def from_json(cls, entries: list[dict]) -> LabelSet:
        """Parse the bundle's ``labels`` list; raises BundleError naming the bad entry."""
        try:
            return cls(
                names=tuple(str(e["name"]) for e in entries),
                ids=tuple(int(e["id"]) for e in entries),
                isthing=tuple(bool(e["isthing"]) for e in entries),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BundleError(
                f"labels: every entry needs 'id', 'name' and 'isthing' ({exc!r})"
            ) from None


SYNTHETIC_LABELS = LabelSet(
    names=("person", "vehicle", "animal", "bale", "field", "road", "sky", "vegetation"),
    ids=(1, 2, 3, 4, 5, 6, 7, 8),
    isthing=(True, True, True, True, False, False, False, False),
)

CITYSCAPES_INSTANCE_LABELS = LabelSet(
    names=("person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle"),
    ids=(24, 25, 26, 27, 28, 31, 32, 33),
    isthing=(True,) * 8,
)

#: COCO 2017 instance categories: contiguous index 0..79 in ascending category-id order.
COCO_INSTANCE_LABELS = LabelSet(
    names=(
        "person",
        "bicycle",
        "car",
        "motorcycle",
        "airplane",
        "bus",
        "train",
        "truck",
        "boat",
        "traffic light",
        "fire hydrant",
        "stop sign",
        "parking meter",
        "bench",
        "bird",
        "cat",
        "dog",
        "horse",
        "sheep",
        "cow",
        "elephant",
        "bear",
        "zebra",
        "giraffe",
        "backpack",
        "umbrella",
        "handbag",
        "tie",
        "suitcase",
        "frisbee",
        "skis",
        "snowboard",
        "sports ball",
        "kite",
        "baseball bat",
        "baseball glove",
        "skateboard",
        "surfboard",
        "tennis racket",
        "bottle",
        "wine glass",
        "cup",
        "fork",
        "knife",
        "spoon",
        "bowl",
        "banana",
        "apple",
        "sandwich",
        "orange",
        "broccoli",
        "carrot",
        "hot dog",
        "pizza",
        "donut",
        "cake",
        "chair",
        "couch",
        "potted plant",
        "bed",
        "dining table",
        "toilet",
        "tv",
        "laptop",
        "mouse",
        "remote",
        "keyboard",
        "cell phone",
        "microwave",
        "oven",
        "toaster",
        "sink",
        "refrigerator",
        "book",
        "clock",
        "vase",
        "scissors",
        "teddy bear",
        "hair drier",
        "toothbrush",
    ),
    ids=(
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        27,
        28,
        31,
        32,
        33,
        34,
        35,
        36,
        37,
        38,
        39,
        40,
        41,
        42,
        43,
        44,
        46,
        47,
        48,
        49,
        50,
        51,
        52,
        53,
        54,
        55,
        56,
        57,
        58,
        59,
        60,
        61,
        62,
        63,
        64,
        65,
        67,
        70,
        72,
        73,
        74,
        75,
        76,
        77,
        78,
        79,
        80,
        81,
        82,
        84,
        85,
        86,
        87,
        88,
        89,
        90,
    ),
    isthing=(True,) * 80,
)
