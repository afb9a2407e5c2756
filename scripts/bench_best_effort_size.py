#!/usr/bin/env python3
"""Best-effort `sensor_msgs/Image` frames larger than Fast DDS's default 512 kB shared-memory
segment, between two processes: how many arrive with Fast DDS's default transports and how many
with our loopback profile (config/fastdds_loopback.xml: a 32 MB segment).

docs/ros.md's numbers for each Fast DDS (3.2 on Kilted's wheels, 2.14 on Jazzy's) come from this
script. Each case runs a subscriber and a publisher, each in a process of its own (the profile is
read once per process) on a private ROS domain with loopback-only discovery; the publisher waits
until the subscriber is matched, sends ``--frames`` frames at ``--rate`` Hz, and the subscriber
counts the whole frames it got. "Defaults" is a profile of Fast DDS's built-in transports as they
are without one (a shared-memory transport with its default segment and UDPv4) whose UDP is held
to 127.0.0.1, so that this case, too, sends nothing beyond the host.

    . scripts/ros_env.sh && scripts/private_net.sh \
        .venv/bin/python scripts/bench_best_effort_size.py --frames 39
    export ROS_DISTRO=jazzy && . scripts/ros_env.sh && scripts/private_net.sh \
        .venv-jazzy/bin/python scripts/bench_best_effort_size.py --frames 39

Prints one Markdown row per case: the profile, the Fast DDS version, the frame size, frames
sent and frames received.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from compactinst_ros import dds_env  # noqa: E402

LOOPBACK_PROFILE = REPO / "config" / "fastdds_loopback.xml"
TOPIC = "/bench/best_effort_image"
#: Fast DDS's built-in transports as profile entries: the shared-memory transport without a
#: segment_size (its 512 kB default) and UDPv4, here only on 127.0.0.1
DEFAULTS_PROFILE = """<?xml version="1.0" encoding="UTF-8"?>
<profiles xmlns="http://www.eprosima.com">
  <transport_descriptors>
    <transport_descriptor>
      <transport_id>default_shm</transport_id>
      <type>SHM</type>
    </transport_descriptor>
    <transport_descriptor>
      <transport_id>default_udp_loopback</transport_id>
      <type>UDPv4</type>
      <interfaceWhiteList><address>127.0.0.1</address></interfaceWhiteList>
    </transport_descriptor>
  </transport_descriptors>
  <participant profile_name="defaults_on_loopback" is_default_profile="true">
    <rtps>
      <userTransports>
        <transport_id>default_shm</transport_id>
        <transport_id>default_udp_loopback</transport_id>
      </userTransports>
      <useBuiltinTransports>false</useBuiltinTransports>
    </rtps>
  </participant>
</profiles>
"""


def fastdds_version() -> str:
    """The Fast DDS wheel of this environment (3.x: ros-fastdds, 2.x: ros-fastrtps), or "?"."""
    for dist in ("ros-fastdds", "ros-fastrtps"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "?"


def qos(depth: int) -> Any:
    """Best effort, keep last ``depth``: no frame is dropped by the history, only in transit."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.BEST_EFFORT)


