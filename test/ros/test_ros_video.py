"""H.264 input over real DDS: ffmpeg_image_transport's FFMPEGPacket to a batched node of two
cameras (one decoder state each), Foxglove's CompressedVideo to a single-camera node.

The message packages have no wheel: ``interface_build`` compiles the fixtures' definitions once
into cache prefixes and the nodes run with them on their paths. Frames are encoded with libx264
as a live camera encoder does (no B-frames); a stream joined inside a GOP waits for a keyframe,
and a pts gap (lost packets) waits for the next one, each counted and named on /diagnostics.
"""

from __future__ import annotations

import array
import contextlib
import importlib
import json
import time

import pytest
from interface_build import FFMPEG_IMAGE_TRANSPORT_MSGS, FOXGLOVE_MSGS, built_for_test
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params
from test_ros_multicamera import statuses
from test_ros_node import scene

from compactinst_ros.cli import main
from compactinst_ros.eval.bags import ImageBag, write_video_bag, write_video_streams
from compactinst_ros.eval.realtime import run_realtime
from compactinst_ros.ros.diagnostics import status_name
from compactinst_ros.train.synthetic import generate_bag

pytest.importorskip("rclpy")
pytest.importorskip("av", reason="the video extra (PyAV) is not installed")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image

from compactinst_ros.video import COMPRESSED_VIDEO, encode

#: a cold run compiles the two message packages (about 30 s on 2 cores); cached, about 10 s
pytestmark = pytest.mark.slow

NS = "/compactinst"
FOX = "/fox/compactinst"
CAMERAS = ("a", "b")
GOP = 3
#: 120x160 frames (even sides for yuv420p), keyframes at 0, 3, 6, 9, 12
PACKETS = list(encode([scene(120, 160, seed % 4) for seed in range(14)], "libx264", GOP))


@pytest.fixture(scope="session")
def video_prefixes(request: pytest.FixtureRequest):
    """The built ffmpeg_image_transport_msgs and foxglove_msgs prefixes (cached across runs)."""
    return [built_for_test(p, request) for p in (FFMPEG_IMAGE_TRANSPORT_MSGS, FOXGLOVE_MSGS)]


@pytest.fixture(scope="module")
def ros(video_prefixes, random_bundle):
    """(client, message modules, {camera: FFMPEGPacket publisher}, CompressedVideo publisher)."""
    with contextlib.ExitStack() as stack:
        for prefix in video_prefixes:
            stack.enter_context(prefix.activated())
        ffmpeg = importlib.import_module("ffmpeg_image_transport_msgs.msg")
        foxglove = importlib.import_module("foxglove_msgs.msg")
        domain = next_domain()
        options = {"diagnostics_period": 0.25, "outputs": ["instance_mask"]}
        batched = NodeProcess(
            domain,
            cpu_node_params(
                random_bundle,
                image_topics=[f"/{n}/image" for n in CAMERAS],
                camera_names=list(CAMERAS),
                input_transport="ffmpeg",
                **options,
            ),
        )
        single = NodeProcess(
            domain,
            cpu_node_params(
                random_bundle, image_topic="/fox/image", input_transport="foxglove", **options
            ),
            namespace="/fox",
        )
        client = Client(domain)
        try:
            client.subscribe(DiagnosticArray, "/diagnostics")
            outputs = [*(f"{NS}/{n}/instance_mask" for n in CAMERAS), f"{FOX}/instance_mask"]
            for topic in outputs:
                client.subscribe(Image, topic)
            pubs = {n: client.publisher(ffmpeg.FFMPEGPacket, f"/{n}/image/ffmpeg") for n in CAMERAS}
            fox = client.publisher(foxglove.CompressedVideo, "/fox/image/foxglove")
            client.wait_for(
                lambda: all(p.get_subscription_count() for p in [*pubs.values(), fox]),
                60,
                "both nodes subscribed to the video topics",
            )
            names = [status_name(NS, n) for n in CAMERAS] + [status_name(FOX)]
            wanted = ["ffmpeg=reliable"] * 2 + ["foxglove=reliable"]
            client.wait_for(
                lambda: [last(client, n).get("input_reliability") for n in names] == wanted,
                30,
                "video inputs re-subscribed reliable (no packet lost in the switch)",
            )
            client.wait_for(lambda: all(client.matched(t) for t in outputs), 20, "outputs")
            yield client, ffmpeg, foxglove, pubs, fox
        finally:
            client.close()
            for node in (batched, single):
                assert node.stop() == 0, node.log()


