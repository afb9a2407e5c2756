"""One camera of the node: its input, its outputs, its counters and health, its tracker.

The node holds one ``Camera`` per ``image_topics`` entry (one for ``image_topic``) and one worker
that runs every camera's waiting frame as one batch (``start_round``, then ``finish_round``). A
camera is subscribed only while one of its own outputs has a subscriber (``IdleGate``), follows
its own publishers' reliability, and counts its own drops and errors: a bad frame fails that
camera's frame alone.

Video transports (``input_transport`` ffmpeg or foxglove) are decoded in the subscription
callback, packet by packet in arrival order, by one ``VideoStream`` per camera and transport:
a picture depends on the ones before it, so no packet may be skipped the way the mailbox skips
still frames. The decoded picture waits in the mailbox like any frame; the time spent decoding
is its ``decode`` stage.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy, qos_policy_name_from_kind
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from .. import video
from ..errors import ConfigError, InputError
from ..image_formats import mono_note
from ..labels import LabelSet
from ..overlay import draw_captions
from ..pipeline import PendingBatch, Pipeline
from ..structures import INFERENCE, BatchItem, FrameResult
from ..tracking import InstanceTracker
from . import convert
from .camera_info import CameraInfoRelay, stamp_ns
from .depth import CloudInput, DepthInput, tf2_msgs
from .diagnostics import (
    BatchStats,
    FrameStats,
    ReasonThrottle,
    health_status,
    input_causes,
    input_facts,
)
from .health import HealthMonitor
from .idle import IdleGate
from .params import INPUT_KINDS, CameraConfig, NodeConfig
from .publishers import Publishers, output_set, vision_msgs
from .qos import frame_qos, matched_reliability, reliability_name, stream_qos
from .worker import Batcher, Frame, Round

try:
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks

#: seconds between two log lines of one error reason (each reason has its own window)
LOG_THROTTLE_S = 2.0
#: video input kinds -> (message type name, ROS package, Python module)
VIDEO_KINDS = {
    "ffmpeg": (video.FFMPEG_PACKET, "ffmpeg_image_transport_msgs", "FFMPEGPacket"),
    "foxglove": (video.COMPRESSED_VIDEO, "foxglove_msgs", "CompressedVideo"),
}


def message_type(kind: str) -> type:
    """The ROS message class of input ``kind``; ConfigError naming the package to install when
    a video transport's messages are missing."""
    if kind == "raw":
        return Image
    if kind == "compressed":
        return CompressedImage
    _, package, name = VIDEO_KINDS[kind]
    try:
        module = importlib.import_module(f"{package}.msg")
    except ImportError:
        raise ConfigError(
            f"input_transport:={kind} needs the {package} messages, which are not installed; "
            f"apt install ros-$ROS_DISTRO-{package.replace('_', '-')} (or build {package})"
        ) from None
    return getattr(module, name)


@dataclass
class VideoPicture:
    """A decoded video packet waiting in the mailbox: its header (CompressedVideo's stamp and
    frame_id as a Header), the bgr8 picture and the ms its decoding took."""

    header: Header
    image: Any
    decode_ms: float


@dataclass
class Job:
    """One camera's frame in a round: validated for the batch, with its own times (ms)."""

    camera: Camera
    frame: Frame
    item: BatchItem
    wanted: dict[str, bool]
    queue_ms: float
    decode_ms: float
    prepare_ms: float


def three_d_off(missing: str, cloud: bool) -> str:
    """The start-up warning when the 3-D outputs are off for want of ``missing`` (vision_msgs,
    or tf2_msgs for a cloud): every output it turns off, and both ways to install it (a ROS
    machine's apt package; the pip setup has no wheel for either)."""
    outputs = ["~/detections_3d", "~/markers_3d", "the distance captions of ~/overlay"]
    if cloud:
        outputs.insert(2, "~/cloud_labelled")
    why = ", the cloud cannot be placed in the camera" if missing == "tf2_msgs" else ""
    return (
        f"{missing} is not installed{why}: {', '.join(outputs)} are off; install "
        f"ros-<distro>-{missing.replace('_', '-')} (apt), or, where ROS came from pip (no wheel "
        "exists), build it with 'compactinst ros build-interfaces'"
    )


