"""COCO-format data sets (instance JSON, or panoptic PNG/JSON) -> model inputs and targets.

A sample is ``{"image": (3, H, W) float32 RGB 0..255, "labels": (G,) int64 class index,
"masks": (G, H, W) bool}``; :func:`collate` pads a batch to a multiple of 32 with the mean
colour (which the model normalises to 0, as detectron2's zero padding) and keeps targets as a
list of dicts. Category ids map to contiguous class indices through a :class:`LabelSet`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..coco import rgb_to_id
from ..errors import ConfigError, DataError, InputError
from ..image_formats import read_image
from ..labels import LabelSet
from ..model.configs import PIXEL_MEAN


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise DataError(f"annotation file {path} does not exist; check --data")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None


def _read_rgb(path: Path) -> np.ndarray:
    try:
        return read_image(path)[..., ::-1]
    except InputError as exc:
        raise ConfigError(f"{exc}; is the image folder right?") from None


def labels_from_categories(categories: list[dict]) -> LabelSet:
    """A label set from a COCO ``categories`` list (``isthing`` defaults to 1 for instance JSON)."""
    cats = sorted(categories, key=lambda c: int(c["id"]))
    return LabelSet(
        names=tuple(str(c["name"]) for c in cats),
        ids=tuple(int(c["id"]) for c in cats),
        isthing=tuple(bool(c.get("isthing", 1)) for c in cats),
    )


class _CocoBase(torch.utils.data.Dataset):
    """Shared behaviour: label mapping, augmentation, deterministic per-sample randomness."""

    def __init__(self, labels: LabelSet, transforms: Callable | None, seed: int) -> None:
        self.labels = labels
        self.index_of = {label_id: k for k, label_id in enumerate(labels.ids)}
        self.transforms = transforms
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Change the augmentation draw (call once per epoch)."""
        self.epoch = epoch

    def _finish(self, index: int, image: np.ndarray, masks: np.ndarray, labels: list[int]) -> dict:
        if self.transforms is not None:
            rng = np.random.default_rng([self.seed, self.epoch, index])
            image, masks = self.transforms(image, masks, rng)
        keep = masks.reshape(masks.shape[0], -1).any(axis=1)
        return {
            "image": torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float(),
            "labels": torch.as_tensor(np.asarray(labels, np.int64)[keep], dtype=torch.int64),
            "masks": torch.from_numpy(np.ascontiguousarray(masks[keep])).bool(),
        }


class CocoInstanceDataset(_CocoBase):
    """COCO instance JSON (polygons or RLE); crowd objects are dropped (as FastInst's mapper)."""

    def __init__(
        self,
        annotations: str | Path,
        image_root: str | Path,
        labels: LabelSet | None = None,
        transforms: Callable | None = None,
        seed: int = 0,
        skip_empty: bool = True,
    ) -> None:
        data = _read_json(Path(annotations))
        super().__init__(labels or labels_from_categories(data["categories"]), transforms, seed)
        self.image_root = Path(image_root)
        per_image: dict[int, list[dict]] = {}
        for ann in data.get("annotations", []):
            if ann.get("iscrowd", 0) or int(ann["category_id"]) not in self.index_of:
                continue
            per_image.setdefault(int(ann["image_id"]), []).append(ann)
        self.images = [
            img for img in data["images"] if not skip_empty or per_image.get(int(img["id"]))
        ]
        self.annotations = per_image
        if not self.images:
            raise ConfigError(
                f"{annotations}: no image has annotations of the classes {list(self.labels.names)}"
            )

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        from pycocotools import mask as mask_utils

        info = self.images[index]
        image = _read_rgb(self.image_root / info["file_name"])
        h, w = image.shape[:2]
        anns = self.annotations.get(int(info["id"]), [])
        masks = np.zeros((len(anns), h, w), np.uint8)
        for i, ann in enumerate(anns):
            seg = ann["segmentation"]
            if isinstance(seg, list):
                rle = mask_utils.merge(mask_utils.frPyObjects(seg, h, w))
            elif isinstance(seg["counts"], list):
                rle = mask_utils.frPyObjects(seg, h, w)
            else:
                rle = seg
            masks[i] = mask_utils.decode(rle)
        labels = [self.index_of[int(a["category_id"])] for a in anns]
        return self._finish(index, image, masks, labels)


