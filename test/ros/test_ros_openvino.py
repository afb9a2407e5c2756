"""The node on the openvino backend with the real rclpy: backend:=openvino precision:=int8 opens
(the acceptance check passes on the default bundle) under the CPU's own ISA and each lower one
it has, segments a frame and says on /diagnostics what ran."""

from __future__ import annotations

import array

import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess

from compactinst_ros.backends.openvino import ISA_VARIABLE, ONEDNN_ISAS, host_isas
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.train.synthetic import render_scene

pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image

TOPIC = "/cam/image"
MASK = "/compactinst/instance_mask"


# ~20 s on 2 cores, nearly all the node deriving and checking the INT8 graph at start: make
# test-full. make test covers the parts: test/backends/test_openvino.py (the INT8 derivation, its
# acceptance check under each ISA the CPU has, the INT8 Pipeline) and the ROS tests that select
# another backend by parameter and read it on /diagnostics (test_ros_multicamera.py,
# test_ros_tensorrt_emulated.py).
@pytest.mark.full
@pytest.mark.parametrize("isa", ["default", *ONEDNN_ISAS])
def test_int8_on_openvino_segments_and_reports_it(isa: str, monkeypatch) -> None:
    """``default``: the environment's ISA (the CPU's best unless capped); the others capped by
    ONEDNN_MAX_CPU_ISA (each has its own INT8 kernels), where the CPU has them and they are not
    its best (that is ``default``)."""
    if isa != "default":
        if isa not in host_isas():
            pytest.skip(f"this CPU lacks {isa}")
        if isa == host_isas()[-1]:
            pytest.skip(f"{isa} is this CPU's best ISA: the default run is that one")
        monkeypatch.setenv(ISA_VARIABLE, isa)
    domain = next_domain()
    node = NodeProcess(
        domain,
        {
            "model": str(default_bundle_path()),
            "backend": "openvino",
            "precision": "int8",
            "ort_threads": 1,
            "image_topic": TOPIC,
            "diagnostics_period": 0.25,
        },
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        client.subscribe(Image, MASK)
        publisher = client.publisher(Image, TOPIC)
        facts = client.wait_for(
            lambda: (d := client.latest_diagnostics()).get("backend") and d, 60, "node up"
        )
        assert (facts["backend"], facts["precision"]) == ("openvino", "int8"), facts
        client.wait_for(lambda: publisher.get_subscription_count() and client.matched(MASK))
        scene = render_scene(7, 0, 256, 384)
        pixels = np.ascontiguousarray(scene.image[..., ::-1])  # the scene is RGB; send bgr8
        msg = Image(height=256, width=384, encoding="bgr8", step=384 * 3)
        msg.header.stamp.sec = 4242
        msg.data = array.array("B", pixels.tobytes())
        publisher.publish(msg)
        mask = client.wait_for(lambda: client.stamped(MASK, 4242), 30, "the instance mask")
        ids = np.frombuffer(bytes(mask.data), np.uint16).reshape(256, 384)
        assert ids.max() >= 1, "the demo model finds the scene's objects"
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"
