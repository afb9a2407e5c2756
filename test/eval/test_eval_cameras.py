"""Multi-camera bags (``compactinst synth --bag --cameras``) and their replay through real nodes."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from ros_domains import next_domain

from compactinst_ros.cli import main
from compactinst_ros.coco import rgb_to_id
from compactinst_ros.errors import ConfigError, DataError
from compactinst_ros.eval.bags import ImageBag, camera_name, write_camera_bag
from compactinst_ros.eval.cameras import attach_ground_truth, open_cameras, run_cameras
from compactinst_ros.eval.groundtruth import GroundTruth
from compactinst_ros.eval.replay import ReplayOptions, lockstep_pipeline, run_lockstep
from compactinst_ros.eval.report import markdown, summary_text
from compactinst_ros.train.synthetic import (
    BAG_T0_NS,
    bag_start_ns,
    camera_names,
    generate_bag,
)

CAMERAS = ("left", "right", "rear")


@pytest.fixture(scope="module")
def camera_set(tmp_path_factory: pytest.TempPathFactory):
    """3 cameras x 4 frames of 64x96 synthetic scenes: the bag and its GT."""
    out = tmp_path_factory.mktemp("cameras")
    generate_bag(out, 4, 3, 64, 96, CAMERAS, fps=10.0, progress=False)
    return out


def test_synth_writes_a_bag_per_camera_with_stamped_camera_named_gt(camera_set):
    inst = json.loads((camera_set / "instances.json").read_text())
    pan = json.loads((camera_set / "panoptic.json").read_text())
    assert [i["id"] for i in inst["images"]] == list(range(1, 13)), "ids unique over cameras"
    assert len({a["id"] for a in inst["annotations"]}) == len(inst["annotations"])
    gt = GroundTruth(camera_set / "instances.json", camera_set / "panoptic.json")
    scenes = {}
    for k, camera in enumerate(CAMERAS):
        with ImageBag(camera_set / "bag", f"/{camera}/image_raw") as bag:
            frames = list(bag.frames())
        assert [f.frame_id for f in frames] == [camera] * 4
        assert [f.stamp_ns for f in frames] == [bag_start_ns(3) + i * 100_000_000 for i in range(4)]
        view = gt.for_camera(camera, f"/{camera}/image_raw")
        matched = view.match([f.stamp_ns for f in frames])
        assert sorted(matched) == [0, 1, 2, 3] and len(set(matched.values())) == 4
        for index, image_id in matched.items():
            entry = view.image(image_id)
            assert entry["camera"] == camera and entry["stamp_ns"] == frames[index].stamp_ns
            jpeg = cv2.imread(str(camera_set / "images" / entry["file_name"]))
            np.testing.assert_array_equal(frames[index].decode()[0], jpeg)
            ids, _ = view.panoptic_frame(image_id)
            png = cv2.imread(str(camera_set / "panoptic" / f"{camera}/{index:06d}.png"))
            np.testing.assert_array_equal(ids, rgb_to_id(png[..., ::-1]))
        scenes[camera] = frames[0].decode()[0]
        assert k * 4 < min(matched.values()) <= (k + 1) * 4
    assert not np.array_equal(scenes["left"], scenes["right"]), "each camera its own scenes"
    assert {a["file_name"].split("/")[0] for a in pan["annotations"]} == set(CAMERAS)


def test_synth_camera_arguments_and_errors(tmp_path, capsys):
    assert camera_names("1") == ("camera",) and camera_names("2") == ("cam0", "cam1")
    assert camera_names(" a, b_2 ") == ("a", "b_2")
    for spec, problem in (("0", "at least one"), ("a,a", "twice"), ("a,2x", "start with")):
        with pytest.raises(ConfigError, match=problem):
            camera_names(spec)
    args = ["synth", "--out", str(tmp_path), "--num", "1", "--size", "64x64"]
    assert main([*args, "--cameras", "2"]) == 2, "usage"
    assert "needs --bag" in capsys.readouterr().err
    assert main([*args, "--bag"]) == 0, "one camera: the single-camera layout, stamped"
    inst = json.loads((tmp_path / "instances.json").read_text())
    assert inst["images"][0]["stamp_ns"] == BAG_T0_NS and "camera" not in inst["images"][0]
    with ImageBag(tmp_path / "bag") as bag:
        assert bag.image_topics == ["/camera/image_raw"] and bag.count == 1


def test_camera_names_and_bag_errors(camera_set, tmp_path):
    assert camera_name("/cam_left/image_raw") == "cam_left"
    assert camera_name("/front/image_raw/compressed") == "front"
    assert camera_name("/image") == "image" and camera_name("/veh/3d-cam/image") == "cam_3d_cam"
    frames = [(BAG_T0_NS, np.zeros((8, 8, 3), np.uint8))]
    write_camera_bag(tmp_path / "clash", {"/a/x/image": ("a", frames), "/b/x/image": ("b", frames)})
    with pytest.raises(DataError, match="same camera name twice"):
        open_cameras(tmp_path / "clash", "all")
    no_camera = json.loads((camera_set / "instances.json").read_text())
    for entry in no_camera["images"]:
        del entry["camera"]
    (tmp_path / "inst.json").write_text(json.dumps(no_camera))
    with pytest.raises(DataError, match='give every GT image entry "camera"'):
        GroundTruth(tmp_path / "inst.json").for_camera("left", "/left/image_raw")
    with pytest.raises(ConfigError, match="give one of them"):
        ReplayOptions(bag=camera_set, model=camera_set, topic="/left/image_raw", cameras="all")


def lockstep_through_nodes(cameras, bundle, tmp_path, batched: bool, **params):
    """``run_cameras`` in lockstep on one-thread CPU nodes (``params`` added), warm-up 1, on a
    domain of its own."""
    return run_cameras(
        cameras,
        bundle,
        "onnxruntime",
        pacing="lockstep",
        batched=batched,
        warmup=1,
        progress=False,
        domain_id=next_domain(),
        log_dir=tmp_path / "logs",
        node_params={"ort_threads": 1, **params},
    )


@pytest.mark.parametrize(
    "batched",
    [
        True,
        # three node starts: make test-full; make test runs per-camera nodes through
        # test_one_camera_asked_batched_runs_as_its_single_camera_node
        pytest.param(False, marks=pytest.mark.full),
    ],
    ids=["batched", "per-camera"],
)
def test_lockstep_through_nodes_scores_each_camera_as_the_pipeline(
    camera_set, random_bundle, tmp_path, batched
):
    gt = GroundTruth(camera_set / "instances.json", camera_set / "panoptic.json")
    cameras = open_cameras(camera_set / "bag", "all")
    attach_ground_truth(cameras, gt, "auto")
    try:
        block, facts = lockstep_through_nodes(
            cameras, random_bundle, tmp_path, batched, diagnostics_period=0.2
        )
        options = ReplayOptions(bag=camera_set / "bag", model=random_bundle, backend="onnxruntime")
        with lockstep_pipeline(options) as pipeline:
            lockstep = {
                c.name: run_lockstep(c.bag, pipeline, c.gt, progress=False)["accuracy"]
                for c in cameras
            }
    finally:
        for camera in cameras:
            camera.bag.close()
    nodes = 1 if batched else 3
    assert block["nodes"] == nodes and block["node_exit_codes"] == [0] * nodes, block["node_logs"]
    assert set(block["cameras"]) == {"left", "right", "rear"}
    for name, camera in block["cameras"].items():
        assert camera["frames"]["processed"] == camera["frames"]["sent"] == 4, name
        assert camera["accuracy"] == lockstep[name], f"{name}: node outputs = pipeline results"
        assert camera["latency"]["end_to_end"]["count"] == 3, "warm-up 1 of 4 excluded"
    assert block["frames"]["processed"] == 12 and block["latency"]["end_to_end"]["count"] == 9
    assert block["accuracy"]["frames_evaluated"] == 12
    if batched:  # the node's report after the last round: every frame in a round
        batch = block["batch"]
        assert batch["cameras"] == 3 and batch["frames_batched"] == 12, batch
        assert 4 <= batch["rounds"] <= 12 and batch["padded_slots"] == 0, batch
    else:
        assert "batch" not in block
    report = {
        "created": "now",
        "command": "test",
        "bag": {
            "path": "b",
            "hash": "h",
            "topic": "t",
            "msgtype": "m",
            "frames": 12,
            "duration_s": 0.3,
        },
        "model": facts,
        "host": {},
        "modes": {"lockstep": block},
    }
    text, page = summary_text(report), markdown(report)
    assert ("batch: " in text) == batched
    for name in CAMERAS:
        assert f"camera {name} (/{name}/image_raw): mask AP" in text
        assert f"### camera {name} (`/{name}/image_raw`)" in page


def test_one_camera_asked_batched_runs_as_its_single_camera_node(
    camera_set, random_bundle, tmp_path
):
    """A one-camera node publishes under ~/ (no camera namespace), so a one-camera "batched"
    replay runs the per-camera node, whose outputs are under the camera's name."""
    (camera,) = open_cameras(camera_set / "bag", "/left/image_raw")
    try:
        block, _ = lockstep_through_nodes(
            [camera], random_bundle, tmp_path, True, diagnostics_period=0.2
        )
    finally:
        camera.bag.close()
    assert block["nodes"] == 1 and block["node_exit_codes"] == [0], block["node_logs"]
    assert block["batched"] is False and "batch" not in block
    assert block["cameras"]["left"]["frames"]["processed"] == 4


