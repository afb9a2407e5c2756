"""What rviz2 is told to show, track ids and the CPU-fallback warning, on a real node over DDS.

One node, namespaced and renamed, on the embedded model with ``backend: auto`` on this CPU-only
machine, pointed at a folder holding a Jetson's release file: it must warn (log and /diagnostics)
that the GPU runtime is missing. The rviz config generated for it names the topics to check: each
must carry an encoding rviz2's image display draws on Humble, and the instance ids of a
published synthetic video must persist from frame to frame.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from ros_domains import next_domain
from ros_harness import REPO, Client, ros_env
from ros_messages import raster_from_image
from test_ros_node import image_msg

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.eval import realtime
from compactinst_ros.eval.tracking_metrics import tracking_counts
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.ros.fallback import MARKER_ROOT_ENV
from compactinst_ros.ros.rviz_config import render_rviz_config, rviz_topics
from compactinst_ros.structures import OutputSet
from compactinst_ros.train.synthetic import render_sequence

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import Image

#: encodings rviz2's image display draws on Humble: setFormatAndNormalizeDataIfNecessary in
#: rviz_default_plugins/src/rviz_default_plugins/displays/image/ros_image_texture.cpp (ros2/rviz,
#: humble, 9b35482); anything else throws UnsupportedImageEncoding. mono8 is drawn unnormalised.
RVIZ_HUMBLE_ENCODINGS = frozenset(
    (
        "rgb8",
        "rgba8",
        "8UC4",
        "8SC4",
        "bgra8",
        "8UC3",
        "8SC3",
        "bgr8",
        "8UC1",
        "8SC1",
        "mono8",
        "16UC1",
        "16SC1",
        "mono16",
        "32FC1",
        "yuv422",
        "yuv422_yuy2",
    )
)  # plus every encoding that starts with "bayer"
NAMESPACE, NODE, CAMERA, FRAME = "/front", "seg", "cam/image", "front_camera_optical"
FRAMES = 8


def test_rviz_topics_encodings_track_ids_and_the_gpu_fallback_warning(tmp_path: Path) -> None:
    marker = tmp_path / "root" / "etc" / "nv_tegra_release"
    marker.parent.mkdir(parents=True)
    marker.write_text("# R36 (release), REVISION: 4.0\n")
    config = render_rviz_config(
        (REPO / "rviz" / "compactinst.rviz").read_text(), NAMESPACE, NODE, CAMERA, FRAME
    )
    assert yaml.safe_load(config)["Visualization Manager"]["Global Options"]["Fixed Frame"] == FRAME
    images = {  # the Image displays (the 3-D markers need a depth_topic and are no images)
        d["Name"]
        for d in yaml.safe_load(config)["Visualization Manager"]["Displays"]
        if d["Class"] == "rviz_default_plugins/Image"
    }
    topics = {name: t for name, t in rviz_topics(config).items() if name in images}
    camera = topics.pop("Camera")
    assert camera == f"{NAMESPACE}/{CAMERA}"
    assert all(t.startswith(f"{NAMESPACE}/{NODE}/") for t in topics.values()), topics
    domain = next_domain()
    # reliable input from the start: under auto the node re-subscribes once it sees the
    # publisher's QoS, and a frame sent during that switch is lost (auto has its own tests)
    params = {
        "backend": "auto",
        "ort_threads": 1,
        "image_topic": CAMERA,
        "input_reliability": "reliable",
        "diagnostics_period": 0.3,
    }
    command = [*realtime.node_command(params), "-r", f"__ns:={NAMESPACE}", "-r", f"__node:={NODE}"]
    env = {**ros_env(domain), MARKER_ROOT_ENV: str(tmp_path / "root")}
    node = realtime.NodeProcess(command, env, tmp_path / "node.log", cwd=REPO)
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        for topic in topics.values():
            client.subscribe(Image, topic)
        pub = client.publisher(Image, camera)
        client.wait_for(
            lambda: pub.get_subscription_count() and all(map(client.matched, topics.values())),
            90,
            f"node up, subscribed to {camera}:\n{node.tail()}",
        )
        scenes = render_sequence(1, 0, FRAMES, 256, 384)
        masks = []
        for scene in scenes:
            msg = image_msg(scene.image, "rgb8")
            msg.header.frame_id = FRAME
            pub.publish(msg)
            sec = msg.header.stamp.sec
            client.wait_for(
                lambda s=sec: all(client.stamped(t, s) for t in topics.values()),
                60,
                f"every display's topic for stamp {sec}:\n{node.tail()}",
            )
            for name, topic in topics.items():
                out = client.stamped(topic, sec)
                assert out.encoding in RVIZ_HUMBLE_ENCODINGS, (name, out.encoding)
                assert out.header.frame_id == FRAME and (out.height, out.width) == (256, 384)
            masks.append(
                raster_from_image(client.stamped(topics["Instance mask (mono16 ids)"], sec))
            )
        colour = client.stamped(topics["Panoptic (colour)"], sec)
        pixels = np.frombuffer(bytes(colour.data), np.uint8).reshape(256, 384, 3)
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 2  # classes in colour, not black
        gt_tracks = [
            {s["id"]: s["track_id"] for s in sc.segments if "track_id" in s} for sc in scenes
        ]
        counts = tracking_counts([sc.panoptic for sc in scenes], gt_tracks, masks)
        print(counts)
        assert counts.matches > 0.8 * counts.gt_objects
        assert counts.id_switches == 0  # ids persist across the published frames
        lockstep = Pipeline(default_bundle_path(), "onnxruntime", tracking=True, threads=1)
        with lockstep:
            for scene, mask in zip(scenes, masks, strict=True):
                alone = OutputSet(panoptic=False, semantic=False)
                np.testing.assert_array_equal(
                    lockstep(scene.image, "rgb8", alone).instance_raster, mask
                )  # the node and replay see the same ids
        report = client.wait_for(
            lambda: (
                client.latest_diagnostics().get("frames_processed") == str(FRAMES)
                and client.latest_diagnostics()
            ),
            20,
            "diagnostics after the video",
        )
        assert report["backend"] == "onnxruntime"
        assert report["_level"] == DiagnosticStatus.WARN
        assert "NVIDIA GPU (/etc/nv_tegra_release)" in report["_message"]
        assert "tensorrt (" in report["_message"] and "backend:=onnxruntime" in report["_message"]
    finally:
        client.close()
        node.stop()
    time.sleep(0.1)
    log = node.log()
    assert "WARN" in log and "failed to import, so backend auto runs on the CPU" in log, log
