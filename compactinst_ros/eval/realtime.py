"""Realtime replay: publish a bag at its recorded rate to a real ``compactinst_node`` over ROS.

The node runs as a subprocess (``python -m compactinst_ros.ros.node``) with DDS on loopback (the
loopback-only shared-memory profile, config/fastdds_loopback.xml), on a private ROS domain and in a
namespace of its own, so that a replay on a running vehicle neither reaches nor hears its nodes (the
Recorder keeps only the /diagnostics of the replayed node's name). Frames are preloaded and
published as the recorded CDR bytes (no re-serialisation), paced on the monotonic clock by the bag's
log times / ``rate``. Each frame is re-stamped with its send time, as a live camera stamps its
frames (only the stamp bytes are patched), so the node's ``pipeline`` latency (publish time -
header.stamp) is camera-to-output; the bag's camera_info, if any, is sent with the same stamp just
before its frame. What comes back is matched to the sent frames by header stamp: the per-frame
latency record (``~/latency/frame``: stage timings measured in the node), the mask rasters and
/diagnostics. End-to-end latency = receipt of the latency record - send time, on this process's
clock. The output bag gets every recorded output with the frame's recorded stamp back, so outputs
join the input image there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import dds_env
from ..errors import BackendError, ConfigError
from ..progress import Progress
from ..resources import loopback_profile
from ..ros.camera_info import StampMatcher
from ..ros.diagnostics import REASON_KEY, status_name
from ..ros.params import ros_param_text
from ..structures import FrameMeta, FrameResult, Instances, Segments
from .bags import (
    BAG_OUTPUTS,
    CAMERA_INFO,
    IMAGE,
    JOINT_STATE,
    OUTPUT_NS,
    POINTCLOUD2,
    TRANSPORTS,
    BagFrame,
    BagWriter,
    ImageBag,
    open_output_bag,
)
from .groundtruth import GroundTruth
from .metrics import merge_statistics
from .report import latency_stats, warmup_left_out

#: input topic the player publishes on (the node is pointed at it by parameter)
INPUT_TOPIC = "/compactinst_replay/image"
INPUT_CAMERA_INFO = "/compactinst_replay/camera_info"
RASTERS = ("instance_mask", "panoptic", "semantic")
#: outputs kept per frame to score them against ground truth (segment ids name their label)
SCORED_OUTPUTS = {
    "instance_mask": IMAGE,
    "panoptic": IMAGE,
    "semantic": IMAGE,
    "instance_table": POINTCLOUD2,
}
#: a bag's camera_info matches a frame whose stamp is this close (ns)
CAMERA_INFO_TOLERANCE_NS = 1_000_000
#: where a bag's 3-D inputs are sent beside the frames (the node is pointed at them), under the
#: player's root (a camera's own, of several); the node takes a depth image's camera_info
#: beside it
INPUT_ROOT = "/compactinst_replay"
INPUT_DEPTH = "/depth/image_raw"
INPUT_DEPTH_INFO = "/depth/camera_info"
INPUT_CLOUD = "/points"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"
DETECTION3D_ARRAY = "vision_msgs/msg/Detection3DArray"
MARKER_ARRAY = "visualization_msgs/msg/MarkerArray"
#: a 3-D input goes out before the first frame whose stamp it precedes by at most this much
#: (ns): the transforms need a sample after a frame's stamp to interpolate at it
COMPANION_LEAD_NS = 100_000_000


@dataclass(frozen=True)
class ThreeDInputs:
    """A bag's 3-D inputs as a realtime replay sends them: bag topic -> (topic sent on, type),
    the node's parameters for them, and what is not sent, with why."""

    routes: dict[str, tuple[str, str]] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def three_d_inputs(
    bag: ImageBag, root: str = INPUT_ROOT, transforms: bool = True
) -> ThreeDInputs:
    """The depth image beside the camera (and its camera_info), else the bag's LiDAR cloud, and
    with either the bag's /tf and /tf_static (``transforms``: one camera of several sends
    them): what the node needs for its 3-D outputs, sent under ``root``."""
    from .bags import COMPRESSED, camera_info_for
    from .depth3d import depth_topic_for

    types = bag.topic_types
    found = ThreeDInputs()
    depth = depth_topic_for(bag.topic, bag.image_topics)
    clouds = sorted(t for t, msgtype in types.items() if msgtype == POINTCLOUD2)
    if depth is not None:
        compressed = types[depth] == COMPRESSED  # image_transport's compressedDepth
        sent_on = f"{root}{INPUT_DEPTH}" + ("/compressedDepth" if compressed else "")
        found.routes[depth] = (sent_on, types[depth])
        infos = sorted(t for t, msgtype in types.items() if msgtype == CAMERA_INFO)
        info = camera_info_for(depth, infos)
        if info is not None and info.rsplit("/", 1)[0] == depth.rsplit("/", 1)[0]:
            found.routes[info] = (f"{root}{INPUT_DEPTH_INFO}", CAMERA_INFO)
        found.params["depth_topic"] = f"{root}{INPUT_DEPTH}"
        found.params["depth_transport"] = "compressedDepth" if compressed else "raw"
        if clouds:
            found.notes.append(f"the cloud {clouds[0]} is not sent: the depth {depth} is")
    elif clouds:
        found.routes[clouds[0]] = (f"{root}{INPUT_CLOUD}", POINTCLOUD2)
        found.params["cloud_topic"] = f"{root}{INPUT_CLOUD}"
        if len(clouds) > 1:
            found.notes.append(f"{', '.join(clouds[1:])} not sent: one cloud per camera")
    if found.routes and transforms:
        for topic in ("/tf", "/tf_static"):
            if types.get(topic) == TF_MESSAGE:
                found.routes[topic] = (topic, TF_MESSAGE)
    return found