def last(client: Client, name: str) -> dict:
    """The newest report of status ``name`` ({} before its first)."""
    found = statuses(client, max(0, len(client.received("/diagnostics")) - 12)).get(name)
    return found[-1] if found else {}


def ffmpeg_packet(msgs, index: int, sec: int):
    data, key, _ = PACKETS[index]
    msg = msgs.FFMPEGPacket(width=160, height=120, encoding="h264;yuv420p;bgr8;bgr8")
    msg.header.stamp.sec = sec
    msg.header.frame_id = "camera"
    msg.pts, msg.flags = index, int(key)
    msg.data = array.array("B", data)
    return msg


def mask_at(client: Client, topic: str, sec: int):
    """The instance mask of frame ``sec`` on ``topic`` (waiting for it)."""
    mask = client.wait_for(lambda: client.stamped(topic, sec), 30, f"{topic} @{sec}")
    assert (mask.height, mask.width) == (120, 160)
    return mask


def test_batched_node_decodes_each_camera_stream(ros) -> None:
    """Camera a gets the stream from its start, camera b joins inside the first GOP: b's first
    packets wait for the keyframe, a's all give outputs, each camera with its own decoder.
    Frames are paced (the next after the outputs of the last) so the mailbox drops none."""
    client, msgs, _, pubs, _ = ros
    for index in range(6):
        pubs["a"].publish(ffmpeg_packet(msgs, index, 100 + index))
        if index >= 1:
            pubs["b"].publish(ffmpeg_packet(msgs, index, 200 + index))
        mask_at(client, f"{NS}/a/instance_mask", 100 + index)
        if index >= GOP:
            mask_at(client, f"{NS}/b/instance_mask", 200 + index)
    b = client.wait_for(
        lambda: (r := last(client, status_name(NS, "b"))) and int(r["input_errors"]) >= 2 and r,
        20,
        "camera b's packets before its keyframe counted",
    )
    assert int(b["input_errors"]) == 2
    assert "waiting for a keyframe after the start of the stream" in b["last_error"]
    assert not any(client.stamped(f"{NS}/b/instance_mask", s) for s in (201, 202))
    a = last(client, status_name(NS, "a"))
    assert (int(a["input_errors"]), int(a["frames_dropped"])) == (0, 0)


def test_lost_packets_are_dropped_until_the_next_keyframe(ros) -> None:
    client, msgs, _, pubs, _ = ros
    before = client.wait_for(
        lambda: (r := last(client, status_name(NS, "a"))) and r["frames_processed"] == "6" and r,
        20,
        "camera a settled after the first test's six frames",
    )
    for index in (6, 7, 10, 11, 12, 13):  # 8 and 9 lost (9 a keyframe); 12 is the next one
        pubs["a"].publish(ffmpeg_packet(msgs, index, 300 + index))
        if index not in (10, 11):
            mask_at(client, f"{NS}/a/instance_mask", 300 + index)
    report = client.wait_for(
        lambda: (
            (r := last(client, status_name(NS, "a")))
            and int(r["input_errors"]) >= int(before["input_errors"]) + 2
            and r
        ),
        20,
        "the packets after the gap counted",
    )
    assert int(report["input_errors"]) == int(before["input_errors"]) + 2  # pts 10, 11
    assert int(report["frames_dropped"]) == int(before["frames_dropped"]) + 2  # pts 8, 9 lost
    assert "waiting for a keyframe after 2 lost packets (pts 7 -> 10)" in report["last_error"]
    assert not any(client.stamped(f"{NS}/a/instance_mask", s) for s in (310, 311))


def test_foxglove_compressed_video_gives_outputs(ros) -> None:
    client, _, msgs, _, fox = ros
    for index in range(4):
        data, _, _ = PACKETS[index]
        msg = msgs.CompressedVideo(frame_id="camera_fox", format="h264")
        msg.timestamp.sec = 400 + index
        msg.data = array.array("B", data)
        fox.publish(msg)
        mask = mask_at(client, f"{FOX}/instance_mask", 400 + index)
        assert mask.header.frame_id == "camera_fox"
    report = client.wait_for(
        lambda: (r := last(client, status_name(FOX))) and int(r["frames_processed"]) >= 4 and r
    )
    assert int(report["input_errors"]) == 0


#: a stream with two B-frames between references, in decode order: (data, key, pts)
B_PACKETS = list(
    encode([scene(120, 160, seed % 4) for seed in range(9)], "libx264", 9, bframes=2)
)


