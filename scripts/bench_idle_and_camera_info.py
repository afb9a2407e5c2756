#!/usr/bin/env python3
"""Per-frame cost of the idle node (no output subscriber) and of camera_info matching.

idle: starts ``compactinst_node`` from the checkout ``--root`` (default this one) in a
subprocess, publishes bgr8 frames at ``--rate`` Hz with no subscriber on any output, and reads the
node process's CPU time (utime + stime of /proc/<pid>/stat) over ``--seconds``: CPU ms per
published frame. Point ``--root`` at an older checkout to compare.

camera_info: the time of ``CameraInfoRelay.publish`` per frame in this process (stamp matching
among 30 kept messages, exact and within the tolerance, without and with a subscriber).

Both run on ROS_DOMAIN_ID (default 0), so that concurrent runs can be kept apart.

    . scripts/ros_env.sh
    .venv/bin/python scripts/bench_idle_and_camera_info.py --size 1024x2048 --rate 10
"""

from __future__ import annotations

import argparse
import array
import os
import statistics
import sys
import time
from pathlib import Path

from compactinst_ros.eval.realtime import NodeProcess, node_command, ros_environment
from compactinst_ros.resources import default_model
from compactinst_ros.sizes import parse_size

REPO = Path(__file__).resolve().parents[1]
TOPIC = "/bench_idle/image"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(
    root: Path, model: Path, size: tuple[int, int], rate: float, seconds: float, settle: float
) -> dict:
    """CPU ms per frame of an idle node fed ``rate`` Hz of ``size`` bgr8 frames for ``seconds``,
    ``settle`` seconds after it has loaded."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    env = {**ros_environment(), "PYTHONPATH": str(root)}
    domain = int(env["ROS_DOMAIN_ID"])
    params = {"model": str(model), "backend": "onnxruntime", "image_topic": TOPIC}
    node = NodeProcess(node_command(params), env, Path(f"/tmp/bench_idle_{domain}.log"), cwd=root)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    cam = rclpy.create_node("bench_camera", context=context)
    pub = cam.create_publisher(
        Image, TOPIC, QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    )
    h, w = size
    msg = Image(height=h, width=w, encoding="bgr8", step=w * 3)
    msg.data = array.array("B", bytes(h * w * 3))
    try:
        deadline = time.monotonic() + 120
        while "loaded" not in node.log() and time.monotonic() < deadline:
            if node.proc.poll() is not None:
                break
            time.sleep(0.2)
        if "loaded" not in node.log() or node.proc.poll() is not None:
            raise SystemExit(f"the node did not load its model:\n{node.tail()}")
        time.sleep(settle)  # discovery settles; an idle node has unsubscribed by now
        subscribed = pub.get_subscription_count()
        start_cpu, frames = _cpu_s(node.proc.pid), 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            msg.header.stamp = cam.get_clock().now().to_msg()
            pub.publish(msg)
            frames += 1
            time.sleep(max(0.0, start + frames / rate - time.monotonic()))
        cpu = _cpu_s(node.proc.pid) - start_cpu
    finally:
        cam.destroy_node()
        rclpy.try_shutdown(context=context)
        node.stop()
    return {"frames": frames, "cpu_ms_per_frame": 1e3 * cpu / frames, "subscribed": subscribed}


def camera_info_cost(repeat: int = 2000) -> dict:
    """Median microseconds of CameraInfoRelay.publish per frame, by case, on ROS_DOMAIN_ID."""
    import rclpy
    from rclpy.qos import ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo
    from std_msgs.msg import Header

    from compactinst_ros.ros.camera_info import CameraInfoRelay

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=int(ros_environment()["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("bench_camera_info", context=context)
    relay = CameraInfoRelay(node, "/bench/camera_info", 1.0, ReliabilityPolicy.RELIABLE)
    base = 1_700_000_000_000_000_000
    for i in range(30):
        info = CameraInfo(width=2048, height=1024)
        info.header.stamp.sec, info.header.stamp.nanosec = divmod(base + i * 100_000_000, 10**9)
        relay._on_info(info)
    header = Header()
    out = {}
    cases = {"exact": 0, "within_tolerance": 400_000, "unmatched": 50_000_000}
    try:
        for subscribed in (False, True):
            sub = None
            if subscribed:
                sub = node.create_subscription(CameraInfo, "~/camera_info", lambda m: None, 1)
                time.sleep(0.5)
            for case, offset in cases.items():
                times = []
                for k in range(repeat):
                    stamp = base + (k % 30) * 100_000_000 + offset
                    header.stamp.sec, header.stamp.nanosec = divmod(stamp, 10**9)
                    t0 = time.perf_counter()
                    relay.publish(header, 1024, 2048)
                    times.append(time.perf_counter() - t0)
                label = f"{case}{', subscribed' if subscribed else ''}"
                out[label] = round(statistics.median(times) * 1e6, 1)
            if sub is not None:
                node.destroy_subscription(sub)
    finally:
        relay.destroy()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return out


def main() -> int:
    """Print both measurements."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="checkout whose node runs")
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--size", default="1024x2048", help="camera frame HxW")
    parser.add_argument("--rate", type=float, default=10.0, help="camera Hz")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds between the node loading and the count"
    )
    parser.add_argument("--skip-idle", action="store_true")
    args = parser.parse_args()
    if not args.skip_idle:
        size = parse_size(args.size)
        idle = idle_cost(args.root, args.model, size, args.rate, args.seconds, args.settle)
        print(f"idle node ({args.root}), {args.size} bgr8 at {args.rate:g} Hz: {idle}")
    print(f"camera_info relay, median us per frame: {camera_info_cost()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
