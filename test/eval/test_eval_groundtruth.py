"""Ground truth loading and frame matching (stamp, index) with clear errors."""

from __future__ import annotations

import json

import pytest
from eval_helpers import instance_masks, write_gt

from compactinst_ros.errors import DataError
from compactinst_ros.eval.groundtruth import GroundTruth, image_stamp_ns


def test_match_by_stamp_within_tolerance(scenes, gt_files) -> None:
    gt = GroundTruth(*gt_files)
    stamps = [s.stamp_ns + 200_000 for s in scenes]  # 0.2 ms off: still the same frame
    stamps.insert(0, scenes[0].stamp_ns - 50_000_000)  # an extra leading frame without GT
    assert gt.match(stamps) == {i + 1: i + 1 for i in range(len(scenes))}


def test_match_by_index_without_stamps(scenes, tmp_path) -> None:
    inst = write_gt(scenes, tmp_path / "nostamp", stamps=False)[0]
    gt = GroundTruth(inst)
    assert gt.match([0] * 10) == {i: i + 1 for i in range(len(scenes))}
    with pytest.raises(DataError, match=r"matches no frame.*header stamp"):
        GroundTruth(inst).match([0] * 10, mode="stamp")


def test_gt_matching_no_frame_is_a_clear_error(scenes, gt_files) -> None:
    gt = GroundTruth(*gt_files)
    with pytest.raises(DataError, match=r"matches no frame of the bag by header stamp"):
        gt.match([1, 2, 3])


def test_stamp_forms() -> None:
    assert image_stamp_ns({"stamp_ns": 5}) == 5
    assert image_stamp_ns({"stamp": {"sec": 2, "nanosec": 7}}) == 2_000_000_007
    assert image_stamp_ns({"stamp": 1.5}) == 1_500_000_000
    assert image_stamp_ns({"id": 1}) is None


def test_bad_files_are_clear_errors(tmp_path, gt_files) -> None:
    with pytest.raises(DataError, match=r"does not exist"):
        GroundTruth(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DataError, match=r"not valid JSON"):
        GroundTruth(tmp_path / "x.json")
    (tmp_path / "y.json").write_text(json.dumps({"annotations": []}))
    with pytest.raises(DataError, match=r"not COCO format"):
        GroundTruth(tmp_path / "y.json")
    with pytest.raises(DataError, match=r"PNG folder .* does not exist"):
        GroundTruth(None, gt_files[1], tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"no ground truth"):
        GroundTruth()


def test_semantic_and_instances_from_gt(scenes, gt_files) -> None:
    gt = GroundTruth(*gt_files)
    sem = gt.semantic_frame(1)
    expected = scenes[0].panoptic // 1000
    expected[scenes[0].panoptic < 1000] = scenes[0].panoptic[scenes[0].panoptic < 1000]
    assert (sem == expected).all()
    masks = instance_masks(gt, 1)
    things = [k for k, (c, _) in scenes[0].segments.items() if c < 5]
    assert len(masks) == len(things)
    assert all(
        (m == (scenes[0].panoptic == k)).all() for (_, m), k in zip(masks, things, strict=True)
    )


def test_stamp_named_files_match_by_stamp(scenes, tmp_path) -> None:
    inst = write_gt(scenes, tmp_path / "named", stamps=False)[0]
    coco = json.loads(inst.read_text())
    for entry, scene in zip(coco["images"], scenes, strict=True):
        sec, nsec = divmod(scene.stamp_ns, 1_000_000_000)
        entry["file_name"] = f"frames/{sec}.{nsec:09d}.png"
    inst.write_text(json.dumps(coco))
    stamps = [s.stamp_ns for s in scenes][::-1]  # bag order reversed: index matching would fail
    matched = GroundTruth(inst).match(stamps)
    assert matched == {len(scenes) - 1 - i: i + 1 for i in range(len(scenes))}


def test_match_by_index_refuses_gt_stamped_outside_the_bag(scenes, gt_files) -> None:
    """Another drive's GT paired by position gave AP 0.0 and exit 0; its stamps say whose it
    is. GT stamped within the bag's span still pairs by position."""
    stamps = [s.stamp_ns for s in scenes]
    later = [s + 3_600 * 10**9 for s in stamps]  # the same drive an hour later: other GT
    with pytest.raises(DataError, match=r"--match index pairs frames by position, but the GT "
                       r"images' stamps .* lie outside this bag's .*another recording"):
        GroundTruth(*gt_files).match(later, mode="index")
    assert GroundTruth(*gt_files).match(stamps, mode="index") == {
        i: i + 1 for i in range(len(scenes))
    }