class Camera:
    """Subscriptions, camera_info relay, publishers, stats, health, throttle, tracker and idle
    gate of one camera; its frames go to slot ``index`` of the worker's ``batcher``."""

    def __init__(
        self,
        node: Node,
        index: int,
        camera: CameraConfig,
        config: NodeConfig,
        labels: LabelSet,
        batcher: Batcher,
        tracker: InstanceTracker,
    ) -> None:
        self.node = node
        self.log = node.get_logger()
        self.index = index
        self.camera = camera
        self.config = config
        self.batcher = batcher
        self.tracker = tracker
        self.several = camera.prefix != "~/"
        self.stats = FrameStats()
        self.throttle = ReasonThrottle(LOG_THROTTLE_S)
        #: set by the first mono frame: logged once, then a WARN on every /diagnostics report
        self.mono_note: str | None = None
        self.health = HealthMonitor(config.health)
        self.subs: dict[str, Any] = {}
        self.reliability: dict[str, ReliabilityPolicy] = {}
        self.message_types = {kind: message_type(kind) for kind in self.kinds}
        #: decoder state per video input kind, fresh on every (re-)start of the input
        self.streams: dict[str, video.VideoStream] = {}
        self.gate: IdleGate | None = None
        self.active = False
        self.pubs: Publishers | None = Publishers(
            node,
            config.outputs,
            config.output_reliability,
            labels,
            config.options.score_threshold,
            config.overlay_jpeg_quality,
            camera.prefix,
        )
        self.camera_info: CameraInfoRelay | None = None
        if camera.camera_info_topic:
            self.camera_info = CameraInfoRelay(
                node,
                camera.camera_info_topic,
                config.camera_info_tolerance_ms,
                config.output_reliability,
                camera.prefix,
            )
        self.depth: DepthInput | None = None
        infos = self.camera_info.matcher if self.camera_info is not None else None
        three_d = (infos, config.output_reliability, vision_msgs, labels, camera.prefix)
        if (camera.depth_topic or camera.cloud_topic) and vision_msgs is None:
            self.log.warning(self._named(three_d_off("vision_msgs", bool(camera.cloud_topic))))
        elif camera.depth_topic:
            self.depth = DepthInput(
                node,
                camera.depth_topic,
                config.depth_tolerance_ms,
                *three_d,
                transport=config.depth_transport,
                output_frame=config.output_frame,
            )
        elif camera.cloud_topic and tf2_msgs is None:
            self.log.warning(self._named(three_d_off("tf2_msgs", cloud=True)))
        elif camera.cloud_topic:
            self.depth = CloudInput(
                node, camera.cloud_topic, config.cloud_tolerance_ms, *three_d,
                fixed_frame=config.fixed_frame, output_frame=config.output_frame,
            )  # fmt: skip

    def _listened(self) -> bool:
        """Whether an output of this camera, ~/detections_3d included, has a subscriber."""
        return (self.pubs is not None and self.pubs.listened()) or (
            self.depth is not None and self.depth.wanted()
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """The input transports subscribed: raw, compressed or both."""
        return INPUT_KINDS[self.config.input_transport]

    def describe_inputs(self) -> str:
        """The input topics as resolved in the node's namespace, for the start-up log."""
        return ", ".join(
            f"{self.node.resolve_topic_name(self.camera.topic(kind))} ({kind})"
            for kind in self.kinds
        )

    def activate(self) -> None:
        """Subscribe while one of this camera's outputs has a subscriber (``IdleGate``)."""
        assert self.pubs is not None
        self.active = True
        self.gate = IdleGate(self.node, self._listened, self._start_input, self._stop_input)

    def deactivate(self) -> None:
        """Unsubscribe and discard a waiting frame (counted as dropped)."""
        self.active = False
        if self.gate is not None:
            self.gate.close()
            self.gate = None
        self._stop_input()
        if self.batcher.clear(self.index):
            self.stats.on_dropped()

    def destroy(self) -> None:
        """Unsubscribe and remove the publishers."""
        if self.active:
            self.deactivate()
        if self.pubs is not None:
            self.pubs.destroy()
            self.pubs = None
        if self.camera_info is not None:
            self.camera_info.destroy()
            self.camera_info = None
        if self.depth is not None:
            self.depth.destroy()
            self.depth = None

    def _start_input(self) -> None:
        """Subscribe to the input transport(s) (and the camera_info), at the last known QoS."""
        default = self.config.input_reliability or ReliabilityPolicy.BEST_EFFORT
        self.streams = {kind: video.VideoStream() for kind in self.kinds if kind in VIDEO_KINDS}
        for kind in self.kinds:
            self._subscribe(kind, self.reliability.get(kind, default))
        if self.camera_info is not None:
            self.camera_info.start()
        if self.depth is not None:
            self.depth.start()
        self.batcher.expect(self.index, True)

    def _stop_input(self) -> None:
        """Unsubscribe the input (idle or inactive): DDS delivers no frame of this camera."""
        self.batcher.expect(self.index, False)
        for sub in self.subs.values():
            self.node.destroy_subscription(sub)
        self.subs.clear()
        if self.camera_info is not None:
            self.camera_info.stop()
        if self.depth is not None:
            self.depth.stop()

    def _subscribe(self, kind: str, reliability: ReliabilityPolicy) -> None:
        """(Re-)subscribe ``kind``; the new reader exists before the old one goes (fewer gaps)."""
        old = self.subs.pop(kind, None)
        events = SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible_qos)
        compressed = kind == "compressed"
        if kind in VIDEO_KINDS:
            callback = partial(self._on_video, kind=kind)
        else:
            callback = partial(self._on_image, compressed=compressed)
        self.subs[kind] = self.node.create_subscription(
            self.message_types[kind],
            self.camera.topic(kind),
            callback,
            stream_qos(reliability) if kind in VIDEO_KINDS else frame_qos(reliability),
            event_callbacks=events,
        )
        self.reliability[kind] = reliability
        if old is not None:
            self.node.destroy_subscription(old)

    def publisher_infos(self, kind: str) -> list:
        """The publishers of input ``kind``'s topic."""
        sub = self.subs.get(kind)
        topic = sub.topic_name if sub is not None else self.camera.topic(kind)
        return self.node.get_publishers_info_by_topic(topic)

    def match_qos(self) -> None:
        """Re-create a subscription when the publishers' reliability calls for another one."""
        for kind in list(self.subs):
            wanted = matched_reliability(self.publisher_infos(kind))
            if wanted is not None and wanted != self.reliability.get(kind):
                self.log.info(
                    f"input {self.subs[kind].topic_name}: publishers are "
                    f"{reliability_name(wanted)}; re-subscribing {reliability_name(wanted)}"
                )
                self._subscribe(kind, wanted)

    def _on_incompatible_qos(self, event: Any) -> None:
        policy = qos_policy_name_from_kind(event.last_policy_kind)
        message = (
            f"incompatible QoS on the input topic (policy {policy}); set "
            "input_reliability:=auto or match the camera's reliability"
        )
        self.stats.on_qos_incompatible(message)
        self.log.warning(self._named(message), throttle_duration_sec=5.0)

    def _on_image(self, msg: Any, compressed: bool) -> None:
        if not self.active:
            return
        now_ns = self.node.get_clock().now().nanoseconds
        self.health.stamp_age.tick(stamp_ns(msg.header.stamp), now_ns)
        self.stats.on_received(self.batcher.put(self.index, Frame(msg, compressed)))

    def _on_video(self, msg: Any, kind: str) -> None:
        """Decode a video packet now, in arrival (decode) order: each picture the decoder gives
        goes out with its own message's header (with B-frames, an earlier message's: pictures
        come in presentation order, one packet late); a message that gives no picture is a bad
        input frame under its reason, packets a pts jump shows lost are counted as dropped."""
        stream = self.streams.get(kind)
        if not self.active or stream is None:
            return
        began = time.perf_counter()
        msgtype = VIDEO_KINDS[kind][0]
        if msgtype == video.COMPRESSED_VIDEO:
            header = Header(stamp=msg.timestamp, frame_id=msg.frame_id)
        else:
            header = msg.header
        lost = stream.lost
        try:
            outcomes = stream.push(video.packet_of(msg, msgtype), header)
        except InputError as exc:  # a message that is no packet at all
            self.stats.on_received(False)
            self.fail(exc)
            return
        finally:
            if stream.lost > lost:
                self.stats.on_dropped(stream.lost - lost)
        decode_ms = (time.perf_counter() - began) * 1e3
        for outcome in outcomes:
            if outcome.picture is None:
                self.stats.on_received(False)  # received, then failed: a bad input frame
                self.fail(outcome.error)
            else:
                self._on_image(VideoPicture(outcome.tag, outcome.picture, decode_ms), False)

    def prepare(self, pipeline: Pipeline, frame: Frame, start: float) -> Job | None:
        """Convert and validate the frame for the round that began at ``start``; None when it
        failed (counted, logged) or no output of this camera has a subscriber (skipped)."""
        pubs = self.pubs
        if pubs is None:
            return None  # cleaned up while the worker was still busy: nothing to publish on
        began = time.perf_counter()
        try:
            wanted = pubs.wanted()
            depth_wanted = self.depth is not None and self.depth.wanted()
            if not any(wanted.values()) and not depth_wanted:
                self.stats.on_idle()
                return None
            if isinstance(frame.msg, VideoPicture):  # decoded on arrival (``_on_video``)
                image, encoding = frame.msg.image, "bgr8"
                began -= frame.msg.decode_ms / 1e3  # its decode stage includes that decoding
            elif frame.compressed:
                image, encoding = convert.image_from_compressed(frame.msg)
            else:
                image, encoding = convert.image_from_msg(frame.msg)
                if self.mono_note is None and (note := mono_note(encoding)):
                    self.mono_note = note
                    self.log.warning(self._named(note))
            decoded = time.perf_counter()
            outputs = output_set(wanted)
            if depth_wanted:  # ~/detections_3d lifts the instances
                outputs = dataclasses.replace(outputs, instance=True)
            if self.depth is not None and outputs.overlay:
                # the captions wait for the lifting, which adds each instance's distance
                outputs = dataclasses.replace(outputs, instance=True, captions=False)
            item = pipeline.prepare(image, encoding, outputs)
        except Exception as exc:
            self.fail(exc)
            return None
        queue_ms = (start - frame.received) * 1e3
        prepare_ms = (time.perf_counter() - decoded) * 1e3
        return Job(self, frame, item, wanted, queue_ms, (decoded - began) * 1e3, prepare_ms)

    def publish(self, job: Job, result: FrameResult, pipeline: Pipeline) -> None:
        """Publish one frame's outputs, camera_info and latency with the frame's own header;
        ``pipeline``, which inferred the frame, lifts its instances to 3-D."""
        pubs = self.pubs
        if pubs is None:
            return
        try:
            inferred = time.perf_counter()
            header = job.frame.msg.header
            lifted = None
            captions = job.item.outputs.captions
            if self.depth is not None and (self.depth.wanted() or not captions):
                lifted = self.depth.lift(header, result, pipeline)
            if not captions and result.overlay is not None:
                distances = None if lifted is None else lifted.distance  # NaN: not lifted
                draw_captions(result.overlay, result, self.depth.labels, distances=distances)
            pubs.publish(header, result, job.wanted)
            if self.depth is not None:  # each 3-D output only while subscribed; empty if unlifted
                self.depth.publish(header, result, lifted)
            if self.camera_info is not None:
                self.camera_info.publish(header, result.meta.src_h, result.meta.src_w)
            done = time.perf_counter()
            timings = dict(result.timings_ms)
            timings[INFERENCE] = timings.get(INFERENCE, 0.0) + job.prepare_ms
            timings["decode"] = job.decode_ms
            timings["queue"] = job.queue_ms
            timings["publish"] = (done - inferred) * 1e3
            timings["node"] = (done - job.frame.received) * 1e3
            now_ns = self.node.get_clock().now().nanoseconds
            timings["pipeline"] = self.health.pipeline.tick(stamp_ns(header.stamp), now_ns)
            self.stats.on_processed(timings)
            if job.wanted["latency"]:
                pubs.publish_latency(header, timings)
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: Exception) -> None:
        """Count this camera's failed frame under its reason and log it, throttled per reason
        (a frequent reason never hides another one); InputError is a bad input frame."""
        if isinstance(exc, InputError):
            message = f"bad input frame: {exc}"
            line, detail, input_error = f"skipping a {message}", "", True
        else:
            if not self.node.context.ok():
                return  # shutting down (Ctrl-C): publishers are gone, nothing to report
            message = f"{type(exc).__name__}: {exc}"
            line, detail, input_error = f"frame failed: {message}", traceback.format_exc(), False
        suppressed = self.throttle.admit(self.stats.on_error(message, input_error))
        if suppressed is None:
            return
        more = f" ({suppressed} more like it since the last one logged)" if suppressed else ""
        log = self.log.warning if input_error else self.log.error
        log(self._named(f"{line}{more}") + (f"\n{detail}" if detail else ""))

    def _named(self, line: str) -> str:
        """``line`` with the camera's name in front where the node has several."""
        return f"camera {self.camera.name}: {line}" if self.several else line

    def status(
        self, name: str, facts: dict, loaded: bool, warnings: Sequence[str], failure: str | None
    ) -> DiagnosticStatus:
        """This camera's /diagnostics status; ``failure`` (a failed transition) makes it ERROR."""
        idle = self.gate is not None and self.gate.idle
        state = ("idle" if idle else "active") if self.active else "inactive"
        publishers = sum(len(self.publisher_infos(k)) for k in self.kinds) if self.active else 1
        report = self.stats.tick()
        checks = [self.health.check(report["to_output"], report["processed"], state == "active")]
        if self.camera_info is not None:
            checks.append(self.camera_info.check())
        if self.depth is not None:
            checks.append(self.depth.check())
        if failure is not None:
            checks.append(([(DiagnosticStatus.ERROR, failure)], {}))
        camera = {"camera": self.camera.name} if self.several else {}
        return health_status(
            name=name,
            report=report,
            facts={**facts, **camera, **input_facts(self.subs, self.reliability), "state": state},
            publishers=publishers,
            input_timeout_s=self.config.input_timeout,
            loaded=loaded,
            warnings=[*warnings, *filter(None, [self.mono_note])],
            checks=checks,
            causes=input_causes(
                self.node,
                self.camera.topic,
                {k: v for k, v in self.reliability.items() if k in self.subs},
            )
            if self.active
            else ("", ""),
        )


