"""End-to-end node tests with the real rclpy and a random-weight bundle on ONNX Runtime."""

from __future__ import annotations

import array
import time

import cv2
import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess
from ros_messages import raster_from_image, table_from_msg

from compactinst_ros.ros.diagnostics import REASON_KEY
from compactinst_ros.structures import STAGES

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CompressedImage, Image, JointState, PointCloud2
from std_msgs.msg import Float64, String

NS = "/compactinst"
TOPIC = "/cam/image"
RASTERS = {"instance_mask": "mono16", "panoptic": "32SC1", "semantic": "mono8"}
CHANNELS = {
    "bgr8": 3,
    "rgb8": 3,
    "bgra8": 4,
    "rgba8": 4,
    "mono8": 1,
    "yuv422": 2,
    "uyvy": 2,
    "yuv422_yuy2": 2,
    "yuyv": 2,
}

_stamp = iter(range(1000, 10**6))


def scene(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A bgr8 test frame with a few solid shapes."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), 90, np.uint8)
    for _ in range(4):
        x, y = int(rng.integers(0, w - 20)), int(rng.integers(0, h - 20))
        cv2.rectangle(img, (x, y), (x + w // 4, y + h // 4), rng.integers(0, 255, 3).tolist(), -1)
    return img


def image_msg(pixels: np.ndarray, encoding: str, pad: int = 0, sec: int | None = None) -> Image:
    """sensor_msgs/Image of an HxWxC array with ``pad`` bytes of row padding."""
    h, w = pixels.shape[:2]
    rows = pixels.reshape(h, -1)
    if pad:
        rows = np.concatenate([rows, np.full((h, pad), 7, np.uint8)], axis=1)
    msg = Image(height=h, width=w, encoding=encoding, step=rows.shape[1])
    msg.header.stamp.sec = next(_stamp) if sec is None else sec
    msg.header.frame_id = f"camera_{encoding}"
    msg.data = array.array("B", np.ascontiguousarray(rows).tobytes())
    return msg


def encode_as(bgr: np.ndarray, encoding: str) -> np.ndarray:
    """The frame in ``encoding``'s own layout."""
    conv = {
        "bgr8": None,
        "rgb8": cv2.COLOR_BGR2RGB,
        "bgra8": cv2.COLOR_BGR2BGRA,
        "rgba8": cv2.COLOR_BGR2RGBA,
        "mono8": cv2.COLOR_BGR2GRAY,
    }
    if encoding in conv:
        out = bgr if conv[encoding] is None else cv2.cvtColor(bgr, conv[encoding])
        return out.reshape(bgr.shape[0], bgr.shape[1], CHANNELS[encoding])
    yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV)
    y, u, v = yuv[..., 0], yuv[:, 0::2, 1], yuv[:, 0::2, 2]
    out = np.empty((bgr.shape[0], bgr.shape[1], 2), np.uint8)
    out[..., 1 if encoding in ("yuv422", "uyvy") else 0] = y
    chroma = out[..., 0 if encoding in ("yuv422", "uyvy") else 1]
    chroma[:, 0::2], chroma[:, 1::2] = u, v
    return out


@pytest.fixture(scope="module")
def ros(random_bundle):
    """(node process, client, image publisher, compressed publisher) shared by this module."""
    domain = next_domain()
    node = NodeProcess(
        domain,
        {
            "model": random_bundle,
            "backend": "onnxruntime",
            "ort_threads": 1,
            "score_threshold": 0.0,
            "object_mask_threshold": 0.0,
            "overlap_threshold": 0.0,
            "max_instances": 20,
            "image_topic": TOPIC,
            "input_transport": "both",
            "diagnostics_period": 0.25,
            "tracking": False,  # per-frame ids: these tests check the 1..N score-order contract
        },
    )
    client = Client(domain)
    try:
        client.subscribe(DiagnosticArray, "/diagnostics")
        for name in RASTERS:
            client.subscribe(Image, f"{NS}/{name}")
        client.subscribe(Image, f"{NS}/overlay")
        client.subscribe(PointCloud2, f"{NS}/instance_table")
        client.subscribe(PointCloud2, f"{NS}/panoptic_segments")
        client.subscribe(JointState, f"{NS}/latency/frame")
        for stage in STAGES:
            client.subscribe(Float64, f"{NS}/latency/{stage}")
        from rclpy.qos import DurabilityPolicy, QoSProfile

        client.subscribe(
            String, f"{NS}/labels", QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        )
        raw = client.publisher(Image, TOPIC)
        comp = client.publisher(CompressedImage, TOPIC + "/compressed", reliable=False)
        client.wait_for(
            lambda: (
                client.latest_diagnostics().get("input_reliability")
                == "raw=reliable, compressed=best_effort"
            ),
            30,
            "node ready with QoS matched to both publishers",
        )
        client.wait_for(lambda: raw.get_subscription_count() and comp.get_subscription_count())
        client.wait_for(
            lambda: all(client.matched(topic) for topic in client.subs),
            10,
            "output matching",
        )
        yield node, client, raw, comp
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def wait_outputs(client: Client, sec: int, topics: tuple[str, ...] | None = None) -> dict:
    """The messages of every output topic for the frame stamped ``sec``."""
    topics = topics or (
        *(f"{NS}/{n}" for n in RASTERS),
        f"{NS}/overlay",
        f"{NS}/instance_table",
        f"{NS}/latency/frame",
    )
    client.wait_for(
        lambda: all(client.stamped(t, sec) for t in topics), 30, f"outputs of frame {sec}"
    )
    return {
        t.rsplit("/", 1)[-1] if "latency" not in t else "latency": client.stamped(t, sec)
        for t in topics
    }


@pytest.mark.parametrize("encoding", list(CHANNELS))
def test_every_encoding_gives_outputs_with_the_input_header(ros, encoding):
    _, client, raw, _ = ros
    h, w = (96, 128) if encoding != "mono8" else (100, 150)
    msg = image_msg(encode_as(scene(h, w), encoding), encoding, pad=16 if "8" in encoding else 0)
    raw.publish(msg)
    out = wait_outputs(client, msg.header.stamp.sec)
    for name, enc in RASTERS.items():
        img = out[name]
        assert (img.height, img.width, img.encoding) == (h, w, enc)
        assert img.header.frame_id == msg.header.frame_id
        assert img.header.stamp.nanosec == msg.header.stamp.nanosec
        assert len(img.data) == img.step * h
    overlay = out["overlay"]
    assert (overlay.height, overlay.width, overlay.encoding) == (h, w, "bgr8")
    assert out["latency"].header.frame_id == msg.header.frame_id


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_compressed_input(ros, fmt):
    _, client, _, comp = ros
    ok, data = cv2.imencode("." + ("jpg" if fmt == "jpeg" else fmt), scene(120, 160, 3))
    assert ok
    msg = CompressedImage(format=fmt, data=array.array("B", data.tobytes()))
    msg.header.stamp.sec = sec = next(_stamp)
    msg.header.frame_id = "camera_compressed"
    comp.publish(msg)
    out = wait_outputs(client, sec)
    assert (out["instance_mask"].height, out["instance_mask"].width) == (120, 160)
    assert out["panoptic"].header.frame_id == "camera_compressed"


def test_raster_ids_agree_with_the_instance_table(ros):
    _, client, raw, _ = ros
    msg = image_msg(scene(144, 192, 5), "bgr8")
    raw.publish(msg)
    out = wait_outputs(
        client, msg.header.stamp.sec, (f"{NS}/instance_mask", f"{NS}/instance_table")
    )
    raster = raster_from_image(out["instance_mask"])
    table = table_from_msg(out["instance_table"])
    assert len(table) > 0, "the random model at score_threshold 0 must yield instances"
    ids, counts = np.unique(raster[raster > 0], return_counts=True)
    assert ids.tolist() == table["id"].tolist() == list(range(1, len(table) + 1))
    assert counts.tolist() == table["area"].tolist()
    for row in table:
        ys, xs = np.nonzero(raster == row["id"])
        assert (row["x0"], row["y0"], row["x1"], row["y1"]) == (
            xs.min(),
            ys.min(),
            xs.max() + 1,
            ys.max() + 1,
        )
    assert np.all(np.diff(table["score"]) <= 0), "ids are ranks in score order"
    labels = client.wait_for(lambda: client.received(f"{NS}/labels"), 10, "labels")
    assert set(table["label_id"].tolist()) <= {
        e["id"] for e in __import__("json").loads(labels[-1].data)
    }


def test_panoptic_ids_are_self_describing_and_match_the_segment_table(ros):
    _, client, raw, _ = ros
    msg = image_msg(scene(96, 160, 8), "bgr8")
    raw.publish(msg)
    out = wait_outputs(client, msg.header.stamp.sec, (f"{NS}/panoptic", f"{NS}/panoptic_segments"))
    raster = raster_from_image(out["panoptic"])
    table = table_from_msg(out["panoptic_segments"])
    present = set(np.unique(raster).tolist()) - {0}
    assert present == set(table["id"].tolist())
    for row in table:
        label = row["id"] // 1000 if row["isthing"] else row["id"]
        assert label == row["label_id"]
        assert int((raster == row["id"]).sum()) == row["area"]


def test_latency_topics_and_stamped_record_are_positive(ros):
    _, client, raw, _ = ros
    msg = image_msg(scene(96, 128, 2), "bgr8")
    raw.publish(msg)
    record = wait_outputs(client, msg.header.stamp.sec, (f"{NS}/latency/frame",))["latency"]
    assert list(record.name) == list(STAGES)
    values = dict(zip(record.name, record.position, strict=True))
    assert all(v > 0 for v in values.values()), values
    assert values["node"] >= values["inference"] >= values["encoder"] + values["decoder"]
    for stage in STAGES:
        got = client.wait_for(lambda s=stage: client.received(f"{NS}/latency/{s}"), 10, stage)
        assert got[-1].data > 0


def test_burst_is_dropped_and_counted_never_queued(ros):
    _, client, raw, _ = ros
    before = client.settled_diagnostics()
    frames = [image_msg(scene(240, 320, i), "bgr8") for i in range(30)]
    for msg in frames:  # ~200 Hz: faster than the worker, slower than the callbacks
        raw.publish(msg)
        time.sleep(0.005)
    last = frames[-1].header.stamp.sec
    wait_outputs(client, last, (f"{NS}/instance_mask",))

    def settled() -> dict | None:
        d = client.latest_diagnostics()
        rec, proc, drop = (
            int(d[k]) for k in ("frames_received", "frames_processed", "frames_dropped")
        )
        idle = int(d["frames_skipped_no_subscribers"])
        return (
            d
            if rec - int(before["frames_received"]) >= 2
            and rec == proc + drop + idle + int(d["input_errors"]) + int(d["errors"])
            else None
        )

    diag = client.wait_for(settled, 20, "counters to settle")
    processed = int(diag["frames_processed"]) - int(before["frames_processed"])
    dropped = int(diag["frames_dropped"]) - int(before["frames_dropped"])
    assert dropped > 0, diag
    assert processed < len(frames)
    got = {m.header.stamp.sec for m in client.received(f"{NS}/instance_mask")}
    burst = [m.header.stamp.sec for m in frames]
    assert len(got & set(burst)) == processed, "every processed frame published once"
    assert last in got, "the newest frame always wins"


BAD_INPUTS = {
    "unknown encoding": (dict(encoding="32SC1"), "unsupported image encoding"),
    "truncated data": (dict(truncate=True), "fewer than height x step"),
    "zero size": (dict(height=0), "zero size"),
    "huge image": (dict(height=40000, width=40000), "side limit"),
    "corrupt jpeg": (dict(compressed=True), "could not be decoded"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_reported_and_the_next_frame_processed(ros, case):
    _, client, raw, comp = ros
    change, text = BAD_INPUTS[case]
    before = int(client.settled_diagnostics()["input_errors"])
    if change.get("compressed"):
        _ok, data = cv2.imencode(".jpg", scene(64, 64))
        bad = CompressedImage(format="jpeg", data=array.array("B", data.tobytes()[:200]))
        comp.publish(bad)
    else:
        bad = image_msg(scene(64, 80), "bgr8")
        if change.get("truncate"):
            bad.data = bad.data[: len(bad.data) // 2]
        for key in ("encoding", "height", "width"):
            if key in change:
                setattr(bad, key, change[key])
        raw.publish(bad)
    diag = client.wait_for(
        lambda: (d := client.latest_diagnostics()) and int(d["input_errors"]) > before and d,
        20,
        f"{case} on /diagnostics",
    )
    assert text in diag["last_error"], diag["last_error"]
    time.sleep(0.05)
    good = image_msg(scene(64, 80, 1), "bgr8")
    raw.publish(good)
    wait_outputs(client, good.header.stamp.sec, (f"{NS}/instance_mask",))


#: bad frames whose reasons the cases above do not use (those may still be in their log
#: window): the change, what the log line says, what its reason on /diagnostics says
DISTINCT_BAD_FRAMES = (
    (dict(step=10), "step 10 is smaller", "step N is smaller than width x channels = N"),
    (dict(encoding="yuv422", width=79), "even width, got 79", "even width, got N"),
    (dict(format="jpeg", data=b""), "compressed image is empty", "compressed image is empty"),
    (dict(format="tiff", data=b"II*\0"), "format 'tiff' is not", "format '...' is not"),
    (dict(format="png", data=b"\xff\xd8\xff" + bytes(64)), "says 'png' but", "says '...' but"),
)


def test_distinct_bad_frames_in_quick_succession_are_each_logged_and_counted(ros):
    """Each reason has its own log window, and /diagnostics counts every reason."""
    node, client, raw, comp = ros
    before = int(client.settled_diagnostics()["input_errors"])
    log_start = len(node.log())
    for change, _, _ in DISTINCT_BAD_FRAMES:
        if "data" in change:
            comp.publish(CompressedImage(format=change["format"], data=change["data"]))
        else:
            bad = image_msg(scene(64, 80), "bgr8")
            for key, value in change.items():
                setattr(bad, key, value)
            raw.publish(bad)
        time.sleep(0.15)  # one frame in the mailbox at a time: none replaced unprocessed
    diag = client.wait_for(
        lambda: (d := client.latest_diagnostics())
        and int(d["input_errors"]) >= before + len(DISTINCT_BAD_FRAMES)
        and d,
        20,
        "every bad frame counted",
    )
    logged = [line for line in node.log()[log_start:].splitlines() if "bad input frame" in line]
    reasons = [key for key in diag if key.startswith(REASON_KEY)]
    for _, in_log, reason in DISTINCT_BAD_FRAMES:
        assert sum(in_log in line for line in logged) == 1, (in_log, logged)
        assert sum(reason in key and int(diag[key]) >= 1 for key in reasons) == 1, (reason, diag)


def test_input_qos_follows_the_publishers(ros):
    _, client, _, _ = ros
    d = client.wait_for(
        lambda: (
            (d := client.latest_diagnostics())
            and "raw=reliable" in d["input_reliability"]
            and "compressed=best_effort" in d["input_reliability"]
            and d
        ),
        10,
        "matched reliability",
    )
    assert d["backend"] == "onnxruntime"
    assert d["model"] == "compactinst_demo"
    assert d["precision"] == "fp32"  # precision: auto, ONNX Runtime's default, as it reports