def subscribe(size: tuple[int, int], frames: int) -> None:
    """The subscriber role: print "ready", count whole frames until stdin closes, print the
    count as JSON."""
    import threading

    import rclpy
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node("best_effort_size_subscriber")
    expected = size[0] * size[1] * 3
    received = []
    node.create_subscription(
        Image, TOPIC, lambda msg: received.append(len(msg.data) == expected), qos(frames)
    )
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("ready", flush=True)
    while not done.is_set():
        rclpy.spin_once(node, timeout_sec=0.05)
    print(json.dumps({"received": sum(received)}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


def publish(size: tuple[int, int], frames: int, rate: float) -> None:
    """The publisher role: wait (up to 30 s) for the subscriber, send ``frames`` bgr8 frames of
    ``size`` at ``rate`` Hz, print how many were sent as JSON."""
    import rclpy
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node("best_effort_size_publisher")
    pub = node.create_publisher(Image, TOPIC, qos(frames))
    deadline = time.monotonic() + 30.0
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    matched = pub.get_subscription_count()
    time.sleep(0.5)  # the subscriber's side of the match settles too
    msg = Image(height=size[0], width=size[1], encoding="bgr8", step=size[1] * 3)
    msg.data = bytes(size[0] * size[1] * 3)
    sent = 0
    for i in range(frames if matched else 0):
        msg.header.stamp.sec = i
        pub.publish(msg)
        sent += 1
        time.sleep(1.0 / rate)
    print(json.dumps({"sent": sent, "matched": matched}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


def role_command(role: str, args: argparse.Namespace, size: str) -> list[str]:
    """This script's command line for one role process."""
    return [
        sys.executable, __file__, "--role", role, "--sizes", size,
        "--frames", str(args.frames), "--rate", str(args.rate),
    ]  # fmt: skip


def case_environment(profile: Path, domain: int) -> dict[str, str]:
    """The role processes' environment: loopback discovery, ``profile`` under the variable(s)
    this distribution's Fast DDS reads (any the environment names is replaced), ``domain``."""
    env = {k: v for k, v in os.environ.items() if k not in dds_env.PROFILE_VARIABLES}
    env = dds_env.loopback_environment(env, profile)
    env.update(ROS_DOMAIN_ID=str(domain), RMW_IMPLEMENTATION="rmw_fastrtps_cpp")
    return env


def run_case(args: argparse.Namespace, size: str, profile: Path) -> tuple[int, int]:
    """(sent, received) of one size with one profile."""
    env = case_environment(profile, args.domain or dds_env.private_domain())
    sub = subprocess.Popen(
        role_command("subscribe", args, size), env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sub.stdout is not None and sub.stdin is not None
        if sub.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the subscriber did not start (exit {sub.wait()})")
        pub = subprocess.run(
            role_command("publish", args, size), env=env, capture_output=True, text=True,
            timeout=60 + args.frames / args.rate, check=True,
        )  # fmt: skip
        published = json.loads(pub.stdout.strip().splitlines()[-1])
        if not published["matched"]:
            raise RuntimeError("the publisher never matched the subscriber")
        time.sleep(1.0)  # frames still in flight
        out, _ = sub.communicate(input="", timeout=30)
        return published["sent"], json.loads(out.strip().splitlines()[-1])["received"]
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()


def parse_size(text: str) -> tuple[int, int]:
    """"HxW" as (height, width)."""
    height, width = (int(v) for v in text.lower().split("x"))
    return height, width


def main() -> int:
    """Run every size with both profiles and print the table (or one role, with --role)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024x2048", help="comma-separated HxW bgr8 frames")
    parser.add_argument("--frames", type=int, default=39)
    parser.add_argument("--rate", type=float, default=10.0, help="frames per second")
    parser.add_argument(
        "--domain", type=int, default=0, help="ROS_DOMAIN_ID (default: a free one in 1..101)"
    )
    parser.add_argument("--role", choices=("subscribe", "publish"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "subscribe":
        subscribe(parse_size(args.sizes), args.frames)
        return 0
    if args.role == "publish":
        publish(parse_size(args.sizes), args.frames, args.rate)
        return 0
    version = fastdds_version()
    print("| profile | Fast DDS | frame | MB | sent | received |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        defaults = Path(tmp) / "fastdds_defaults_loopback.xml"
        defaults.write_text(DEFAULTS_PROFILE)
        for size in args.sizes.split(","):
            height, width = parse_size(size)
            megabytes = height * width * 3 / 1e6
            for name, profile in (("defaults", defaults), ("loopback", LOOPBACK_PROFILE)):
                sent, received = run_case(args, size, profile)
                row = (name, version, f"{size} bgr8", f"{megabytes:.2f}", sent, received)
                print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