def check_3d_messages(bag: ImageBag, output_bag: Path | None, gt_3d: Path | None) -> None:
    """Raise ``ConfigError`` (naming the fix) when a message package that a realtime replay of
    ``bag`` would send or record is not installed: checked before any work, so a replay in
    ``both`` modes does not fail only after its lockstep pass."""
    routes = three_d_inputs(bag).routes if bag.camera_infos() else {}
    if not routes:
        return
    needed = {msgtype for _, msgtype in routes.values()}
    if output_bag is not None or gt_3d is not None:
        needed.add(DETECTION3D_ARRAY)
    if output_bag is not None:
        needed.add(MARKER_ARRAY)
    for msgtype in sorted(needed):
        _msg_class(msgtype)


@dataclass
class ThreeDScoring:
    """How a realtime replay scores the node's 3-D detections against objects3d.json: the
    node's ``output_frame``/``fixed_frame`` and output frame <- camera to move the truth."""

    truth: Any  # depth3d.Truth3D
    camera: str | None
    into_output: Any  # Transform
    params: dict[str, str]
    #: a LiDAR drive's clouds placed at their stamps alone (depth3d.Depth3DEvaluator), scoring
    #: the node's published masks beside its own compensated 3-D; None for a depth camera
    baseline: Any = None

    def blocks(self, recorder: Recorder) -> dict:
        """``depth3d`` figures and ``depth3d_statistics`` of the detections the node published
        for the frames it processed (each under its recorded stamp)."""
        from .bags import typestore
        from .depth3d import score_published, summarise

        store = typestore()
        with recorder.lock:
            kept = {s: dict(o) for s, o in recorder.kept.items() if s in recorder.recorded_stamp}
            recorded = dict(recorder.recorded_stamp)

        def published() -> Any:
            for stamp in sorted(kept, key=recorded.__getitem__):
                outputs = kept[stamp]
                if not {"instance_table", "detections_3d"} <= set(outputs):
                    continue
                if self.baseline is not None and "instance_mask" in outputs:
                    self.baseline.add(recorded[stamp], masks_result(outputs))
                detections = store.deserialize_cdr(outputs["detections_3d"], DETECTION3D_ARRAY)
                centroids = {
                    int(d.id): np.array([p.x, p.y, p.z])
                    for d in detections.detections
                    for p in [d.results[0].pose.pose.position]
                }
                yield recorded[stamp], recorded_instances(outputs["instance_table"]), centroids

        stats = score_published(self.truth, self.camera, published(), self.into_output)
        out = {"depth3d": summarise(stats), "depth3d_statistics": stats}
        if self.baseline is not None:
            baseline = self.baseline.statistics()
            self.baseline.close()
            out["depth3d_uncompensated"] = summarise(baseline)
            out["depth3d_uncompensated_statistics"] = baseline
        return out


def three_d_scoring(bag: ImageBag, gt_3d: Path) -> ThreeDScoring:
    """The scoring of ``bag``'s realtime replay against ``gt_3d``: in base_link where the bag's
    transforms name it (and through odom where they name that), else in the camera's frame."""
    from ..spatial.tf_buffer import Transform
    from .bags import camera_name
    from .depth3d import Truth3D, bag_transforms, camera_frame_of, uncompensated_evaluator

    buffer = bag_transforms(bag)
    baseline = uncompensated_evaluator(bag, gt_3d)
    frames = set(buffer.all_frames())
    camera_frame = camera_frame_of(bag)
    params: dict[str, str] = {}
    into_output = Transform()
    if "base_link" in frames and camera_frame in frames:
        params["output_frame"] = "base_link"
        into_output = buffer.lookup_transform("base_link", camera_frame, 0)[0]
    if "odom" in frames:
        params["fixed_frame"] = "odom"
    return ThreeDScoring(Truth3D(gt_3d), camera_name(bag.topic), into_output, params, baseline)


class ThreeDFeed:
    """One camera's 3-D inputs in the order they go out, sent before the frames they belong
    to (``send``), re-stamped by the offset its frame is sent with."""

    def __init__(self, bag: ImageBag, three_d: ThreeDInputs) -> None:
        self.pending = deque(sorted(
            (header_stamp(raw, msgtype), three_d.routes[topic][0], msgtype, raw)
            for topic, msgtype, _, raw in bag.messages_of(three_d.routes)
        ))  # fmt: skip

    def send(self, recorder: Recorder, frame: BagFrame, stamp_of: Any) -> None:
        """Send the inputs that precede ``frame`` by at most COMPANION_LEAD_NS, each stamp
        moved by ``stamp_of`` (recorded ns -> sent ns)."""
        while self.pending and self.pending[0][0] <= frame.stamp_ns + COMPANION_LEAD_NS:
            _, sent_on, msgtype, raw = self.pending.popleft()
            recorder.publish_three_d(sent_on, restamped(raw, msgtype, stamp_of))


