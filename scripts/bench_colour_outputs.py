#!/usr/bin/env python3
"""Cost of ~/panoptic/color and ~/semantic/color per frame, with and without a subscriber.

The node (embedded model, ONNX Runtime) and a client run in this process; the client always
subscribes to the raw panoptic and semantic rasters and the latency record, and in the second
phase also to the two colour images. Printed: the node's median ``publish`` stage (building and
publishing the outputs, colour images included) and ``inference`` per phase (latency names:
docs/ros.md), then the colour functions alone at the same size.

    . scripts/ros_env.sh
    .venv/bin/python scripts/bench_colour_outputs.py --size 540x960 --frames 12
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState

from compactinst_ros.overlay import panoptic_color, semantic_color
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.resources import default_model
from compactinst_ros.ros import convert
from compactinst_ros.ros.node import CompactInstNode
from compactinst_ros.sizes import parse_size
from compactinst_ros.structures import INFERENCE, OutputSet
from compactinst_ros.train.synthetic import render_sequence

NS = "/compactinst"
TOPIC = "/bench/image"
RELIABLE = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
#: seconds to wait for a frame's latency record, or for the node's input subscription to match
TIMEOUT_S = 60.0


def wait_until(ready: Callable[[], object], what: str) -> None:
    """Poll ``ready()`` until it is true; exit naming ``what`` after ``TIMEOUT_S``."""
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(
                f"{what} within {TIMEOUT_S:.0f} s; is another node using this ROS_DOMAIN_ID?"
            )
        time.sleep(0.005)


def run_phase(
    pub: Publisher, frames: list[np.ndarray], records: dict[int, JointState], first_sec: int
) -> dict[str, float]:
    """Publish ``frames`` one at a time; median publish/inference ms of their latency records,
    the first frame left out (it warms up the outputs)."""
    publish, inference = [], []
    for i, frame in enumerate(frames):
        sec = first_sec + i
        msg = convert.image_msg(frame, convert.Header())
        msg.encoding = "rgb8"
        msg.header.stamp.sec = sec
        pub.publish(msg)
        wait_until(lambda s=sec: s in records, f"no latency record for frame {sec}")
        stages = dict(zip(records[sec].name, records[sec].position, strict=True))
        publish.append(stages["publish"])
        inference.append(stages[INFERENCE])
    return {"publish": statistics.median(publish[1:]), INFERENCE: statistics.median(inference[1:])}


def main() -> None:
    """Both phases over DDS, then the colour functions alone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="540x960", help="camera frame HxW")
    parser.add_argument("--frames", type=int, default=12, help="frames per phase (first dropped)")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds for discovery to settle before a phase"
    )
    args = parser.parse_args()
    if args.frames < 2:
        parser.error("--frames must be at least 2: the first frame of each phase is not timed")
    h, w = parse_size(args.size)
    frames = [s.image for s in render_sequence(1, 0, args.frames, h, w)]
    rclpy.init()
    params = [
        Parameter("model", value=str(default_model())),
        Parameter("backend", value="onnxruntime"),
        Parameter("ort_threads", value=1),
        Parameter("image_topic", value=TOPIC),
        Parameter("input_reliability", value="reliable"),  # no re-subscription mid-phase
    ]
    node = CompactInstNode(parameter_overrides=params)
    client = rclpy.create_node("bench_colour_client")
    records: dict[int, JointState] = {}
    client.create_subscription(
        JointState,
        f"{NS}/latency/frame",
        lambda m: records.__setitem__(m.header.stamp.sec, m),
        RELIABLE,
    )
    for name in ("panoptic", "semantic"):
        client.create_subscription(Image, f"{NS}/{name}", lambda m: None, RELIABLE)
    pub = client.create_publisher(Image, TOPIC, RELIABLE)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    executor.add_node(client)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        wait_until(pub.get_subscription_count, f"the node did not subscribe to {TOPIC}")
        time.sleep(args.settle)  # the client's output subscriptions reach the node
        without = run_phase(pub, frames, records, 1000)
        for name in ("panoptic/color", "semantic/color"):
            client.create_subscription(Image, f"{NS}/{name}", lambda m: None, RELIABLE)
        time.sleep(args.settle)
        with_colour = run_phase(pub, frames, records, 2000)
    finally:  # also on an error: a node left running aborts the interpreter at exit
        executor.shutdown()
        node.destroy_node()
        client.destroy_node()
        rclpy.try_shutdown()
    print(f"{h}x{w}, median of {args.frames - 1} frames, node stages in ms")
    print(
        f"  colour images not subscribed: publish {without['publish']:.2f}  "
        f"{INFERENCE} {without[INFERENCE]:.1f}"
    )
    print(
        f"  colour images subscribed:     publish {with_colour['publish']:.2f}  "
        f"{INFERENCE} {with_colour[INFERENCE]:.1f}"
    )
    with Pipeline(default_model(), "onnxruntime", threads=1) as pipe:
        result = pipe(frames[0], "rgb8", OutputSet(instance=False))
        labels = pipe.bundle.labels
    for render in (panoptic_color, semantic_color):
        start = time.perf_counter()
        for _ in range(10):
            render(result, labels)
        print(f"  {render.__name__} alone: {(time.perf_counter() - start) * 100:.2f} ms")


if __name__ == "__main__":
    main()
