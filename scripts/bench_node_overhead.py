#!/usr/bin/env python3
"""Node overhead per frame vs. bare rclpy moving the same bytes, measured in one run.

Overhead = the node's end-to-end time minus the mailbox wait and the backend's own stages
(preprocess, encoder, decoder, postprocess): conversion, validation, message building and
publishing. Bare = a minimal rclpy callback that views the same input Image and publishes
the same three rasters (mono16 instance, 32SC1 panoptic, mono8 semantic) from ready arrays.

    . scripts/ros_env.sh
    .venv/bin/python scripts/bench_node_overhead.py --model /path/to/bundle
"""

from __future__ import annotations

import argparse
import array
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from compactinst_ros.dds_env import loopback_environment
from compactinst_ros.resources import default_model, loopback_profile

os.environ.update(loopback_environment(os.environ, loopback_profile()))

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState

from compactinst_ros.ros.node import CompactInstNode

BACKEND_STAGES = ("preprocess", "encoder", "decoder", "postprocess")
MASKS = ("instance_mask", "panoptic", "semantic")
NS = "/compactinst"
RELIABLE = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)


class Recorder:
    """Collects messages per topic keyed by header stamp (sec)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, dict[int, object]] = {}

    def callback(self, topic: str) -> Callable[[object], None]:
        """Subscription callback storing messages of ``topic``."""
        self.seen[topic] = {}

        def record(msg: object) -> None:
            with self.lock:
                self.seen[topic][msg.header.stamp.sec] = msg

        return record

    def wait(self, topics: list[str], sec: int, timeout: float = 60.0) -> dict[str, object]:
        """Messages of every topic for frame ``sec``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(sec in self.seen[t] for t in topics):
                    return {t: self.seen[t][sec] for t in topics}
            time.sleep(0.0005)
        raise TimeoutError(f"frame {sec}: no {topics} within {timeout} s")


class BareRelay:
    """The least rclpy work to move the node's bytes: view the input, publish three rasters."""

    def __init__(self, node: Node, max_shape: tuple[int, int]) -> None:
        h, w = max_shape
        self.rasters = {
            "instance_mask": np.zeros(h * w, np.uint16),
            "panoptic": np.zeros(h * w, np.int32),
            "semantic": np.zeros(h * w, np.uint8),
        }
        self.encodings = {"instance_mask": "mono16", "panoptic": "32SC1", "semantic": "mono8"}
        self.pubs = {n: node.create_publisher(Image, f"/bare/{n}", RELIABLE) for n in MASKS}
        self.times_ms: dict[int, float] = {}
        self.sub = node.create_subscription(Image, "/bare/image", self.on_image, RELIABLE)

    def on_image(self, msg: Image) -> None:
        """View the input pixels, build and publish the three outputs; time it."""
        start = time.perf_counter()
        pixels = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.step)
        n = msg.height * msg.width
        for name, raster in self.rasters.items():
            out = Image(height=msg.height, width=msg.width, encoding=self.encodings[name])
            out.header = msg.header
            out.step = msg.width * raster.itemsize
            data = array.array("B")
            data.frombytes(raster[:n].view(np.uint8))
            out.data = data
            self.pubs[name].publish(out)
        self.times_ms[msg.header.stamp.sec] = (time.perf_counter() - start) * 1e3
        del pixels


def spin_thread(executor: SingleThreadedExecutor) -> threading.Thread:
    """Spin ``executor`` on a thread until the context shuts down."""

    def spin() -> None:
        with contextlib.suppress(ExternalShutdownException):
            executor.spin()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


