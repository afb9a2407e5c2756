"""~/detections_3d over real DDS: a depth camera's frames paired by stamp, lifted, counted.

vision_msgs is built by ``interface_build`` (as for ~/detections) and the node runs with that
prefix on its paths. The random-weight model at score threshold 0 yields instances anywhere, so
the depth is a plane: every instance must lift to it. A LiDAR cloud is lifted on the CPU node
and on the node's TensorRT path (the CPU stand-ins of test/gpu/emu, the lift kernels on the
emulator).
"""

from __future__ import annotations

import array
import contextlib
import importlib
import importlib.util
import io
import json
import shutil
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from interface_build import TF2_MSGS, VISION_MSGS, built_for_test
from ros_domains import next_domain
from ros_harness import REPO, Client, NodeProcess, cpu_node_params
from ros_messages import raster_from_image
from test_ros_node import image_msg, scene

from compactinst_ros import cli
from compactinst_ros.bundle import ModelBundle
from compactinst_ros.errors import ConfigError
from compactinst_ros.overlay import draw_captions, overlay_bgr
from compactinst_ros.ros.convert import table_from_msg
from compactinst_ros.ros.depth import MIN_MARKER_M
from compactinst_ros.ros.params import PARAMETERS, read_config
from compactinst_ros.spatial.cloud import rigid_transform, transform_points
from compactinst_ros.spatial.tf_buffer import Transform, quat_matrix
from compactinst_ros.structures import FrameMeta, FrameResult, Instances, PostprocessOptions

pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TransformStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2, PointField
from visualization_msgs.msg import Marker, MarkerArray

#: a cold run compiles vision_msgs (about 20-30 s on 2 cores); cached runs take seconds
pytestmark = pytest.mark.slow

NS = "/compactinst"
TOPIC = "/cam/image_raw"
INFO = "/cam/camera_info"
DEPTH = "/cam/depth/image_raw"
H, W = 120, 160
FX, CX, CY = 100.0, 79.5, 59.5
PLANE_M = 4.0


def camera_info(sec: int) -> CameraInfo:
    msg = CameraInfo(height=H, width=W, distortion_model="plumb_bob")
    msg.k = [FX, 0.0, CX, 0.0, FX, CY, 0.0, 0.0, 1.0]
    msg.header.stamp.sec = sec
    return msg


def depth_msg(sec: int, encoding: str) -> Image:
    """A plane PLANE_M ahead, as 16UC1 millimetres or 32FC1 metres, with a NaN/0 hole."""
    if encoding == "16UC1":
        depth = np.full((H, W), PLANE_M * 1000, np.uint16)
        depth[:10] = 0
    else:
        depth = np.full((H, W), PLANE_M, np.float32)
        depth[:10] = np.nan
    msg = Image(height=H, width=W, encoding=encoding, step=W * depth.itemsize)
    msg.header.stamp.sec = sec
    msg.data = array.array("B", depth.tobytes())
    return msg


def compressed_depth_msg(sec: int, metres: float) -> CompressedImage:
    """A plane ``metres`` ahead as image_transport's compressedDepth PNG of 16UC1 millimetres
    (a 12-byte ConfigHeader, unused for 16UC1, then the PNG), with a 0 hole."""
    depth = np.full((H, W), round(metres * 1000), np.uint16)
    depth[:10] = 0
    ok, png = cv2.imencode(".png", depth)
    assert ok
    msg = CompressedImage(format="16UC1; compressedDepth png")
    msg.header.stamp.sec = sec
    msg.data = bytes(12) + png.tobytes()
    return msg


@pytest.fixture(autouse=True, scope="module")
def _built_modules_forgotten():
    """After this module, the built interface modules leave this process: later modules (the
    tool test) ask whether vision_msgs is installed here, and it is not."""
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("vision_msgs", "tf2_msgs")]:
        del sys.modules[name]


def lifting_node_params(model: Path, **params: Any) -> dict[str, Any]:
    """A CPU node keeping every instance of the random model (score 0, at most 10), whose
    diagnostics come four times a second, plus ``params``: the topics of the test's cameras."""
    return cpu_node_params(
        model, score_threshold=0.0, max_instances=10, diagnostics_period=0.25, **params
    )


@pytest.fixture(scope="module")
def vision_msgs_prefix(request: pytest.FixtureRequest):
    """The built vision_msgs prefix (cached across runs); skips only if the toolchain is missing."""
    return built_for_test(VISION_MSGS, request)