@dataclass
class StartedRound:
    """A round after its first half: the valid frames' jobs and the Pipeline's pending batch."""

    jobs: list[Job]
    pending: PendingBatch


def start_round(
    pipeline: Pipeline, cameras: Sequence[Camera], batch: Round, stats: BatchStats
) -> StartedRound | None:
    """A round's first half: every camera's frame converted and validated alone, the valid ones
    started as one batch (``Pipeline.encode_batch``); None when nothing is left to finish."""
    start = time.perf_counter()
    jobs = [
        job
        for index, frame in batch.frames
        if (job := cameras[index].prepare(pipeline, frame, start)) is not None
    ]
    if not jobs:
        return None
    try:
        pending = pipeline.encode_batch([j.item for j in jobs])
    except Exception as exc:
        for job in jobs:
            job.camera.fail(exc)
        return None
    stats.on_round(len(jobs), pipeline.batch_slots(len(jobs)), batch.wait_s)
    return StartedRound(jobs, pending)


def finish_round(pipeline: Pipeline, started: StartedRound) -> None:
    """A round's second half: the batch finished (``Pipeline.decode_batch``, each frame with
    its camera's tracker), then each camera publishes its own."""
    jobs = started.jobs
    try:
        results = pipeline.decode_batch(started.pending, [j.camera.tracker for j in jobs])
    except Exception as exc:
        for job in jobs:
            job.camera.fail(exc)
        return
    for job, result in zip(jobs, results, strict=True):
        job.camera.publish(job, result, pipeline)