class CocoPanopticDataset(_CocoBase):
    """COCO panoptic JSON + PNGs (id = R + 256 G + 256^2 B): one target per segment, stuff too."""

    def __init__(
        self,
        annotations: str | Path,
        panoptic_root: str | Path,
        image_root: str | Path,
        labels: LabelSet | None = None,
        transforms: Callable | None = None,
        seed: int = 0,
    ) -> None:
        data = _read_json(Path(annotations))
        super().__init__(labels or labels_from_categories(data["categories"]), transforms, seed)
        self.panoptic_root = Path(panoptic_root)
        self.image_root = Path(image_root)
        by_id = {int(img["id"]): img for img in data["images"]}
        self.items = [(by_id[int(a["image_id"])], a) for a in data["annotations"]]
        if not self.items:
            raise ConfigError(f"{annotations}: no panoptic annotations")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        info, ann = self.items[index]
        image = _read_rgb(self.image_root / info["file_name"])
        png = _read_rgb(self.panoptic_root / ann["file_name"])
        ids = rgb_to_id(png)
        segs = [
            s
            for s in ann["segments_info"]
            if not s.get("iscrowd", 0) and int(s["category_id"]) in self.index_of
        ]
        seg_ids = np.asarray([int(s["id"]) for s in segs], np.int64)
        masks = (ids[None] == seg_ids[:, None, None]).astype(np.uint8)
        labels = [self.index_of[int(s["category_id"])] for s in segs]
        return self._finish(index, image, masks, labels)


def open_dataset(
    data: str | Path,
    labels: LabelSet | None = None,
    transforms: Callable | None = None,
    kind: str = "auto",
    seed: int = 0,
) -> _CocoBase:
    """Open a folder laid out as ``compactinst synth`` writes it (or any COCO folder like it).

    ``kind`` = panoptic (``panoptic.json`` + ``panoptic/``), instance (``instances.json``) or
    auto (panoptic when present). Images are read from ``images/``.
    """
    root = Path(data)
    if kind not in ("auto", "panoptic", "instance"):
        raise ConfigError(f"dataset kind '{kind}': choose auto, panoptic or instance")
    if kind in ("auto", "panoptic") and (root / "panoptic.json").is_file():
        return CocoPanopticDataset(
            root / "panoptic.json", root / "panoptic", root / "images", labels, transforms, seed
        )
    if kind in ("auto", "instance") and (root / "instances.json").is_file():
        return CocoInstanceDataset(
            root / "instances.json", root / "images", labels, transforms, seed
        )
    raise DataError(
        f"{root} has no {'panoptic.json' if kind == 'panoptic' else 'instances.json'}"
        f"{' or panoptic.json' if kind == 'auto' else ''}; create one with 'compactinst synth "
        "--out DIR' or point --data at a COCO-format folder"
    )


def collate(
    batch: list[dict], size_divisibility: int = 32, fixed_size: tuple[int, int] | None = None
) -> tuple[torch.Tensor, list[dict]]:
    """Pad images (mean colour) and masks (0) to a common size divisible by 32."""
    h = max(s["image"].shape[1] for s in batch)
    w = max(s["image"].shape[2] for s in batch)
    if fixed_size is not None:
        h, w = max(h, fixed_size[0]), max(w, fixed_size[1])
    d = size_divisibility
    hp, wp = (h + d - 1) // d * d, (w + d - 1) // d * d
    images = torch.empty(len(batch), 3, hp, wp)
    images[:] = torch.tensor(PIXEL_MEAN).view(1, 3, 1, 1)
    targets = []
    for i, s in enumerate(batch):
        _, ih, iw = s["image"].shape
        images[i, :, :ih, :iw] = s["image"]
        masks = torch.zeros(s["masks"].shape[0], hp, wp, dtype=torch.bool)
        masks[:, :ih, :iw] = s["masks"]
        targets.append({"labels": s["labels"], "masks": masks})
    return images, targets