def test_realtime_replay_of_cameras_through_the_cli(camera_set, random_bundle, tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "replay", str(camera_set / "bag"), "--model", str(random_bundle), "--backend",
        "onnxruntime", "--cameras", "/left/image_raw,/rear/image_raw", "--mode", "realtime",
        "--gt-instances", str(camera_set / "instances.json"), "--out", str(out), "--output-bag",
        "--warmup", "0", "--no-plots", "--quiet", "--domain", str(next_domain()),
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    block = report["modes"]["realtime"]
    assert report["bag"]["cameras"] == {
        "left": {"topic": "/left/image_raw", "frames": 4},
        "rear": {"topic": "/rear/image_raw", "frames": 4},
    }
    assert set(block["cameras"]) == {"left", "rear"} and block["nodes"] == 1
    evaluated = block["accuracy"]["frames_evaluated"]
    assert f"accuracy of the {evaluated} matched frames the node published outputs for" in (
        " ".join(block["notes"])
    )  # as a one-camera realtime replay says what its accuracy covers
    assert report["model"]["precision"] == "fp32"  # as the node ran it, not "unknown"
    assert block["frames"]["sent"] == 8 and block["throughput"]["target_input_fps"] == 20.0
    processed = [c["frames"]["processed"] for c in block["cameras"].values()]
    assert block["frames"]["processed"] == sum(processed) >= 2
    assert block["accuracy"]["frames_evaluated"] == sum(
        c["accuracy"]["frames_evaluated"] for c in block["cameras"].values()
    )
    assert "camera rear (/rear/image_raw): " in capsys.readouterr().out
    with ImageBag(out / "output_bag", "/compactinst/left/instance_mask") as outputs:
        assert outputs.count == block["cameras"]["left"]["frames"]["processed"]
        assert "/compactinst/rear/instance_mask" in outputs.image_topics
        assert "/left/image_raw" in outputs.image_topics  # the input keeps its recorded name