def restamped(raw: bytes, msgtype: str, stamp_of: Any) -> bytes:
    """A 3-D input's CDR with its stamps moved by ``stamp_of`` (recorded ns -> sent ns): the
    header's (Image, CameraInfo, PointCloud2: patched in place), or every transform's
    (TFMessage, re-serialised; a stamp of 0, "any time", kept)."""
    if msgtype != TF_MESSAGE:
        return cdr_with_stamp(raw, stamp_of(cdr_stamp_ns(raw)))
    from .bags import typestore

    store = typestore()
    msg = store.deserialize_cdr(raw, msgtype)
    for transform in msg.transforms:
        stamp = transform.header.stamp
        recorded = stamp.sec * 1_000_000_000 + stamp.nanosec
        if recorded:
            stamp.sec, stamp.nanosec = divmod(stamp_of(recorded), 1_000_000_000)
    return bytes(store.serialize_cdr(msg, msgtype))


def header_stamp(raw: bytes, msgtype: str) -> int:
    """The recorded time a 3-D input belongs to: its header's stamp, a TFMessage's first
    transform's (0 for an empty one)."""
    if msgtype != TF_MESSAGE:
        return cdr_stamp_ns(raw)
    from .bags import typestore

    msg = typestore().deserialize_cdr(raw, msgtype)
    stamp = msg.transforms[0].header.stamp if msg.transforms else None
    return stamp.sec * 1_000_000_000 + stamp.nanosec if stamp else 0
#: how long a replay waits for the node's first output after the last frame was sent
FIRST_OUTPUT_S = 10.0


def quiet_limit(drain_s: float, outputs: int) -> float:
    """Seconds without a new output that end a realtime replay's drain: ``drain_s``, but before
    the first output at least FIRST_OUTPUT_S, since a node still busy with its first frames (a
    loaded host) is not done."""
    return drain_s if outputs > 0 else max(drain_s, FIRST_OUTPUT_S)


def replay_namespace(pid: int | None = None) -> str:
    """The namespace of the replayed node: unique per replaying process, so that its topics and
    its /diagnostics status name differ from a vehicle's ``/compactinst``."""
    return f"/compactinst_replay_{os.getpid() if pid is None else pid}"