@pytest.fixture(scope="module")
def depth_node(vision_msgs_prefix, random_bundle):
    """(vision_msgs.msg, client, {topic: publisher}, node) with a node taking colour, info and
    depth."""
    with vision_msgs_prefix.activated():
        msgs = importlib.import_module("vision_msgs.msg")
        domain = next_domain()
        node = NodeProcess(
            domain,
            lifting_node_params(
                random_bundle,
                image_topic=TOPIC,
                camera_info_topic=INFO,
                depth_topic=DEPTH,
                outputs=["instance_mask", "instance_table", "overlay"],
            ),
        )
        client = Client(domain)
        try:
            reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            client.subscribe(msgs.Detection3DArray, f"{NS}/detections_3d", reliable)
            client.subscribe(MarkerArray, f"{NS}/markers_3d", reliable)
            client.subscribe(Image, f"{NS}/instance_mask", reliable)
            client.subscribe(PointCloud2, f"{NS}/instance_table", reliable)
            client.subscribe(Image, f"{NS}/overlay", reliable)
            client.subscribe(DiagnosticArray, "/diagnostics")
            pubs = {
                TOPIC: client.publisher(Image, TOPIC),
                INFO: client.publisher(CameraInfo, INFO),
                DEPTH: client.publisher(Image, DEPTH),
            }
            client.wait_for(
                lambda: (
                    all(client.matched(t) for t in client.subs)
                    and all(p.get_subscription_count() for p in pubs.values())
                ),
                60,
                f"the node's subscriptions and publishers (log {node.log_path})",
            )
            client.domain = domain  # for the tool's --domain-id
            yield msgs, client, pubs, node
        finally:
            client.close()
            code = node.stop()
            assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def markers_of(client: Client, sec: int) -> list | None:
    """The markers of the MarkerArray of the frame stamped ``sec`` (None: not received)."""
    arrays = client.received(f"{NS}/markers_3d")
    found = [a.markers for a in arrays if a.markers and a.markers[0].header.stamp.sec == sec]
    return found[-1] if found else None


def _send(pubs, sec: int, encoding: str | None, settle: float = 0.0) -> None:
    """Camera_info and (unless ``encoding`` is None) depth first, then, ``settle`` s later,
    the colour frame."""
    pubs[INFO].publish(camera_info(sec))
    if encoding is not None:
        pubs[DEPTH].publish(depth_msg(sec, encoding))
    time.sleep(settle)
    pubs[TOPIC].publish(image_msg(scene(H, W, sec), "bgr8", sec=sec))


def first_lifted(client: Client, topics: Any, secs: range, send: Any) -> int:
    """The first stamp of ``secs`` whose frame, sent with its depth (or cloud) by ``send(sec)``,
    got every output on ``topics``. Depth and colour come on separate subscriptions, so on a
    loaded host a frame may be taken before its depth arrived (its 3-D is then skipped and
    counted, as designed): a later frame with its own depth must lift."""
    topics = list(topics)
    for sec in secs:
        send(sec)
        try:
            client.wait_for(lambda sec=sec: all(client.stamped(t, sec) for t in topics), 8)
            return sec
        except AssertionError:
            continue
    raise AssertionError(f"no frame stamped {secs.start}..{secs.stop - 1} got all of {topics}")


@pytest.mark.parametrize("encoding", ["16UC1", "32FC1"])
def test_instances_lift_to_the_depth_plane_with_the_2d_ids(depth_node, encoding):
    msgs, client, pubs, _ = depth_node
    client.wait_for(lambda: client.matched(f"{NS}/detections_3d"), 10, "detections_3d")
    topics = (f"{NS}/detections_3d", f"{NS}/instance_mask")
    start = {"16UC1": 510, "32FC1": 520}[encoding]
    sec = first_lifted(
        client, topics, range(start, 600, 20), lambda s: _send(pubs, s, encoding, settle=0.2)
    )
    markers = client.wait_for(lambda: markers_of(client, sec), 10, "~/markers_3d")
    dets = client.stamped(topics[0], sec)
    raster = raster_from_image(client.stamped(topics[1], sec))
    assert isinstance(dets, msgs.Detection3DArray)
    assert len(dets.detections) > 0, "the random model at score_threshold 0 must yield instances"
    ids = set(np.unique(raster[raster > 0]).tolist())
    assert {int(d.id) for d in dets.detections} <= ids
    for det in dets.detections:
        centre = det.results[0].pose.pose.position
        assert centre.z == pytest.approx(PLANE_M, abs=1e-3)
        ys, xs = np.nonzero(raster == int(det.id))
        # the eroded mask's mean stays inside the instance's box
        assert (xs.min() - CX) * PLANE_M / FX <= centre.x <= (xs.max() - CX) * PLANE_M / FX
        assert (ys.min() - CY) * PLANE_M / FX <= centre.y <= (ys.max() - CY) * PLANE_M / FX
        # the box stands on the ground (its z axis the optical frame's up, -y) and lies along
        # the plane: its thin ground axis (box y) is the optical z, with no depth extent
        o = det.bbox.center.orientation
        turn = quat_matrix(np.array([o.x, o.y, o.z, o.w]))
        np.testing.assert_allclose(turn[:, 2], [0, -1, 0], atol=1e-6)
        np.testing.assert_allclose(np.abs(turn[:, 1]), [0, 0, 1], atol=1e-3)
        assert det.bbox.size.y == pytest.approx(MIN_MARKER_M, abs=1e-3)
        # each side is sqrt(12) x the eroded inliers' spread along it, which a spread of e
        # pixels bounds by sqrt(3) e (half at each end); the random model's instances may be
        # a few pixels tall, so the floor is the marker minimum, not a size of our choosing
        metres_per_px = PLANE_M / FX
        for side, extent in ((det.bbox.size.x, np.ptp(xs)), (det.bbox.size.z, np.ptp(ys))):
            assert (
                MIN_MARKER_M - 1e-9
                <= side
                <= max(np.sqrt(3) * extent * metres_per_px, MIN_MARKER_M) + 1e-6
            )
        covariance = np.reshape(det.results[0].pose.covariance, (6, 6))
        assert covariance[2, 2] == pytest.approx(0.0, abs=1e-5)  # the plane's depth spread
        assert covariance[0, 0] > 1e-4 and covariance[3:, :].sum() == 0
    # the spread, not the floor, sizes the boxes: the largest instance spans many pixels
    assert max(d.bbox.size.x for d in dets.detections) > 2 * MIN_MARKER_M
    assert markers[0].action == Marker.DELETEALL  # the last frame's boxes go
    boxes = {m.id: m for m in markers if m.type == Marker.CUBE}
    captions = {m.id: m.text for m in markers if m.type == Marker.TEXT_VIEW_FACING}
    assert set(boxes) == set(captions) == {int(d.id) for d in dets.detections}
    for det in dets.detections:
        box = boxes[int(det.id)]
        assert box.pose.position.z == pytest.approx(PLANE_M, abs=1e-3)
        assert box.pose.orientation == det.bbox.center.orientation
        assert box.header.frame_id == dets.header.frame_id
        centre = det.results[0].pose.pose.position
        distance = float(np.linalg.norm([centre.x, centre.y, centre.z]))
        assert captions[int(det.id)].endswith(f" {distance:.1f} m")


