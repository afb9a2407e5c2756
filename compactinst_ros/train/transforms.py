"""Training augmentations on (image, masks) numpy pairs: random resize, crop and flip.

Images are (H, W, 3) uint8 RGB; masks are (G, H, W) uint8, one per object. Masks are resized
with nearest-neighbour in one OpenCV call per 256 masks (no per-pixel Python). Every transform
takes a ``numpy.random.Generator`` so a dataset can make augmentation deterministic per sample.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from ..errors import ConfigError


def resize_pair(
    image: np.ndarray, masks: np.ndarray, h: int, w: int
) -> tuple[np.ndarray, np.ndarray]:
    """Resize the image bilinearly and the masks with nearest-neighbour to h x w."""
    if (h, w) == image.shape[:2]:
        return image, masks
    image = cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)
    if masks.shape[0] == 0:
        return image, np.zeros((0, h, w), np.uint8)
    chunks = []
    for start in range(0, masks.shape[0], 256):
        stack = np.ascontiguousarray(masks[start : start + 256].transpose(1, 2, 0))
        out = cv2.resize(stack, (w, h), interpolation=cv2.INTER_NEAREST)
        chunks.append(out.reshape(h, w, -1).transpose(2, 0, 1))
    return image, np.concatenate(chunks, axis=0)


class RandomScale:
    """Scale the image by a factor drawn uniformly from [low, high] (scale jitter)."""

    def __init__(self, low: float, high: float) -> None:
        if not 0 < low <= high:
            raise ConfigError(f"scale range [{low}, {high}] must satisfy 0 < low <= high")
        self.low, self.high = float(low), float(high)

    def __call__(self, image: np.ndarray, masks: np.ndarray, rng: np.random.Generator):
        s = rng.uniform(self.low, self.high)
        h, w = image.shape[:2]
        return resize_pair(image, masks, max(1, round(h * s)), max(1, round(w * s)))


class RandomCrop:
    """Crop a random window of at most ``height`` x ``width`` (smaller images are kept whole)."""

    def __init__(self, height: int, width: int) -> None:
        self.height, self.width = int(height), int(width)

    def __call__(self, image: np.ndarray, masks: np.ndarray, rng: np.random.Generator):
        h, w = image.shape[:2]
        ch, cw = min(self.height, h), min(self.width, w)
        y0 = int(rng.integers(h - ch + 1))
        x0 = int(rng.integers(w - cw + 1))
        return image[y0 : y0 + ch, x0 : x0 + cw], masks[:, y0 : y0 + ch, x0 : x0 + cw]


class RandomFlip:
    """Horizontal flip with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)

    def __call__(self, image: np.ndarray, masks: np.ndarray, rng: np.random.Generator):
        if rng.random() < self.p:
            return image[:, ::-1], masks[:, :, ::-1]
        return image, masks


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms: Sequence) -> None:
        self.transforms = list(transforms)

    def __call__(self, image: np.ndarray, masks: np.ndarray, rng: np.random.Generator):
        for t in self.transforms:
            image, masks = t(image, masks, rng)
        return np.ascontiguousarray(image), np.ascontiguousarray(masks)


def train_transforms(
    crop: tuple[int, int], scale: tuple[float, float] = (0.75, 1.25), flip: bool = True
) -> Compose:
    """Scale jitter, random crop to ``crop`` (H, W) and horizontal flip."""
    ops: list = [RandomScale(*scale), RandomCrop(*crop)]
    if flip:
        ops.append(RandomFlip())
    return Compose(ops)
