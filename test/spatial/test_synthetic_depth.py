"""Synthetic RGB-D scenes: a pinhole camera over flat ground, upright boards, exact 3-D truth."""

from __future__ import annotations

import argparse
import json

import cv2
import numpy as np
import pytest

from compactinst_ros.errors import ConfigError
from compactinst_ros.eval.bags import ImageBag, typestore
from compactinst_ros.eval.cameras import open_cameras
from compactinst_ros.train import synthetic, synthetic_depth
from compactinst_ros.train.synthetic import (
    FIELD,
    ROAD,
    SKY,
    VEGETATION,
    generate_bag,
    render_scene,
    render_sequence,
)

H, W = 128, 192


def _kinds(scene):
    """The stuff label of each pixel (0 under things)."""
    return np.where(scene.panoptic < 1000, scene.panoptic, 0)


def test_depth_follows_the_ground_the_tree_line_and_the_boards():
    standing = 0
    for index in range(4):
        scene = render_scene(21, index, H, W)
        depth, camera = synthetic_depth.scene_depth(scene)
        forward, down = camera.ray_rows(np.arange(H))
        rows = np.arange(H)[:, None].repeat(W, 1)
        stuff = _kinds(scene)
        ground = (stuff == FIELD) | (stuff == ROAD)
        expected = synthetic_depth.CAMERA_HEIGHT_M / down[rows]
        np.testing.assert_allclose(depth[ground], expected[ground], rtol=1e-5)
        wall = stuff == VEGETATION
        np.testing.assert_allclose(depth[wall], (synthetic_depth.TREE_LINE_M / forward)[rows][wall])
        assert np.isnan(depth[stuff == SKY]).all()
        # the ground's vanishing line is the painted horizon: the first ground row is far away
        assert depth[scene.horizon][ground[scene.horizon]].min() > 100.0
        for seg, contact in scene.contact_rows.items():
            v, u = np.nonzero(scene.panoptic == seg)
            # a board is upright: forward distance z * forward(row) is one value per board
            np.testing.assert_allclose(depth[v, u] * forward[v], depth[v, u][0] * forward[v][0])
            board = camera.forward_of_contact(contact)
            # ... and it stands where its lowest row meets the ground: no visible row of it lies
            # below the ground it stands on (occluders hide the feet of some)
            lowest = camera.height_m * forward[v.max()] / down[v.max()]
            assert board <= lowest * (1 + 1e-9)
            standing += board == pytest.approx(lowest, rel=1e-9)
    assert standing >= 4


def test_truth_is_the_visible_surface_centroid_and_reprojects_into_the_box():
    scene = render_scene(22, 0, H, W)
    depth, camera = synthetic_depth.scene_depth(scene)
    objects = synthetic_depth.objects_3d(scene, depth, camera)
    assert [o["segment_id"] for o in objects] == [s["id"] for s in scene.segments if s["isthing"]]
    k = camera.k
    for obj in objects:
        x, y, z = obj["centroid"]
        u, v = k.fx * x / z + k.cx, k.fy * y / z + k.cy
        bx, by, bw, bh = obj["bbox"]
        assert bx <= u <= bx + bw and by <= v <= by + bh
        assert obj["distance"] == pytest.approx(np.linalg.norm(obj["centroid"]), abs=1e-4)
        assert obj["visible_px"] == int((scene.panoptic == obj["segment_id"]).sum())


def test_sensor_depth_has_distance_squared_noise_holes_and_a_range():
    truth = np.linspace(1.0, 60.0, 200_000, dtype=np.float32).reshape(400, 500)
    mm = synthetic_depth.sensor_depth_mm(truth, np.random.default_rng(0))
    low, high = synthetic_depth.DEPTH_RANGE_M
    valid = mm > 0
    assert low * 1000 <= mm[valid].min() and mm[valid].max() <= high * 1000
    assert valid[truth > high].mean() < 0.5  # what lies beyond the range mostly reads as beyond
    holes = 1.0 - valid[truth < high / 2].mean()
    assert holes == pytest.approx(synthetic_depth.HOLES, abs=0.005)
    near = valid & (truth > 9.5) & (truth < 10.5)
    sigma = np.std(mm[near] / 1000.0 - truth[near])
    assert sigma == pytest.approx(synthetic_depth.NOISE_PER_M * 100, rel=0.15)