def overlay_of(image: np.ndarray, mask: Image, table: PointCloud2, model, distances=None):
    """The node's overlay as the CPU pipeline draws it from the published instance raster and
    table (colours by track id, the default alpha), captioned with ``distances`` (by row)."""
    rows = table_from_msg(table)
    raster = raster_from_image(mask)
    instances = Instances(
        ids=rows["id"].astype(np.uint16),
        class_index=rows["class_index"].astype(np.int32),
        label_id=rows["label_id"].astype(np.int32),
        score=rows["score"].astype(np.float32),
        box=np.stack([rows[k] for k in ("x0", "y0", "x1", "y1")], 1).astype(np.float32),
        area=rows["area"].astype(np.int64),
    )
    h, w = raster.shape
    result = FrameResult(FrameMeta(h, w, h, w, 1.0, h, w), instances, raster)
    labels = ModelBundle.load(model).labels
    alpha = PostprocessOptions().overlay_alpha
    canvas = overlay_bgr(image, "bgr8", result, labels, alpha, captions=False)
    return draw_captions(canvas, result, labels, distances=distances)


def test_the_overlay_captions_carry_each_instance_s_distance(depth_node, random_bundle):
    _, client, pubs, _ = depth_node
    topics = [f"{NS}/{t}" for t in ("detections_3d", "instance_mask", "instance_table", "overlay")]
    sec = first_lifted(
        client, topics, range(530, 600, 20), lambda s: _send(pubs, s, "16UC1", settle=0.2)
    )
    dets, mask, table, overlay = (client.stamped(t, sec) for t in topics)
    assert dets.detections, "the random model at score_threshold 0 must yield instances"
    metres = {
        int(d.id): float(np.linalg.norm([getattr(d.bbox.center.position, a) for a in "xyz"]))
        for d in dets.detections
    }
    ids = table_from_msg(table)["id"]
    distances = np.array([metres.get(int(i), np.nan) for i in ids])
    image = scene(H, W, sec)
    got = np.frombuffer(bytes(overlay.data), np.uint8).reshape(H, W, 3)
    want = overlay_of(image, mask, table, random_bundle, distances)
    assert np.abs(got.astype(int) - want).max() <= 1
    assert not np.array_equal(want, overlay_of(image, mask, table, random_bundle))


def test_a_frame_without_depth_keeps_its_2d_outputs_and_is_counted(depth_node):
    _, client, pubs, _ = depth_node
    sec = 503
    before = int(client.latest_diagnostics().get("depth_missing", "0"))
    _send(pubs, sec, None)
    client.wait_for(lambda: client.stamped(f"{NS}/instance_mask", sec), 30, "2-D output")
    client.wait_for(
        lambda: int(client.latest_diagnostics().get("depth_missing", "0")) > before,
        10,
        "the missing depth counted on /diagnostics",
    )
    facts = client.latest_diagnostics()
    empty = client.wait_for(lambda: client.stamped(f"{NS}/detections_3d", sec), 10, "empty 3-D")
    assert list(empty.detections) == []  # one message per frame: a synchroniser never waits
    assert "no depth image on /cam/depth/image_raw" in facts["depth_last_problem"]
    assert 0.0 < float(facts["depth_pairing_rate"]) < 1.0
    assert float(facts["depth_age_ms"]) == 0.0


def test_depth_of_a_wrong_encoding_is_refused_with_the_reason(depth_node):
    _, client, pubs, node = depth_node
    sec = 504
    before = int(client.latest_diagnostics().get("depth_refused", "0"))
    pubs[INFO].publish(camera_info(sec))
    wrong = depth_msg(sec, "16UC1")
    wrong.encoding, wrong.width, wrong.step = "mono8", W * 2, W * 2  # same bytes, not depth
    pubs[DEPTH].publish(wrong)
    pubs[TOPIC].publish(image_msg(scene(H, W, sec), "bgr8", sec=sec))
    client.wait_for(lambda: client.stamped(f"{NS}/instance_mask", sec), 30, "2-D output")
    client.wait_for(
        lambda: int(client.latest_diagnostics().get("depth_refused", "0")) > before,
        10,
        "the refused depth counted on /diagnostics",
    )
    problem = client.latest_diagnostics()["depth_last_problem"]
    assert "depth refused" in problem and "mono8" in problem, problem
    empty = client.wait_for(lambda: client.stamped(f"{NS}/detections_3d", sec), 10, "empty 3-D")
    assert list(empty.detections) == [] and empty.header.stamp.sec == sec
    logged = "frame without 3-D: depth refused"  # logged (rate-limited), not only counted
    client.wait_for(lambda: logged in node.log(), 10, f"'{logged}' in {node.log_path}")


