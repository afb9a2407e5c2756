"""COCO instance and panoptic loading, augmentation and collation."""

from __future__ import annotations

import json

import pytest
import torch

from compactinst_ros.errors import DataError
from compactinst_ros.labels import SYNTHETIC_LABELS
from compactinst_ros.model.configs import PIXEL_MEAN
from compactinst_ros.train.dataset import collate, open_dataset
from compactinst_ros.train.synthetic import generate
from compactinst_ros.train.transforms import RandomFlip, train_transforms


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    generate(root, 3, seed=2, height=96, width=144, progress=False)
    return root


def test_instance_and_panoptic_agree(data):
    pan = open_dataset(data, SYNTHETIC_LABELS, kind="panoptic")
    inst = open_dataset(data, SYNTHETIC_LABELS, kind="instance")
    for i in range(3):
        p, s = pan[i], inst[i]
        assert torch.equal(p["image"], s["image"])
        things = p["labels"] < 4
        assert torch.equal(p["labels"][things], s["labels"])
        assert torch.equal(p["masks"][things], s["masks"])
        assert p["masks"].sum(0).eq(1).all()  # panoptic segments tile the image


def test_polygon_annotations(data, tmp_path):
    coco = json.loads((data / "instances.json").read_text())
    ann = coco["annotations"][0]
    x, y, w, h = ann["bbox"]
    ann["segmentation"] = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    (tmp_path / "instances.json").write_text(json.dumps(coco))
    (tmp_path / "images").symlink_to(data / "images")
    sample = open_dataset(tmp_path, kind="instance")[ann["image_id"] - 1]
    box = sample["masks"][0]
    ys, xs = torch.nonzero(box, as_tuple=True)
    assert abs(int(xs.min()) - x) <= 1 and abs(int(ys.max()) - (y + h)) <= 1


def test_flip_keeps_masks_aligned(data):
    plain = open_dataset(data, kind="panoptic")[0]
    flipped = open_dataset(data, transforms=RandomFlip(1.0), kind="panoptic")[0]
    assert torch.equal(flipped["image"], plain["image"].flip(-1))
    assert torch.equal(flipped["masks"], plain["masks"].flip(-1))


def test_resize_crop_and_collate(data):
    ds = open_dataset(data, transforms=train_transforms((64, 80), (0.5, 1.5)), kind="panoptic")
    batch = [ds[i] for i in range(3)]
    for s in batch:
        assert s["image"].shape[1] <= 64 and s["image"].shape[2] <= 80
        assert s["masks"].shape[1:] == s["image"].shape[1:]
        assert s["masks"].flatten(1).any(1).all()  # empty objects are dropped
    images, targets = collate(batch)
    assert images.shape[2] % 32 == 0 and images.shape[3] % 32 == 0
    assert torch.allclose(images[0, :, -1, -1], torch.tensor(PIXEL_MEAN))
    assert all(t["masks"].shape[1:] == images.shape[2:] for t in targets)


def test_missing_annotations_named(tmp_path):
    with pytest.raises(DataError, match="compactinst synth"):  # an input that failed: exit 1
        open_dataset(tmp_path)