def wait_matched(node: Node, pubs: list, subs: list, timeout: float = 30.0) -> None:
    """Wait until DDS discovery has matched every endpoint (graph counts for subs on Humble)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.get_subscription_count() for p in pubs) and all(
            node.count_publishers(s.topic_name) for s in subs
        ):
            return
        time.sleep(0.05)
    raise TimeoutError("publishers and subscribers did not match")


def frame(h: int, w: int, sec: int) -> Image:
    """A bgr8 camera frame with a few shapes, stamped ``sec``."""
    img = np.full((h, w, 3), 90, np.uint8)
    img[h // 4 : h // 2, w // 4 : w // 2] = (20, 200, 40)
    img[h // 2 : 3 * h // 4, w // 2 : 7 * w // 8] = (220, 30, 30)
    msg = Image()
    msg.height, msg.width, msg.encoding, msg.step = h, w, "bgr8", w * 3
    data = array.array("B")
    data.frombytes(img.reshape(-1))
    msg.data = data
    msg.header.stamp.sec = sec
    msg.header.frame_id = "bench_camera"
    return msg


def camera(args: argparse.Namespace, sizes: list[tuple[int, int]]) -> int:
    """Client process: publish each frame to the node, then to the bare relay, one at a time."""
    rclpy.init()
    client = rclpy.create_node("bench_camera")
    rec = Recorder()
    node_topics = [f"{NS}/{m}" for m in MASKS]
    bare_topics = [f"/bare/{m}" for m in MASKS]
    subs = [
        client.create_subscription(Image, t, rec.callback(t), RELIABLE)
        for t in node_topics + bare_topics
    ]
    cam = client.create_publisher(Image, "/bench/image", RELIABLE)
    bare_cam = client.create_publisher(Image, "/bare/image", RELIABLE)
    executor = SingleThreadedExecutor()
    executor.add_node(client)
    thread = spin_thread(executor)
    try:
        wait_matched(client, [cam, bare_cam], subs)
        time.sleep(0.5)
        sec = 1
        for h, w in sizes:
            for i in range(args.warmup + args.frames):
                cam.publish(frame(h, w, sec))
                rec.wait(node_topics, sec)
                bare_cam.publish(frame(h, w, sec))
                rec.wait(bare_topics, sec)
                print(f"  {h}x{w} frame {i + 1}/{args.warmup + args.frames}", file=sys.stderr)
                sec += 1
    finally:
        rclpy.try_shutdown()
        thread.join(5)
    return 0


def measure(args: argparse.Namespace, sizes: list[tuple[int, int]]) -> int:
    """Node + bare relay in this process; the camera/consumer runs as a second process."""
    rclpy.init()
    node = CompactInstNode(
        parameter_overrides=[
            Parameter("model", value=str(args.model)),
            Parameter("backend", value=args.backend),
            Parameter("image_topic", value="/bench/image"),
            Parameter("outputs", value=[*MASKS, "latency"]),
            Parameter("ort_threads", value=args.threads),
            Parameter("input_reliability", value="reliable"),
        ]
    )
    bare_node = rclpy.create_node("bench_bare")
    relay = BareRelay(bare_node, (max(h for h, _ in sizes), max(w for _, w in sizes)))
    rec = Recorder()
    bare_node.create_subscription(
        JointState, f"{NS}/latency/frame", rec.callback("latency"), RELIABLE
    )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    executor.add_node(bare_node)
    thread = spin_thread(executor)
    cmd = [
        sys.executable,
        __file__,
        "--role",
        "camera",
        "--sizes",
        args.sizes,
        "--frames",
        str(args.frames),
        "--warmup",
        str(args.warmup),
    ]
    try:
        code = subprocess.call(cmd)
        time.sleep(0.2)
    finally:
        rclpy.try_shutdown()
        thread.join(5)
        node.destroy_node()
    if code:
        print(f"camera process failed ({code})", file=sys.stderr)
        return code
    per_size = args.warmup + args.frames
    rows = []
    for k, (h, w) in enumerate(sizes):
        secs = range(k * per_size + 1 + args.warmup, (k + 1) * per_size + 1)
        overhead, decode, publish, backend, bare = [], [], [], [], []
        for sec in secs:
            rec_msg = rec.seen["latency"][sec]
            t = dict(zip(rec_msg.name, rec_msg.position, strict=True))
            inside = sum(t[s] for s in BACKEND_STAGES)
            overhead.append(t["node"] - t["queue"] - inside)
            decode.append(t["decode"])
            publish.append(t["publish"])
            backend.append(inside)
            bare.append(relay.times_ms[sec])
        med = statistics.median
        rows.append((h, w, med(overhead), med(decode), med(publish), med(bare), med(backend)))
    print(
        f"\nnode overhead vs bare rclpy, median of {args.frames} frames; bgr8 in, "
        f"instance_mask (mono16) + panoptic (32SC1) + semantic (mono8) out; "
        f"backend {args.backend}"
    )
    print(
        f"{'size':>10} {'node ms':>9} {'decode':>8} {'publish':>8} {'bare ms':>9} "
        f"{'ratio':>7} {'backend ms':>11}"
    )
    worst = 0.0
    for h, w, node_ms, dec, pub, bare_ms, inside in rows:
        ratio = node_ms / bare_ms
        worst = max(worst, ratio)
        print(
            f"{h:>4}x{w:<5} {node_ms:9.2f} {dec:8.3f} {pub:8.2f} {bare_ms:9.2f} "
            f"{ratio:6.2f}x {inside:11.1f}"
        )
    print(f"target: ratio <= 1.5x -> {'met' if worst <= 1.5 else 'NOT met'} (worst {worst:.2f}x)")
    return 0


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--sizes", default="512x1024,1024x2048")
    parser.add_argument("--frames", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--role", choices=("measure", "camera"), default="measure")
    args = parser.parse_args()
    sizes = [(int(h), int(w)) for h, w in (s.split("x") for s in args.sizes.split(","))]
    return camera(args, sizes) if args.role == "camera" else measure(args, sizes)


if __name__ == "__main__":
    sys.exit(main())