def test_ros_table_shows_the_3d_columns(depth_node):
    """``compactinst ros table`` joins ~/detections_3d to the instance table by stamp."""
    _, client, pubs, _ = depth_node
    argv = ["ros", "--domain-id", str(client.domain), "--timeout", "20", "table", NS, "--json"]
    result: list = []

    def run() -> None:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            result.append((cli.main(argv), out.getvalue() + err.getvalue()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    sec = 800
    while thread.is_alive() and sec < 900:
        _send(pubs, sec, "32FC1")
        sec += 1
        thread.join(0.3)
    assert result, "compactinst ros table did not return"
    code, out = result[0]
    assert code == 0, out
    table = json.loads(out.splitlines()[-1])
    assert table["rows"], table
    for row in table["rows"]:
        assert {"x", "y", "z", "distance"} <= set(row)
        if row["z"] is not None:  # an instance with too few valid pixels has no 3-D
            assert row["z"] == pytest.approx(PLANE_M, abs=1e-3)
    assert any(row["z"] is not None for row in table["rows"])


def test_depth_parameters_are_checked_with_their_fix():
    values = {name: spec.default for name, spec in PARAMETERS.items()} | {"model": "/m"}
    one = read_config(values | {"depth_topic": DEPTH, "camera_info_topic": INFO})
    assert one.cameras[0].depth_topic == DEPTH and one.depth_tolerance_ms == 20.0
    with pytest.raises(ConfigError, match="set camera_info_topic"):
        read_config(values | {"depth_topic": DEPTH})
    several = values | {
        "image_topics": ["/a/image", "/b/image"],
        "camera_names": ["a", "b"],
        "camera_info_topics": ["/a/info", "/b/info"],
    }
    cameras = read_config(several | {"depth_topics": ["/a/depth", ""]}).cameras
    assert [c.depth_topic for c in cameras] == ["/a/depth", ""]
    with pytest.raises(ConfigError, match="one per camera in depth_topics"):
        read_config(several | {"depth_topic": DEPTH})
    with pytest.raises(ConfigError, match="depth_topics has 1 entries"):
        read_config(several | {"depth_topics": ["/a/depth"]})
    mixed = read_config(several | {"depth_topics": ["/a/depth", ""], "cloud_topics": ["", CLOUD]})
    assert [(c.depth_topic, c.cloud_topic) for c in mixed.cameras] == [
        ("/a/depth", ""),
        ("", CLOUD),
    ]
    with pytest.raises(ConfigError, match="give it one of the two"):
        read_config(
            values | {"depth_topic": DEPTH, "cloud_topic": CLOUD, "camera_info_topic": INFO}
        )


CAMERAS = {"left": 3.0, "front": 5.0, "right": 7.0}  # each camera sees its own plane


@pytest.fixture(scope="module")
def batched_node(vision_msgs_prefix, random_bundle):
    """(client, {camera: {topic: publisher}}) with one batched node of three RGB-D cameras whose
    depth comes as image_transport compressedDepth."""
    with vision_msgs_prefix.activated():
        msgs = importlib.import_module("vision_msgs.msg")
        domain = next_domain()
        node = NodeProcess(
            domain,
            lifting_node_params(
                random_bundle,
                image_topics=[f"/{c}/image_raw" for c in CAMERAS],
                camera_names=list(CAMERAS),
                camera_info_topics=[f"/{c}/camera_info" for c in CAMERAS],
                depth_topics=[f"/{c}/depth/image_raw" for c in CAMERAS],
                depth_transport="compressedDepth",  # the single-camera node takes raw depth
                outputs=["instance_mask"],
            ),
        )
        client = Client(domain)
        try:
            reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            pubs = {}
            for camera in CAMERAS:
                client.subscribe(msgs.Detection3DArray, f"{NS}/{camera}/detections_3d", reliable)
                pubs[camera] = {
                    TOPIC: client.publisher(Image, f"/{camera}/image_raw"),
                    INFO: client.publisher(CameraInfo, f"/{camera}/camera_info"),
                    DEPTH: client.publisher(
                        CompressedImage, f"/{camera}/depth/image_raw/compressedDepth"
                    ),
                }
            every = [p for topics in pubs.values() for p in topics.values()]
            client.wait_for(
                lambda: (
                    all(client.matched(t) for t in client.subs)
                    and all(p.get_subscription_count() for p in every)
                ),
                60,
                f"the node's subscriptions and publishers (log {node.log_path})",
            )
            yield client, pubs
        finally:
            client.close()
            code = node.stop()
            assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def test_three_cameras_in_the_batched_node_each_pair_with_their_own_compressed_depth(
    batched_node,
):
    client, pubs = batched_node
    outputs = {c: f"{NS}/{c}/detections_3d" for c in CAMERAS}

    def send_round(sec: int) -> None:
        for camera, plane in CAMERAS.items():
            pubs[camera][INFO].publish(camera_info(sec))
            pubs[camera][DEPTH].publish(compressed_depth_msg(sec, plane))
        time.sleep(0.2)
        for camera in CAMERAS:  # one round: the three frames share the stamp
            pubs[camera][TOPIC].publish(image_msg(scene(H, W, 7), "bgr8", sec=sec))

    sec = first_lifted(client, outputs.values(), range(601, 700, 20), send_round)
    for camera, plane in CAMERAS.items():
        dets = client.stamped(outputs[camera], sec).detections
        assert dets, camera
        depths = {round(d.results[0].pose.pose.position.z, 3) for d in dets}
        assert depths == {plane}, (camera, depths)


def test_rviz_config_shows_the_3d_markers():
    from ros_harness import REPO

    from compactinst_ros.ros.rviz_config import rviz_topics

    topics = rviz_topics((REPO / "rviz" / "compactinst.rviz").read_text())
    assert f"{NS}/markers_3d" in topics.values()


LIDAR_FRAME = "lidar"
CLOUD = "/lidar/points"
#: the LiDAR 0.3 m above and 0.1 m behind the camera, x forward, y left, z up: points of the
#: LiDAR frame into the camera's optical frame (tf: parent camera, child lidar)
LIDAR_TO_CAMERA = ([0.0, -0.3, -0.1], [0.5, -0.5, 0.5, 0.5])


@pytest.fixture(scope="module")
def tf2_msgs_prefix(request: pytest.FixtureRequest):
    """The built tf2_msgs prefix (cached across runs)."""
    return built_for_test(TF2_MSGS, request)


def cloud_msg(
    sec: int,
    frame: str,
    nanosec: int = 0,
    plane_m: float = PLANE_M,
    lidar_to_camera: tuple = LIDAR_TO_CAMERA,
) -> PointCloud2:
    """A LiDAR cloud of the plane ``plane_m`` ahead of the camera, in the LiDAR's frame (placed
    by ``lidar_to_camera``), with an intensity field the node must skip."""
    u, v = np.meshgrid(np.arange(0, W, 2), np.arange(0, H, 2))
    camera = np.stack(
        [
            (u.ravel() - CX) * plane_m / FX,
            (v.ravel() - CY) * plane_m / FX,
            np.full(u.size, plane_m),
        ],
        1,
    )
    into_camera = rigid_transform(*lidar_to_camera)
    lidar = transform_points(camera.astype(np.float32), np.linalg.inv(into_camera))
    points = np.zeros((len(lidar), 4), np.float32)
    points[:, :3] = lidar
    msg = PointCloud2(height=1, width=len(points), point_step=16, row_step=16 * len(points))
    msg.fields = [
        PointField(name=n, offset=4 * k, datatype=PointField.FLOAT32, count=1)
        for k, n in enumerate(("x", "y", "z", "intensity"))
    ]
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
    msg.header.frame_id = frame
    msg.data = array.array("B", points.tobytes())
    return msg


@contextlib.contextmanager
def lidar_node_running(vision_msgs_prefix, tf2_msgs_prefix, params: dict, script=None):
    """(client, {topic: publisher}, node) with a node placing a LiDAR cloud by /tf_static."""
    with vision_msgs_prefix.activated(), tf2_msgs_prefix.activated():
        msgs = importlib.import_module("vision_msgs.msg")
        tf2 = importlib.import_module("tf2_msgs.msg")
        domain = next_domain()
        node = NodeProcess(
            domain,
            {**params, "image_topic": TOPIC, "camera_info_topic": INFO, "cloud_topic": CLOUD},
            script=script,
        )
        client = Client(domain)
        try:
            reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            client.subscribe(msgs.Detection3DArray, f"{NS}/detections_3d", reliable)
            client.subscribe(PointCloud2, f"{NS}/cloud_labelled", reliable)
            client.subscribe(Image, f"{NS}/instance_mask", reliable)
            client.subscribe(DiagnosticArray, "/diagnostics")
            latched = QoSProfile(
                depth=1,
                reliability=ReliabilityPolicy.RELIABLE,
                durability=DurabilityPolicy.TRANSIENT_LOCAL,
            )
            static = client.node.create_publisher(tf2.TFMessage, "/tf_static", latched)
            transform = TransformStamped(child_frame_id=LIDAR_FRAME)
            transform.header.frame_id = "camera_bgr8"  # the frames' frame_id (image_msg)
            (tx, ty, tz), (qx, qy, qz, qw) = LIDAR_TO_CAMERA
            t, q = transform.transform.translation, transform.transform.rotation
            t.x, t.y, t.z, q.x, q.y, q.z, q.w = tx, ty, tz, qx, qy, qz, qw
            static.publish(tf2.TFMessage(transforms=[transform]))
            pubs = {
                TOPIC: client.publisher(Image, TOPIC),
                INFO: client.publisher(CameraInfo, INFO),
                CLOUD: client.publisher(PointCloud2, CLOUD),
            }
            client.wait_for(
                lambda: (
                    all(client.matched(t) for t in client.subs)
                    and all(p.get_subscription_count() for p in pubs.values())
                    and static.get_subscription_count()
                ),
                120,
                f"the node's subscriptions and publishers (log {node.log_path})",
            )
            yield client, pubs, node
        finally:
            client.close()
            code = node.stop()
            assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


@pytest.fixture(scope="module")
def lidar_node(vision_msgs_prefix, tf2_msgs_prefix, random_bundle):
    """(client, {topic: publisher}, node) with a CPU node placing a LiDAR cloud by /tf_static."""
    params = lifting_node_params(random_bundle, outputs=["instance_mask"])
    with lidar_node_running(vision_msgs_prefix, tf2_msgs_prefix, params) as running:
        yield running


def assert_the_cloud_lifts(client: Client, pubs: dict, secs: range) -> None:
    """Frames with their clouds give detections on the cloud's plane and a labelled cloud whose
    points carry the ids of the masks they project into."""
    outputs = (f"{NS}/detections_3d", f"{NS}/cloud_labelled", f"{NS}/instance_mask")
    # the latched transform, too, may come after the first frames

    def send(sec: int) -> None:
        pubs[INFO].publish(camera_info(sec))
        pubs[CLOUD].publish(cloud_msg(sec, LIDAR_FRAME))
        time.sleep(0.2)
        pubs[TOPIC].publish(image_msg(scene(H, W, sec), "bgr8", sec=sec))

    sec = first_lifted(client, outputs, secs, send)
    dets, cloud, mask = (client.stamped(t, sec) for t in outputs)
    assert dets.detections
    for det in dets.detections:
        assert det.results[0].pose.pose.position.z == pytest.approx(PLANE_M, abs=1e-3)
    # the labelled cloud: points in masks, in the camera's frame, each with its mask's ids
    points = table_from_msg(cloud)
    assert cloud.header.frame_id == "camera_bgr8" and len(points) > 0
    assert set(points.dtype.names) == {"x", "y", "z", "id", "label_id"}
    np.testing.assert_allclose(points["z"], PLANE_M, atol=1e-3)
    raster = raster_from_image(mask)
    u = np.rint(points["x"] * FX / points["z"] + CX).astype(int)
    v = np.rint(points["y"] * FX / points["z"] + CY).astype(int)
    np.testing.assert_array_equal(raster[v, u], points["id"])


def test_a_lidar_cloud_placed_by_tf_static_lifts_the_instances(lidar_node):
    client, pubs, _ = lidar_node
    assert_the_cloud_lifts(client, pubs, range(701, 707))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.usefixtures("emu_library_for_nodes")
def test_a_lidar_cloud_lifts_on_the_tensorrt_kernels(
    vision_msgs_prefix, tf2_msgs_prefix, random_bundle, tmp_path
):
    """The node on its TensorRT path (the CPU stand-ins of test/gpu/emu: engines on ONNX
    Runtime, the real kernel sources on the emulator) lifts the cloud with the lift kernels,
    from the raster the post-processing kernels left on the device."""
    params = {
        "model": random_bundle, "backend": "tensorrt", "engine_cache_dir": str(tmp_path),
        "score_threshold": 0.0, "max_instances": 10, "diagnostics_period": 0.25,
        "outputs": ["instance_mask"],
    }  # fmt: skip
    script = REPO / "test" / "gpu" / "emu" / "emulated_node.py"
    with lidar_node_running(vision_msgs_prefix, tf2_msgs_prefix, params, script) as running:
        client, pubs, node = running
        assert_the_cloud_lifts(client, pubs, range(801, 807))
        assert client.latest_diagnostics().get("backend") == "tensorrt"
    launched = node.log().split("emulated kernels launched:")[-1]
    assert "lift_cloud_classify" in launched and "lift_cloud_labels" in launched, launched


def test_a_cloud_in_a_frame_without_transform_is_named_once_and_counted(lidar_node):
    client, pubs, node = lidar_node
    for sec in (711, 712):
        pubs[INFO].publish(camera_info(sec))
        pubs[CLOUD].publish(cloud_msg(sec, "roof_lidar"))
        pubs[TOPIC].publish(image_msg(scene(H, W, sec), "bgr8", sec=sec))
        client.wait_for(lambda sec=sec: client.stamped(f"{NS}/instance_mask", sec), 30, "2-D")
    client.wait_for(
        lambda: int(client.latest_diagnostics().get("cloud_refused", "0")) >= 2, 10, "counted"
    )
    assert "'roof_lidar'" in client.latest_diagnostics()["cloud_last_problem"]
    # the buffer that placed it: ours, where tf2_ros does not import (a pip install)
    ours = importlib.util.find_spec("tf2_ros") is None
    assert client.latest_diagnostics()["cloud_transforms"] == ("compactinst" if ours else "tf2_ros")
    log = node.log()
    assert log.count("cannot place the cloud's frame 'roof_lidar' in the camera's") == 1
    assert '"roof_lidar" passed to lookupTransform argument source_frame does not exist' in log


#: the vehicle's speed along base_link's x, and how long before its frame a cloud was
#: captured: the cloud sees the plane this much farther away than the frame does
SPEED_MPS, CLOUD_EARLY_S = 25.0, 0.04
#: base_link <- camera optical frame (x forward, z up <- z forward, y down), 0.5 m ahead, 1.5 m
#: up; base_link <- roof LiDAR, 2 m up (x forward)
CAMERA_MOUNT = Transform(np.array([0.5, 0.0, 1.5]), np.array([-0.5, 0.5, -0.5, 0.5]))
ROOF_MOUNT = Transform(np.array([0.0, 0.0, 2.0]))


def transform_msg(
    parent: str, child: str, transform: Transform, sec: int, nanosec: int
) -> TransformStamped:
    """parent <- child, stamped (sec, nanosec)."""
    msg = TransformStamped(child_frame_id=child)
    msg.header.frame_id = parent
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
    t, q = msg.transform.translation, msg.transform.rotation
    t.x, t.y, t.z = (float(v) for v in transform.translation)
    q.x, q.y, q.z, q.w = (float(v) for v in transform.rotation)
    return msg


def test_a_moving_vehicles_cloud_is_moved_to_the_frames_stamp_and_output_in_base_link(
    vision_msgs_prefix, tf2_msgs_prefix, random_bundle
):
    """fixed_frame odom, output_frame base_link: odom <- base_link moves at 25 m/s on /tf, the
    camera and the roof LiDAR ride on base_link (/tf_static), and each cloud is stamped 40 ms
    before its frame, when the plane was 1 m farther. The detections lie on the plane where it
    is at the frame's stamp (PLANE_M ahead of the camera, so 0.5 + PLANE_M ahead of base_link),
    in base_link, their boxes standing on its ground along the plane."""
    params = lifting_node_params(
        random_bundle, outputs=["instance_mask"], fixed_frame="odom", output_frame="base_link"
    )
    with lidar_node_running(vision_msgs_prefix, tf2_msgs_prefix, params) as (client, pubs, _):
        tf2 = importlib.import_module("tf2_msgs.msg")
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        static = client.node.create_publisher(tf2.TFMessage, "/tf_static", latched)
        static.publish(tf2.TFMessage(transforms=[
            transform_msg("base_link", "camera_bgr8", CAMERA_MOUNT, 0, 0),
            transform_msg("base_link", "roof", ROOF_MOUNT, 0, 0),
        ]))  # fmt: skip
        moving = client.node.create_publisher(
            tf2.TFMessage, "/tf", QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        )
        client.wait_for(lambda: moving.get_subscription_count() > 0, 30, "the node on /tf")
        roof_in_camera = CAMERA_MOUNT.inverse() * ROOF_MOUNT
        roof_to_camera = (list(roof_in_camera.translation), list(roof_in_camera.rotation))

        def send(sec: int) -> None:
            poses = []
            for ms in range(-100, 101, 10):
                at = sec * 1_000_000_000 + ms * 1_000_000
                driven = Transform(np.array([SPEED_MPS * at / 1e9, 0.0, 0.0]))
                poses.append(transform_msg("odom", "base_link", driven, *divmod(at, 10**9)))
            moving.publish(tf2.TFMessage(transforms=poses))
            pubs[INFO].publish(camera_info(sec))
            early = divmod(sec * 1_000_000_000 - int(CLOUD_EARLY_S * 1e9), 1_000_000_000)
            seen_at = PLANE_M + SPEED_MPS * CLOUD_EARLY_S  # 1 m farther, 40 ms earlier
            pubs[CLOUD].publish(cloud_msg(early[0], "roof", early[1], seen_at, roof_to_camera))
            time.sleep(0.2)
            pubs[TOPIC].publish(image_msg(scene(H, W, sec), "bgr8", sec=sec))

        outputs = (f"{NS}/detections_3d", f"{NS}/instance_mask")
        sec = first_lifted(client, outputs, range(901, 907), send)
        dets = client.stamped(f"{NS}/detections_3d", sec)
        assert dets.detections and dets.header.frame_id == "base_link"
        for det in dets.detections:
            pose = det.results[0].pose.pose
            assert pose.position.x == pytest.approx(0.5 + PLANE_M, abs=1e-3)
            # the box stands on base_link's ground (z up) and lies along the plane, which
            # faces the vehicle: its thin ground axis (box y) is base_link's x
            o = det.bbox.center.orientation
            turn = quat_matrix(np.array([o.x, o.y, o.z, o.w]))
            np.testing.assert_allclose(turn[:, 2], [0, 0, 1], atol=1e-6)
            np.testing.assert_allclose(np.abs(turn[:, 1]), [1, 0, 0], atol=2e-2)


def test_realtime_replay_sends_the_bags_depth_and_records_the_3d_detections(
    vision_msgs_prefix, random_bundle, tmp_path
):
    """``replay --mode realtime`` of an RGB-D bag: the depth and its camera_info go to the node
    beside the frames, re-stamped with them, and the node's ~/detections_3d, on the depth's
    plane, and ~/markers_3d come back into the output bag under the frames' recorded stamps."""
    from rclpy.serialization import deserialize_message

    from compactinst_ros.eval.bags import ImageBag, typestore
    from compactinst_ros.eval.realtime import run_realtime
    from compactinst_ros.spatial import Intrinsics
    from compactinst_ros.train.synthetic_depth import write_depth_bag

    k = Intrinsics(FX, FX, CX, CY, W, H)
    plane_mm = np.full((H, W), int(PLANE_M * 1000), np.uint16)
    stamps = [5_000_000_000 + i * 200_000_000 for i in range(6)]
    frames = [(s, scene(H, W, i % 4), plane_mm) for i, s in enumerate(stamps)]
    write_depth_bag(tmp_path / "bag", {"cam": frames}, k, "16UC1")
    with vision_msgs_prefix.activated(), ImageBag(tmp_path / "bag") as bag:
        msgs = importlib.import_module("vision_msgs.msg")
        block, _ = run_realtime(
            bag, random_bundle, "onnxruntime", rate=0.5, output_bag=tmp_path / "out", warmup=0,
            progress=False, domain_id=next_domain(), log_path=tmp_path / "node.log",
            node_params={"score_threshold": "0.0", "max_instances": "10", "ort_threads": "1"},
        )  # fmt: skip
        sent = "3-D inputs sent with the frames: /cam/depth"
        assert any(n.startswith(sent) for n in block["notes"]), block["notes"]
        # a loaded host's node drops frames (its one-frame mailbox); each one processed counts
        assert block["frames"]["processed"] >= 1, (block["frames"], block["notes"])
        with ImageBag(tmp_path / "out") as out:
            found = list(out.messages_of(["/compactinst/detections_3d"]))
            markers = list(out.messages_of(["/compactinst/markers_3d"]))
        store = typestore()
        assert markers, "the markers go to the output bag too"
        for _, msgtype, _, raw in markers:  # every marker under its frame's recorded stamp
            for marker in store.deserialize_cdr(raw, msgtype).markers:
                assert marker.header.stamp.sec * 10**9 + marker.header.stamp.nanosec in stamps
        assert found, "\n".join(block["notes"])
        lifted = 0
        for _, _, _, raw in found:
            dets = deserialize_message(raw, msgs.Detection3DArray)
            stamp = dets.header.stamp.sec * 1_000_000_000 + dets.header.stamp.nanosec
            assert stamp in stamps  # the recorded stamp back
            for det in dets.detections:
                assert det.results[0].pose.pose.position.z == pytest.approx(PLANE_M, abs=1e-3)
                lifted += 1
        assert lifted > 0


def test_a_lidar_drive_replays_in_realtime_with_3d_in_base_link(
    vision_msgs_prefix, tf2_msgs_prefix, tmp_path
):
    """``synth --bag --lidar-drive 20`` replayed in realtime: the node gets the clouds, /tf and
    /tf_static, is told fixed_frame odom and output_frame base_link, and its own
    ~/detections_3d, scored against objects3d.json moved into base_link, meet median <= 2 % and
    p90 <= 5 % of the distance, as the lockstep replay of the drive does; the node's masks
    lifted from clouds placed at their stamps alone are reported beside, and are worse."""
    from compactinst_ros.eval.bags import ImageBag
    from compactinst_ros.eval.realtime import run_realtime
    from compactinst_ros.resources import default_model
    from compactinst_ros.train.synthetic import generate_bag

    root = tmp_path / "drive"
    generate_bag(root, 8, 11, 256, 384, progress=False, lidar_speed=20.0)
    with vision_msgs_prefix.activated(), tf2_msgs_prefix.activated(), ImageBag(root / "bag") as bag:
        block, _ = run_realtime(
            bag, default_model(), "onnxruntime", rate=0.5, warmup=0, progress=False,
            domain_id=next_domain(), log_path=tmp_path / "node.log",
            gt_3d=root / "objects3d.json", node_params={"ort_threads": "1"},
        )  # fmt: skip
    figures = block["depth3d"]
    # a loaded host's node drops frames (its one-frame mailbox); those processed are scored
    assert block["frames"]["processed"] >= 2, (block["frames"], block["notes"])
    assert figures["lifted"] >= 4, (figures, block["notes"])
    assert figures["centroid_error_pct"]["median"] <= 2.0, figures
    assert figures["centroid_error_pct"]["p90"] <= 5.0, figures
    uncompensated = block["depth3d_uncompensated"]
    # the same masks; an instance may find no points where its cloud is left behind
    assert uncompensated["lifted"] >= figures["lifted"] // 2, (uncompensated, figures)
    median = figures["centroid_error_pct"]["median"]
    assert uncompensated["centroid_error_pct"]["median"] > 2 * median, (uncompensated, figures)


def test_gt_3d_scores_every_camera_of_a_multi_camera_replay_and_merges_them(
    vision_msgs_prefix, tmp_path, monkeypatch, capsys
):
    """``replay --cameras all --gt-3d`` of a two-camera RGB-D drive: each camera's depth goes
    to the batched node beside its frames, each camera's published 3-D is scored against its
    own truth (a line per camera) and the pairs of both in one merged line."""
    import json

    from compactinst_ros.train.synthetic import generate_bag

    root = tmp_path / "drive"
    generate_bag(root, 6, 11, 256, 384, cameras=("cam0", "cam1"), progress=False, depth="16UC1")
    monkeypatch.setenv("ROS_DOMAIN_ID", str(next_domain()))
    out = tmp_path / "out"
    argv = ["replay", str(root / "bag"), "--cameras", "all", "--mode", "lockstep",
            "--gt-3d", str(root / "objects3d.json"), "--out", str(out), "--quiet",
            "--overlays", "0", "--no-plots"]  # fmt: skip
    with vision_msgs_prefix.activated():
        assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    block = json.loads((out / "report.json").read_text())["modes"]["lockstep"]
    per_camera = [block["cameras"][name]["depth3d"] for name in ("cam0", "cam1")]
    assert block["depth3d"]["lifted"] == sum(c["lifted"] for c in per_camera) > 0
    assert all(c["frames"] == 6 and c["no_truth"] == 0 for c in per_camera)
    assert block["depth3d"]["centroid_error_pct"]["median"] <= 3.0  # the depth acceptance
    assert block["depth3d"]["centroid_error_pct"]["p90"] <= 10.0
    assert "camera cam0 3-D: " in printed and "camera cam1 3-D: " in printed