def test_sequences_carry_the_geometry_too():
    frames = render_sequence(5, 0, 3, H, W)
    for frame in frames:
        things = {s["id"] for s in frame.segments if s["isthing"]}
        assert set(frame.contact_rows) == things
        assert frame.horizon == render_sequence(5, 0, 3, H, W)[0].horizon


def _messages(bag_path, topic):
    with ImageBag(bag_path, topic) as bag:
        return [typestore().deserialize_cdr(f.raw, f.msgtype) for f in bag.frames()]


@pytest.mark.parametrize("encoding", ["16UC1", "32FC1"])
def test_bag_holds_colour_camera_info_registered_depth_and_stamped_3d_truth(tmp_path, encoding):
    cameras = ("left", "right") if encoding == "32FC1" else (synthetic.SINGLE_CAMERA,)
    plain = generate_bag(tmp_path / "plain", 2, 4, H, W, cameras, progress=False)
    summary = generate_bag(tmp_path / "d", 2, 4, H, W, cameras, progress=False, depth=encoding)
    assert summary["instances"] == plain["instances"]
    truth = json.loads((tmp_path / "d" / synthetic_depth.OBJECTS_3D).read_text())
    assert truth["camera"]["k"][0] == W / 2
    coco = json.loads((tmp_path / "d" / "instances.json").read_text())
    assert [i["stamp_ns"] for i in truth["images"]] == [i["stamp_ns"] for i in coco["images"]]
    for camera in cameras:
        topic = synthetic.camera_topic(camera)
        with ImageBag(tmp_path / "d" / "bag") as bag:
            assert bag.topic == synthetic.camera_topic(cameras[0])  # colour, never the depth
            assert synthetic_depth.depth_topic(camera) in bag.image_topics
        colour = _messages(tmp_path / "d" / "bag", topic)
        assert [bytes(m.data) for m in colour] == [
            bytes(m.data) for m in _messages(tmp_path / "plain" / "bag", topic)
        ]
        depth = _messages(tmp_path / "d" / "bag", synthetic_depth.depth_topic(camera))
        assert [m.encoding for m in depth] == [encoding] * 2
        assert depth[0].header.frame_id == camera
        folder = tmp_path / "d" / "depth" / ("" if len(cameras) == 1 else camera)
        png = cv2.imread(str(folder / "000001.png"), cv2.IMREAD_UNCHANGED)
        dtype = np.uint16 if encoding == "16UC1" else np.float32
        array = np.frombuffer(bytes(depth[1].data), dtype).reshape(H, W)
        if encoding == "16UC1":
            np.testing.assert_array_equal(array, png)
        else:
            np.testing.assert_array_equal(np.isnan(array), png == 0)
            np.testing.assert_allclose(array[png > 0], png[png > 0] / 1000.0, rtol=1e-6)
        entries = [i for i in truth["images"] if i.get("camera", camera) == camera]
        assert len(entries) == 2 and all(e["objects"] for e in entries)
    opened = open_cameras(tmp_path / "d" / "bag", "all")  # replay --cameras all: colour only
    try:
        assert [c.name for c in opened] == list(cameras)
    finally:
        for c in opened:
            c.bag.close()


def test_depth_needs_a_bag_and_a_known_encoding(tmp_path):
    parser = argparse.ArgumentParser()
    synthetic.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path / "x"), "--num", "1", "--depth", "16UC1"])
    with pytest.raises(ConfigError, match="needs --bag"):
        synthetic.run(args)
    with pytest.raises(ConfigError, match="16UC1, 32FC1"):
        generate_bag(tmp_path / "y", 1, 0, H, W, progress=False, depth="16UC3")