def test_a_b_frame_stream_gives_each_picture_with_its_own_stamp(ros) -> None:
    """Packets in decode order, each message stamped with its picture's time: the decoder
    gives the pictures in presentation order, each under its own message's stamp, several at
    once after a run of B-frames; the node's one-frame mailbox takes the newest of such a burst
    and counts the others as dropped. No bad input, and every picture is accounted for."""
    client, _, msgs, _, fox = ros
    before = last(client, status_name(FOX))
    assert [pts for _, _, pts in B_PACKETS] != list(range(9))  # reordered
    for data, _, pts in B_PACKETS:
        msg = msgs.CompressedVideo(frame_id="camera_fox", format="h264")
        msg.timestamp.sec = 600 + pts
        msg.data = array.array("B", data)
        fox.publish(msg)
        time.sleep(0.5)  # paced: each burst is processed before the next
    got = [s for s in range(600, 609) if client.stamped(f"{FOX}/instance_mask", s)]
    report = client.wait_for(
        lambda: (r := last(client, status_name(FOX)))
        and int(r["frames_processed"]) >= int(before["frames_processed"]) + len(got)
        and r,
        20,
        "the stream's frames counted",
    )
    dropped = int(report["frames_dropped"]) - int(before["frames_dropped"])
    assert int(report["input_errors"]) == int(before["input_errors"]), report.get("last_error")
    assert got == sorted(got) and 600 in got and len(got) >= 3, got
    held_back = 9 - len(got) - dropped  # the last pictures wait for the packets after them
    assert 0 <= held_back <= 2, (got, dropped)


def test_realtime_replay_sends_a_video_bag_to_the_node(video_prefixes, random_bundle, tmp_path):
    """``replay --mode realtime`` publishes the recorded packets on <image_topic>/<transport>
    and points the node at that transport: every packet decodes, none is refused. The bag is
    CompressedVideo, whose stamp (the first field, as a Header's) is patched like a Header's;
    FFMPEGPacket bags take the same path."""
    msgtype = COMPRESSED_VIDEO
    frames = [(1_000_000_000 + i * 100_000_000, scene(96, 128, i % 4)) for i in range(6)]
    path = write_video_bag(tmp_path / "bag", frames, msgtype=msgtype)
    with contextlib.ExitStack() as stack:
        for prefix in video_prefixes:
            stack.enter_context(prefix.activated())
        with ImageBag(path) as bag:
            block, _ = run_realtime(
                bag,
                random_bundle,
                "onnxruntime",
                rate=2.0,
                warmup=0,
                progress=False,
                domain_id=next_domain(),
                log_path=tmp_path / "node.log",
                node_params={"ort_threads": "1"},
            )
    log = (tmp_path / "node.log").read_text()
    assert block["frames"]["sent"] == 6, log
    assert block["frames"]["processed"] >= 1, (block["frames"], block["notes"], log)
    assert block["node_exit_code"] == 0, log
    assert "bad input frame" not in log, log


def test_cameras_replay_of_h264_streams_scores_every_decoded_frame(
    video_prefixes, random_bundle, tmp_path
):
    """``replay --cameras all`` in lockstep on a bag of two cameras' H.264 streams: one batched
    node takes both as ffmpeg input, and every decoded frame of each camera is scored against
    that camera's GT by its stamp."""
    rig = tmp_path / "rig"
    generate_bag(rig, 4, 2, 64, 96, ("left", "right"), fps=10.0, progress=False)
    streams = {}
    for camera in ("left", "right"):
        with ImageBag(rig / "bag", f"/{camera}/image_raw") as bag:
            streams[f"/{camera}/image_raw/ffmpeg"] = [
                (f.stamp_ns, f.decode()[0]) for f in bag.frames()
            ]
    video = write_video_streams(tmp_path / "video", streams)
    out = tmp_path / "out"
    args = [
        "replay", str(video), "--model", str(random_bundle), "--backend", "onnxruntime",
        "--cameras", "all", "--gt-instances", str(rig / "instances.json"), "--out", str(out),
        "--warmup", "0", "--no-plots", "--quiet", "--domain", str(next_domain()),
    ]  # fmt: skip
    with contextlib.ExitStack() as stack:
        for prefix in video_prefixes:
            stack.enter_context(prefix.activated())
        assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    block = report["modes"]["lockstep"]
    assert set(block["cameras"]) == {"left", "right"} and block["nodes"] == 1
    for camera in block["cameras"].values():
        assert camera["frames"]["processed"] == 4, block["cameras"]
    assert block["accuracy"]["frames_evaluated"] == 8
