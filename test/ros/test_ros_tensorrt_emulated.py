"""The node on its TensorRT path, with real rclpy and DDS but TensorRT and pycuda replaced by the
CPU stand-ins of test/gpu/emu (engines on ONNX Runtime, the real kernel sources on the CPU
emulator): engines are built when the node starts, frames come back as masks and a GPU-rendered
overlay from the staged worker (a round's halves on two threads and two streams), and
/diagnostics names the backend and its device. Real GPU behaviour stays unverified."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import REPO, Client, NodeProcess
from ros_messages import raster_from_image
from test_ros_node import encode_as, image_msg, scene

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
NS = "/compactinst"
TOPIC = "/cam/image"


@pytest.mark.usefixtures("emu_library_for_nodes")
def test_node_runs_the_tensorrt_backend_and_renders_the_overlay_on_the_device(tmp_path) -> None:
    domain = next_domain()
    cache = tmp_path / "engines"
    node = NodeProcess(
        domain,
        {
            "backend": "tensorrt",
            "engine_cache_dir": str(cache),
            "image_topic": TOPIC,
            "diagnostics_period": 0.25,
            "score_threshold": 0.1,
            "stage_threads": 2,
        },
        script=REPO / "test" / "gpu" / "emu" / "emulated_node.py",
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        for name in ("instance_mask", "panoptic", "overlay"):
            client.subscribe(Image, f"{NS}/{name}")
        raw = client.publisher(Image, TOPIC)
        facts = client.wait_for(
            lambda: (
                client.latest_diagnostics().get("backend") == "tensorrt"
                and client.latest_diagnostics()
            ),
            60,
            f"node up on the tensorrt backend:\n{node.tail()}",
        )
        assert facts["tensorrt"] == "10.3.0" and facts["device"] == "CPU kernel emulator"
        assert facts["stage_threads"] == "2", facts  # TensorRT splits a round's halves
        assert sorted(p.name.split("-")[0] for p in cache.glob("*.engine")) == [
            "decoder",
            "encoder",
        ]
        client.wait_for(lambda: raw.get_subscription_count() and client.matched(f"{NS}/overlay"))
        # the node re-subscribes reliable once it sees this publisher; a frame sent before that
        # can go to the reader it replaces, and one lost frame left the test waiting 60 s
        client.wait_for(
            lambda: client.latest_diagnostics().get("input_reliability") == "raw=reliable",
            what="the input subscribed reliable",
        )
        frame = scene(96, 128, 2)
        msg = image_msg(frame, "bgr8")
        sec = msg.header.stamp.sec
        raw.publish(msg)
        topics = [f"{NS}/{n}" for n in ("instance_mask", "panoptic", "overlay")]
        client.wait_for(
            lambda: all(client.stamped(t, sec) for t in topics), 60, f"outputs:\n{node.tail()}"
        )
        overlay = client.stamped(f"{NS}/overlay", sec)
        assert (overlay.height, overlay.width, overlay.encoding) == (96, 128, "bgr8")
        blended = np.frombuffer(bytes(overlay.data), np.uint8).reshape(96, 128, 3)
        ids = raster_from_image(client.stamped(f"{NS}/instance_mask", sec))
        assert ids.shape == (96, 128) and ids.max() > 0
        changed = np.abs(blended.astype(int) - frame.astype(int)).sum(-1) > 0
        assert changed[ids > 0].mean() > 0.9  # instances are coloured on the device
        padded = image_msg(encode_as(frame, "yuv422"), "yuv422", pad=16)  # UYVY, padded rows
        raw.publish(padded)
        sec = padded.header.stamp.sec
        client.wait_for(
            lambda: all(client.stamped(t, sec) for t in topics), 60, f"outputs:\n{node.tail()}"
        )
        again = raster_from_image(client.stamped(f"{NS}/instance_mask", sec))
        assert again.shape == (96, 128) and (again > 0).mean() > 0.5 * (ids > 0).mean()
        report = client.settled_diagnostics()
        assert report["errors"] == "0" and report["frames_processed"] == "2", report
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"
    launched = node.log().rsplit("emulated kernels launched: ", 1)[-1].splitlines()[0]
    for kernel in ("pre_letterbox_half", "pp_stats", "pp_tiles", "pp_remap", "ov_instance"):
        assert f"'{kernel}'" in launched, node.log()