def ros_environment(domain_id: int | None = None) -> dict[str, str]:
    """os.environ with DDS kept on loopback and the shipped loopback-only profile (under the
    variable names the distribution reads; see dds_env)."""
    env = dds_env.loopback_environment(os.environ, loopback_profile())
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    env.setdefault("ROS_DOMAIN_ID", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def use_in_this_process(env: dict[str, str]) -> None:
    """Give this process's own DDS participant the discovery and profile settings of ``env``
    (its domain is an rclpy.init argument)."""
    managed = (*dds_env.PROFILE_VARIABLES, dds_env.DISCOVERY_RANGE, dds_env.LOCALHOST_ONLY)
    os.environ.update({key: env[key] for key in managed if key in env})
    os.environ.setdefault("RMW_IMPLEMENTATION", env["RMW_IMPLEMENTATION"])


def cdr_stamp_ns(raw: bytes) -> int:
    """header.stamp of a serialised message whose first field is a std_msgs/Header."""
    order = "<" if raw[1] & 1 else ">"
    sec, nanosec = struct.unpack_from(order + "iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def output_stamp(raw: bytes, msgtype: str) -> int:
    """The frame stamp of one of the node's outputs: its header's, or for a MarkerArray its
    first marker's (the node's DELETEALL, stamped with the frame), after the sequence length."""
    if msgtype == MARKER_ARRAY:
        return cdr_stamp_ns(raw[:4] + raw[8:])
    return cdr_stamp_ns(raw)


def output_with_stamp(raw: bytes, msgtype: str, stamp_ns: int) -> bytes:
    """One of the node's outputs with the frame stamp ``stamp_ns``: the header patched in
    place, or every marker's of a MarkerArray (re-serialised)."""
    if msgtype != MARKER_ARRAY:
        return cdr_with_stamp(raw, stamp_ns)
    from .bags import typestore

    store = typestore()
    msg = store.deserialize_cdr(raw, msgtype)
    for marker in msg.markers:
        marker.header.stamp.sec, marker.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    return bytes(store.serialize_cdr(msg, msgtype))


def cdr_with_stamp(raw: bytes, stamp_ns: int) -> bytes:
    """A copy of a serialised message whose first field is a std_msgs/Header, with header.stamp
    set to ``stamp_ns`` (the stamp's 8 bytes patched; nothing re-serialised)."""
    order = "<" if raw[1] & 1 else ">"
    out = bytearray(raw)
    struct.pack_into(order + "iI", out, 4, *divmod(stamp_ns, 1_000_000_000))
    return bytes(out)


def node_command(params: dict[str, Any], lifecycle: bool = False) -> list[str]:
    """The command line that starts ``compactinst_node`` (or its lifecycle variant) with
    ``params`` in this interpreter."""
    entry = "lifecycle_main" if lifecycle else "main"
    code = f"import sys; from compactinst_ros.ros.node import {entry}; sys.exit({entry}())"
    return [sys.executable, "-c", code, *ros_args(params)]


def ros_args(params: dict[str, Any]) -> list[str]:
    """``--ros-args -p name:=value ...`` for a node's command line."""
    args = ["--ros-args"]
    for key, value in params.items():
        args += ["-p", f"{key}:={ros_param_text(value)}"]
    return args


class NodeProcess:
    """A node's ``command`` (see ``node_command``) in a subprocess; its output goes to
    ``log_path``."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path | None = None,
    ) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd
        )

    def log(self) -> str:
        """Everything the node printed so far."""
        with contextlib.suppress(OSError):
            return self.log_path.read_text()
        return ""

    def tail(self, lines: int = 20) -> str:
        """The last lines the node printed."""
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> int:
        """Ctrl-C the node and wait; kills it only after ``timeout`` (then ``killed`` is True)."""
        self.killed = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


class Recorder:
    """Player-side rclpy node: publishes frames, records the outputs of the node named
    ``node_name`` (fully qualified) by stamp, and only that node's /diagnostics. The output bag
    gets them under the node's default namespace (``bag_ns``, ``OUTPUT_NS``). One camera of a
    multi-camera replay: its own ``input_topic``, ``info_topic``, ``node_name`` (the node's
    ``~/<camera>``), ``bag_ns`` and ``player`` (its own node name), and the ``lock`` that guards
    the shared output bag. ``extra_status``: another status name of that node whose every report
    is kept in ``extra`` (the batched node's batch report)."""

    def __init__(
        self,
        domain_id: int,
        msgtype: str,
        writer: BagWriter | None,
        outputs: tuple[str, ...],
        camera_infos: Sequence[tuple[int, bytes]] = (),
        node_name: str = OUTPUT_NS,
        keep: bool = False,
        input_topic: str = INPUT_TOPIC,
        info_topic: str = INPUT_CAMERA_INFO,
        bag_ns: str = OUTPUT_NS,
        lock: threading.Lock | None = None,
        player: str = "compactinst_replay",
        extra_status: str | None = None,
        bag_topics: tuple[str, str | None] | None = None,
        three_d: ThreeDInputs | None = None,
        keep_3d: bool = False,
        keep_3d_masks: bool = False,
    ) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import CameraInfo

        from ..ros.camera import message_type

        self.rclpy = rclpy
        self.context = Context()  # rclpy.context.Context: the module path every distro has
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(player, context=self.context)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        # the output bag records the input and its camera_info under the recorded bag's own
        # topics (``bag_topics``), so that it replays as the input bag did
        self.bag_input, self.bag_info = bag_topics or (input_topic, info_topic)
        self.bag_info = self.bag_info or info_topic
        self.bag_ns = bag_ns
        transport = TRANSPORTS[msgtype]  # the node subscribes <image_topic>/<transport>
        self.input_topic = input_topic + ("" if transport == "raw" else f"/{transport}")
        self.pub = self.node.create_publisher(message_type(transport), self.input_topic, reliable)
        self.infos: StampMatcher[bytes] = StampMatcher(
            CAMERA_INFO_TOLERANCE_NS, max(1, len(camera_infos))
        )
        for stamp, raw in camera_infos:
            self.infos.add(stamp, raw)
        self.info_pub = self.node.create_publisher(CameraInfo, info_topic, reliable)
        self.lock = lock or threading.Lock()
        self.writer = writer
        self.records: dict[int, tuple[float, dict[str, float]]] = {}
        self.outputs: dict[str, int] = dict.fromkeys(outputs, 0)
        self.diagnostics: deque[dict[str, str]] = deque(maxlen=5)
        self.bag_time: dict[int, int] = {}
        self.send_time: dict[int, float] = {}
        self.recorded_stamp: dict[int, int] = {}
        self.frame_index: dict[int, int] = {}
        #: send stamp -> {output: serialised message}, for SCORED_OUTPUTS when ``keep``
        self.kept: dict[int, dict[str, bytes]] = {}
        self.keep = keep
        #: outputs kept per frame: the scored rasters and table (``keep``), the table and the 3-D
        #: detections (``keep_3d``)
        self.kept_names = set(SCORED_OUTPUTS) if keep else set()
        if keep_3d:
            self.kept_names |= {"instance_table", "detections_3d"}
        if keep_3d_masks:
            self.kept_names.add("instance_mask")
        self.status_name = status_name(node_name)
        self.extra_status = extra_status
        self.extra: list[dict[str, str]] = []
        self.reports = 0  # status reports of the node received (``diagnostics`` keeps the last)
        self.latency_topic = f"{node_name}/latency/frame"
        deep = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(
            _msg_class(JOINT_STATE), self.latency_topic, self._on_latency, deep, raw=True
        )
        recorded = dict.fromkeys(outputs, IMAGE)
        if writer is not None:
            recorded.update(BAG_OUTPUTS)
            if camera_infos:
                recorded["camera_info"] = CAMERA_INFO
        if keep:
            recorded.update(SCORED_OUTPUTS)
        if keep_3d:
            recorded["instance_table"] = POINTCLOUD2
        if keep_3d_masks:
            recorded["instance_mask"] = IMAGE
        sends_3d = bool(three_d and three_d.routes)  # the node's 3-D outputs: bag or scoring
        if sends_3d and (writer is not None or keep_3d):
            recorded["detections_3d"] = DETECTION3D_ARRAY
        if sends_3d and writer is not None:
            recorded["markers_3d"] = MARKER_ARRAY
        for name, name_type in recorded.items():
            self.node.create_subscription(
                _msg_class(name_type),
                f"{node_name}/{name}",
                self._output_cb(name, name_type),
                deep,
                raw=True,
            )
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.three_d_pubs: dict[str, Any] = {}
        for sent_on, msgtype in (three_d.routes.values() if three_d else ()):
            latched = QoSProfile(
                depth=100,
                reliability=ReliabilityPolicy.RELIABLE,
                durability=DurabilityPolicy.TRANSIENT_LOCAL,
            )
            qos = latched if sent_on == "/tf_static" else reliable
            self.three_d_pubs[sent_on] = self.node.create_publisher(
                _msg_class(msgtype), sent_on, qos
            )
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        with contextlib.suppress(ExternalShutdownException):
            self.executor.spin()

    def _on_latency(self, raw: bytes) -> None:
        from rclpy.serialization import deserialize_message

        now = time.monotonic()
        msg = deserialize_message(raw, _msg_class(JOINT_STATE))
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self.lock:
            self.records.setdefault(stamp, (now, dict(zip(msg.name, msg.position, strict=False))))
            self._write(f"{self.bag_ns}/latency/frame", JOINT_STATE, stamp, now, raw)

    def _write(self, topic: str, msgtype: str, stamp: int, now: float, raw: bytes) -> None:
        """Copy one output to the bag at the frame's log time + its lag, with the recorded
        stamp back (call with the lock held)."""
        if self.writer is not None and stamp in self.send_time:
            t_ns = self.bag_time[stamp] + int((now - self.send_time[stamp]) * 1e9)
            recorded = self.recorded_stamp[stamp]
            self.writer.write(topic, msgtype, t_ns, output_with_stamp(raw, msgtype, recorded))

    def _output_cb(self, name: str, msgtype: str) -> Any:
        topic = f"{self.bag_ns}/{name}"

        def record(raw: bytes) -> None:
            """Count one serialised output and copy it to the output bag."""
            now = time.monotonic()
            stamp = output_stamp(raw, msgtype)
            with self.lock:
                if name in self.outputs:
                    self.outputs[name] += 1
                if name in self.kept_names:
                    self.kept.setdefault(stamp, {})[name] = raw
                self._write(topic, msgtype, stamp, now, raw)

        return record

    def _on_diag(self, msg: Any) -> None:
        for status in msg.status:
            if status.name in (self.status_name, self.extra_status):
                values = {"_message": status.message, **{kv.key: kv.value for kv in status.values}}
                with self.lock:
                    if status.name == self.status_name:
                        self.diagnostics.append(values)
                        self.reports += 1
                    else:
                        self.extra.append(values)

    def await_report(self, timeout: float = 2.5) -> None:
        """Wait up to ``timeout`` s for the node's next status report (one more /diagnostics
        period: its counts then include the last frames)."""
        seen = self.reports
        with contextlib.suppress(BackendError):
            _wait(lambda: self.reports > seen, timeout, None, "/diagnostics")

    def node_ready(self) -> bool:
        """The node subscribes to our input and its 3-D inputs (a depth image or cloud sent
        before the node hears it is lost; the transforms are read only where the node uses
        them, /tf_static latched) and publishes the latency record."""
        inputs = [p for t, p in self.three_d_pubs.items() if t not in ("/tf", "/tf_static")]
        return (
            self.pub.get_subscription_count() > 0
            and all(p.get_subscription_count() > 0 for p in inputs)
            and self.node.count_publishers(self.latency_topic) > 0
        )

    def publish_three_d(self, sent_on: str, raw: bytes) -> None:
        """Send one of the bag's 3-D inputs (already re-stamped) on ``sent_on``."""
        self.three_d_pubs[sent_on].publish(raw)

    def publish(self, frame: BagFrame, stamp: int | None = None) -> int:
        """Send one frame (and its camera_info) stamped ``stamp`` (None: now); remember when and
        its bag stamp. Returns the stamp it was sent with."""
        if stamp is None:
            stamp = time.time_ns()  # the node's clock: ROS time is the system time here
        info = self.infos.match(frame.stamp_ns)
        with self.lock:
            self.bag_time[stamp] = frame.bag_time_ns
            self.send_time[stamp] = time.monotonic()
            self.recorded_stamp[stamp] = frame.stamp_ns
            self.frame_index[stamp] = frame.index
            if self.writer is not None:
                self.writer.write(self.bag_input, frame.msgtype, frame.bag_time_ns, frame.raw)
                if info is not None:
                    self.writer.write(self.bag_info, CAMERA_INFO, frame.bag_time_ns, info)
        if info is not None:
            self.info_pub.publish(cdr_with_stamp(info, stamp))
        self.pub.publish(cdr_with_stamp(frame.raw, stamp))
        return stamp

    def processed(self) -> int:
        """Sent frames whose latency record came back."""
        with self.lock:
            return sum(1 for s in self.records if s in self.send_time)

    def close(self) -> None:
        """Stop spinning and shut the context down."""
        self.executor.shutdown(timeout_sec=2.0)
        # the spin thread leaves its wait set first: destroying the node while it still holds
        # the node's handles froze the process once (a C++ call spinning with the GIL held)
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
        self._thread.join(timeout=5.0)  # had it been in a callback: the context is down now


def recorded_result(outputs: dict[str, bytes]) -> FrameResult:
    """The FrameResult the node published for one frame, from its serialised instance mask,
    instance table, panoptic and semantic rasters (segment ids name their label:
    ``label * 1000 + k``)."""
    result = masks_result(outputs)
    panoptic = _recorded_raster(outputs, "panoptic")
    ids = np.unique(panoptic[panoptic > 0]).astype(np.int32)
    result.segments = Segments(
        ids=ids,
        label_id=np.where(ids >= 1000, ids // 1000, ids).astype(np.int32),
        isthing=ids >= 1000,
        score=np.ones(len(ids), np.float32),
        area=np.zeros(len(ids), np.int64),
    )
    result.panoptic_raster = panoptic.astype(np.int32)
    result.semantic_raster = _recorded_raster(outputs, "semantic")
    return result


def masks_result(outputs: dict[str, bytes]) -> FrameResult:
    """The instances and instance mask the node published for one frame (what a 3-D lift
    reads), from its serialised ``~/instance_table`` and ``~/instance_mask``."""
    raster = _recorded_raster(outputs, "instance_mask")
    height, width = raster.shape
    return FrameResult(
        meta=FrameMeta.letterbox(height, width, height, width),  # scoring reads the size only
        instances=recorded_instances(outputs["instance_table"]),
        instance_raster=raster,
    )


def _recorded_raster(outputs: dict[str, bytes], name: str) -> np.ndarray:
    """The raster of the node's serialised ``~/<name>`` Image."""
    from rclpy.serialization import deserialize_message

    from ..ros.convert import raster_from_msg

    return raster_from_msg(deserialize_message(outputs[name], _msg_class(IMAGE)))


def recorded_instances(raw: bytes) -> Instances:
    """The Instances of the node's serialised ``~/instance_table``."""
    from rclpy.serialization import deserialize_message

    from ..ros.convert import table_from_msg

    table = table_from_msg(deserialize_message(raw, _msg_class(POINTCLOUD2)))
    return Instances(
        ids=table["id"].astype(np.uint16),
        class_index=table["class_index"].astype(np.int32),
        label_id=table["label_id"].astype(np.int32),
        score=table["score"].astype(np.float32),
        box=np.stack([table[k] for k in ("x0", "y0", "x1", "y1")], -1).astype(np.float32),
        area=table["area"].astype(np.int64),
    )


def scored_statistics(
    recorder: Recorder, gt: GroundTruth, frames: list[BagFrame], match: str
) -> dict:
    """The evaluator's statistics (``Evaluator.statistics``) of the outputs the node published,
    against ``gt`` (frames it dropped have none)."""
    from .metrics import Evaluator

    gt.match([f.stamp_ns for f in frames], match)
    evaluator = Evaluator(gt)
    with recorder.lock:
        kept = {s: dict(o) for s, o in recorder.kept.items() if s in recorder.frame_index}
        index = dict(recorder.frame_index)
    for stamp in sorted(kept, key=index.__getitem__):
        if set(SCORED_OUTPUTS) <= set(kept[stamp]):
            evaluator.add(index[stamp], recorded_result(kept[stamp]))
    return evaluator.statistics()


def _msg_class(msgtype: str) -> type:
    """The rclpy message class of a rosbags type name such as ``sensor_msgs/msg/Image``.

    A ROS installed from pip has no vision_msgs or tf2_msgs (no wheel exists), which a replay
    with 3-D inputs needs: that is a set-up the replay cannot work in, named with its fix."""
    import importlib

    package, _, name = msgtype.split("/")
    try:
        module = importlib.import_module(f"{package}.msg")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"this replay sends or records {msgtype}, but {package} is not installed for this "
            f"Python ({exc}); install ros-<distro>-{package.replace('_', '-')} (apt), or, where "
            "ROS came from pip (no wheel exists), build it with 'compactinst ros "
            "build-interfaces'"
        ) from None
    return getattr(module, name)


def _wait(predicate: Any, timeout: float, node: NodeProcess | None, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if node is not None and node.proc.poll() is not None:
            raise BackendError(
                f"compactinst_node exited with code {node.proc.returncode} before {what}; "
                f"its log ({node.log_path}) ends with:\n{node.tail()}"
            )
        if time.monotonic() > deadline:
            raise BackendError(
                f"timed out after {timeout:.0f} s waiting for {what}; check ROS_DOMAIN_ID and "
                f"the node log {node.log_path if node else ''}"
            )
        time.sleep(0.05)


def run_realtime(
    bag: ImageBag,
    model: str | Path,
    backend: str = "auto",
    rate: float = 1.0,
    output_bag: Path | None = None,
    max_frames: int | None = None,
    warmup: int = 3,
    progress: bool = True,
    domain_id: int | None = None,
    log_path: Path | None = None,
    ready_timeout: float = 120.0,
    drain_s: float = 2.0,
    node_params: dict[str, str] | None = None,
    outputs: tuple[str, ...] = RASTERS,
    gt: GroundTruth | None = None,
    match: str = "auto",
    gt_3d: Path | None = None,
) -> tuple[dict, dict]:
    """Replay ``bag`` to a fresh node subprocess; returns (report block, model facts).

    ``outputs``: the rasters subscribed (and written to ``output_bag``); the node computes only
    outputs that have subscribers, so this is the consumer load being measured. ``domain_id``
    None: a private domain (``dds_env.private_domain``), never the environment's. With ``gt``
    the instance table is subscribed too and the published outputs are scored (``accuracy``).
    With ``gt_3d`` (objects3d.json) and 3-D inputs in the bag, the node's own ~/detections_3d
    are scored (``depth3d``): in ``base_link`` where the bag's transforms have it (the node
    told ``output_frame``), moved through ``odom`` where they have that (``fixed_frame``).
    """
    if rate <= 0:
        raise ConfigError(f"rate {rate} must be positive (1.0 = recorded rate)")
    if domain_id is None:
        domain_id = dds_env.private_domain()
    frames = [f for f, _ in zip(bag.frames(), range(max_frames or bag.count), strict=False)]
    camera_infos = bag.camera_infos()
    three_d = three_d_inputs(bag) if camera_infos else ThreeDInputs()
    stamps = [f.stamp_ns for f in frames]
    if three_d.routes and (0 in stamps or len(set(stamps)) < len(stamps)):
        three_d = ThreeDInputs(notes=[
            "the bag's 3-D inputs are not sent: its frames have no distinct header stamps to "
            "pair them by"
        ])  # fmt: skip
    feed = ThreeDFeed(bag, three_d)
    scoring_3d = three_d_scoring(bag, gt_3d) if gt_3d is not None and three_d.routes else None
    if gt_3d is not None and scoring_3d is None:
        three_d.notes.append("--gt-3d: the bag has no 3-D input to send the node; not scored")
    env = ros_environment(domain_id)
    use_in_this_process(env)
    params = {
        "model": str(Path(model).resolve()),
        "backend": backend,
        "image_topic": INPUT_TOPIC,
        "input_transport": TRANSPORTS[bag.msgtype],
        "input_reliability": "reliable",
        **({"camera_info_topic": INPUT_CAMERA_INFO} if camera_infos else {}),
        **three_d.params,
        **(scoring_3d.params if scoring_3d is not None else {}),
        **(node_params or {}),
    }
    log_path = (
        log_path
        or Path(os.environ.get("TMPDIR", "/tmp")) / f"compactinst_replay_node_{domain_id}.log"
    )
    writer = open_output_bag(output_bag) if output_bag else None
    namespace = replay_namespace()
    node = NodeProcess([*node_command(params), "-r", f"__ns:={namespace}"], env, log_path)
    recorder = None
    try:
        node_name = namespace + OUTPUT_NS  # the node's default name, in the replay's namespace
        recorder = Recorder(
            domain_id,
            bag.msgtype,
            writer,
            outputs,
            camera_infos,
            node_name,
            keep=gt is not None,
            bag_topics=(bag.topic, bag.camera_info_topic),
            three_d=three_d,
            keep_3d=scoring_3d is not None,
            keep_3d_masks=scoring_3d is not None and scoring_3d.baseline is not None,
        )
        _wait(recorder.node_ready, ready_timeout, node, "the node to load the model and subscribe")
        time.sleep(0.5)  # let the node see our output subscriptions too
        bar = Progress(len(frames), f"realtime x{rate:g}", progress)
        first_bag = frames[0].bag_time_ns if frames else 0
        first_stamp = frames[0].stamp_ns if frames else 0
        start, start_ns = time.monotonic(), time.time_ns()

        def stamp_of(recorded: int) -> int:
            """The sent stamp of a recorded one: the frames' and their 3-D inputs' one clock,
            the recorded spacing kept at any ``rate`` (a cloud's per-point times, the
            odometry and the pairing tolerances are in recorded time)."""
            return start_ns + (recorded - first_stamp)

        interrupted = False
        try:
            for i, frame in enumerate(frames):
                target = start + (frame.bag_time_ns - first_bag) / 1e9 / rate
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                feed.send(recorder, frame, stamp_of)
                # with 3-D inputs the frames keep the recorded spacing of their stamps exactly,
                # as the inputs they pair with; else each is stamped with its send time
                recorder.publish(frame, stamp_of(frame.stamp_ns) if three_d.routes else None)
                bar.update(i + 1, f"{recorder.processed()} processed so far")
        except KeyboardInterrupt:  # Ctrl-C: report what was sent so far, marked partial
            interrupted = True
        sent_at = time.monotonic()
        if interrupted:  # a terminal's Ctrl-C reaches the node too: no more outputs to wait for
            drain_s = min(drain_s, 0.5)
        elif node.proc.poll() is not None:
            raise BackendError(
                f"compactinst_node exited with code {node.proc.returncode} during the replay; "
                f"its log ({node.log_path}) ends with:\n{node.tail()}"
            )
        last, quiet_since = -1, time.monotonic()
        while (
            time.monotonic() - quiet_since < quiet_limit(drain_s, last)
            and recorder.processed() < len(frames)
        ):
            done = recorder.processed()
            if done != last:
                last, quiet_since = done, time.monotonic()
            time.sleep(0.05)
        # the last line shows the count the summary gives: outputs still arrive after the send
        bar.update(len(recorder.send_time), f"{recorder.processed()} processed")
        bar.close()
        if not interrupted:
            recorder.await_report()
        block, facts = summarise(recorder, frames, start, sent_at, warmup, rate)
        if three_d.routes:
            sent = ", ".join(f"{t} as {s}" for t, (s, _) in three_d.routes.items())
            block["notes"].append(f"3-D inputs sent with the frames: {sent}")
        block["notes"] += three_d.notes
        if not block["frames"]["processed"] and not interrupted:
            block["notes"].append(f"the node processed no frame; {log_ending(node)}")
        if interrupted:
            block["partial"] = True
            block["notes"].append(
                f"interrupted (Ctrl-C) after {block['frames']['sent']} of {len(frames)} frames"
            )
        if gt is not None:
            block["accuracy"] = merge_statistics([scored_statistics(recorder, gt, frames, match)])
            block["notes"].append(accuracy_note(block))
        if scoring_3d is not None:
            block.update(scoring_3d.blocks(recorder))
        if "model_fingerprint" not in facts:  # no /diagnostics came: describe from the bundle
            facts = bundle_facts(model, backend)
    finally:
        if recorder is not None:
            recorder.close()
        code = node.stop()
        if writer is not None:
            writer.close()
    block["node_exit_code"] = code
    block["node_log"] = str(log_path)
    return block, facts


def accuracy_note(block: dict) -> str:
    """What the accuracy of a block that ran the node measures: the frames it answered."""
    return (
        f"accuracy of the {block['accuracy']['frames_evaluated']} matched frames the node "
        f"published outputs for ({block['frames']['dropped']} of {block['frames']['sent']} "
        "dropped)"
    )


def log_ending(node: NodeProcess, lines: int = 5) -> str:
    """Where the node's log is and its last ``lines``: the refusals a replay's user must see."""
    tail = node.tail(lines).strip()
    return f"its log {node.log_path} ends with: {tail}" if tail else f"its log {node.log_path}"


def bundle_facts(model: str | Path, backend: str) -> dict:
    """The report's model facts from the bundle, where the node sent no /diagnostics."""
    from ..bundle import ModelBundle

    bundle = ModelBundle.load(model)
    return {
        "model": bundle.name,
        "model_fingerprint": bundle.fingerprint,
        "input_size": f"{bundle.input_h}x{bundle.input_w}",
        "backend": backend,
    }


def summarise(
    recorder: Recorder,
    frames: list[BagFrame],
    start: float,
    sent_at: float,
    warmup: int,
    rate: float,
) -> tuple[dict, dict]:
    """One recorder's report block (latency, frames, throughput, notes) and model facts."""
    with recorder.lock:
        records = {s: r for s, r in recorder.records.items() if s in recorder.send_time}
        send = dict(recorder.send_time)
        diag = recorder.diagnostics[-1] if recorder.diagnostics else {}
        outputs = dict(recorder.outputs)
    ordered = sorted(records.items(), key=lambda kv: send[kv[0]])
    samples: dict[str, list[float]] = {}
    for stamp, (received, stages) in ordered:
        for stage, ms in stages.items():
            samples.setdefault(stage, []).append(float(ms))
        samples.setdefault("end_to_end", []).append((received - send[stamp]) * 1e3)
    sent, processed = len(send), len(records)
    warm_notes: list[str] = []
    warm = warmup_left_out(warmup, processed, warm_notes)
    receipts = sorted(r for r, _ in records.values())
    last_receipt = receipts[-1] if receipts else start
    gaps = np.diff(receipts[warm:]) * 1e3 if len(receipts) > warm + 2 else None
    recorded_s = (frames[-1].bag_time_ns - frames[0].bag_time_ns) / 1e9 if frames else 0.0
    frames_block: dict[str, Any] = {
        "sent": sent,
        "received": _int(diag.get("frames_received")),
        "processed": processed,
        "dropped": sent - processed,
        "drop_pct": round(100.0 * (sent - processed) / sent, 2) if sent else None,
        "node_dropped": _int(diag.get("frames_dropped")),
    }
    notes = [
        f"published at x{rate:g} the recorded rate ({recorded_s:.2f} s of bag); node input QoS "
        "keep-last 1: a frame arriving while one is in flight replaces the waiting one "
        "(counted as dropped)",
        "outputs received: " + ", ".join(f"{k} {v}" for k, v in outputs.items()),
        *warm_notes,
    ]
    # "input silent" is expected once the bag has ended
    if diag.get("_message") not in (None, "ok") and "silent" not in diag["_message"]:
        notes.append(f"node diagnostics: {diag.get('_message')}")
    refused = (_int(diag.get("input_errors")) or 0) + (_int(diag.get("errors")) or 0)
    if refused:  # the reason is the node's, which the user of a replay must see
        frames_block["node_refused"] = refused
        reasons = ", ".join(
            f"{k[len(REASON_KEY):]} {v}" for k, v in diag.items() if k.startswith(REASON_KEY)
        )
        notes.insert(
            0,
            f"the node refused {refused} frame(s) (not the queue's drops): "
            f"{diag.get('last_error') or 'no reason given'}" + (f" [{reasons}]" if reasons else ""),
        )
    block = {
        "accuracy": None,
        "warmup_frames": warm,
        "latency": latency_stats(samples, warm),
        "frames": frames_block,
        "throughput": {
            "wall_s": round(last_receipt - start, 3),
            "input_fps": round((sent - 1) / (sent_at - start), 2) if sent > 1 else None,
            "output_fps": round(processed / max(last_receipt - start, 1e-9), 2)
            if processed
            else None,
            "jitter_ms": round(float(gaps.std()), 3) if gaps is not None else None,
            "target_input_fps": round((len(frames) - 1) / recorded_s * rate, 2)
            if recorded_s > 0
            else None,
        },
        "samples": {k: [round(v, 4) for v in vals] for k, vals in samples.items()},
        "notes": notes,
    }
    keys = ("model", "model_fingerprint", "input_size", "backend", "device", "precision")
    keys += ("int8_graph",)
    facts = {k: diag[k] for k in keys if k in diag}
    return block, facts


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None
