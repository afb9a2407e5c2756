"""``compactinst_node``: camera images in; instance, panoptic, semantic masks, overlay, latency out.

A thin rclpy shell around ``Pipeline``. Subscription callbacks only put the newest frame in a
one-slot mailbox; one worker thread owns the pipeline (and, on the GPU backend, its CUDA
context), converts, infers and publishes. See docs/ros.md for topics, parameters and QoS.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    InvalidTopicNameException,
)
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.expand_topic_name import expand_topic_name
from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy, qos_policy_name_from_kind
from rclpy.validate_full_topic_name import validate_full_topic_name
from sensor_msgs.msg import CompressedImage, Image, JointState, PointCloud2
from std_msgs.msg import Float64, Header, String

from ..bundle import default_bundle_path
from ..errors import CompactInstError, ConfigError, InputError
from ..structures import STAGES, OutputSet, PostprocessOptions
from . import convert
from .diagnostics import FrameStats, diagnostic_array, health_status
from .qos import (
    input_qos,
    latched_qos,
    matched_reliability,
    output_qos,
    parse_reliability,
    reliability_name,
)
from .worker import Frame, Worker

try:
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks

try:
    import vision_msgs.msg as vision_msgs
except ImportError:
    vision_msgs = None

#: every output name accepted by the ``outputs`` parameter
OUTPUTS = (
    "instance_mask",
    "panoptic",
    "semantic",
    "overlay",
    "detections",
    "instance_table",
    "panoptic_segments",
    "latency",
)
BACKEND_CHOICES = ("auto", "tensorrt", "onnxruntime")
TRANSPORT_CHOICES = ("raw", "compressed", "both")


@dataclass(frozen=True)
class ParamSpec:
    """Default, description and constraints of one node parameter."""

    default: Any
    description: str
    choices: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None


#: The node's parameters (all read-only: change them by restarting or lifecycle re-configure).
PARAMETERS: dict[str, ParamSpec] = {
    "model": ParamSpec("", "model bundle folder; empty = the installed models/default"),
    "backend": ParamSpec("auto", "inference backend", choices=BACKEND_CHOICES),
    "engine_cache_dir": ParamSpec("", "TensorRT engine cache folder; empty = backend default"),
    "allow_engine_build": ParamSpec(
        True, "tensorrt: build a missing or stale engine at start (minutes) instead of failing"
    ),
    "gpu_device": ParamSpec(0, "tensorrt: CUDA device index", None, (0, 15)),
    "ort_threads": ParamSpec(
        0, "ONNX Runtime intra-op threads; 0 = runtime default", None, (0, 64)
    ),
    "score_threshold": ParamSpec(0.3, "minimum instance score", None, (0.0, 1.0)),
    "mask_threshold": ParamSpec(0.5, "mask probability threshold", None, (0.01, 0.99)),
    "object_mask_threshold": ParamSpec(0.8, "panoptic: minimum query score", None, (0.0, 1.0)),
    "overlap_threshold": ParamSpec(0.8, "panoptic: minimum visible fraction", None, (0.0, 1.0)),
    "max_instances": ParamSpec(100, "most instances per frame", None, (1, 65535)),
    "outputs": ParamSpec(list(OUTPUTS), f"outputs to offer, any of {list(OUTPUTS)}"),
    "overlay_alpha": ParamSpec(0.5, "overlay colour weight", None, (0.0, 1.0)),
    "image_topic": ParamSpec("image", "input sensor_msgs/Image topic"),
    "input_transport": ParamSpec(
        "raw", "raw Image, <image_topic>/compressed, or both", choices=TRANSPORT_CHOICES
    ),
    "input_reliability": ParamSpec(
        "auto",
        "input QoS reliability; auto follows the publishers",
        choices=("auto", "reliable", "best_effort"),
    ),
    "output_reliability": ParamSpec(
        "reliable", "output QoS reliability", choices=("reliable", "best_effort")
    ),
    "input_timeout": ParamSpec(
        2.0, "seconds without frames before /diagnostics warns", None, (0.1, 3600.0)
    ),
    "diagnostics_period": ParamSpec(1.0, "seconds between /diagnostics reports", None, (0.1, 60.0)),
}


def _ros_value(value: Any) -> str:
    """``value`` as typed on a command line (``-p name:=value``): 1.0 for a double, [a,b] lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value) or "''"


def _descriptor(name: str, spec: ParamSpec) -> ParameterDescriptor:
    desc = spec.description
    if spec.choices:
        desc += f" ({' | '.join(spec.choices)})"
    d = ParameterDescriptor(name=name, description=desc, read_only=True)
    if (
        spec.bounds is not None
        and isinstance(spec.default, int)
        and not isinstance(spec.default, bool)
    ):
        d.integer_range = [
            IntegerRange(from_value=int(spec.bounds[0]), to_value=int(spec.bounds[1]), step=1)
        ]
    elif spec.bounds is not None:
        d.floating_point_range = [
            FloatingPointRange(
                from_value=float(spec.bounds[0]), to_value=float(spec.bounds[1]), step=0.0
            )
        ]
    if isinstance(spec.default, list):
        d.type = ParameterType.PARAMETER_STRING_ARRAY
    return d


@dataclass(frozen=True)
class NodeConfig:
    """Validated parameter values."""

    model: Path
    backend: str
    engine_cache_dir: str
    allow_engine_build: bool
    gpu_device: int
    ort_threads: int
    options: PostprocessOptions
    outputs: frozenset[str]
    overlay_alpha: float
    image_topic: str
    input_transport: str
    input_reliability: ReliabilityPolicy | None
    output_reliability: ReliabilityPolicy
    input_timeout: float
    diagnostics_period: float


def read_config(values: dict[str, Any]) -> NodeConfig:
    """Validate parameter values; ConfigError names the parameter, the value and the fix."""
    for name, spec in PARAMETERS.items():
        if spec.choices and values[name] not in spec.choices:
            raise ConfigError(
                f"parameter {name}='{values[name]}' is invalid; choose one of {list(spec.choices)}"
            )
    unknown = sorted(set(values["outputs"]) - set(OUTPUTS))
    if unknown:
        raise ConfigError(f"parameter outputs has unknown names {unknown}; known: {list(OUTPUTS)}")
    if values["model"]:
        model = Path(values["model"]).expanduser()
    else:
        found = default_bundle_path()
        if found is None:
            raise ConfigError(
                "parameter model is empty and no models/default bundle is installed; pass "
                "model:=/path/to/bundle (export one with 'compactinst export CONFIG --out DIR')"
            )
        model = found
    options = PostprocessOptions(
        score_threshold=float(values["score_threshold"]),
        mask_threshold=float(values["mask_threshold"]),
        object_mask_threshold=float(values["object_mask_threshold"]),
        overlap_threshold=float(values["overlap_threshold"]),
        max_instances=int(values["max_instances"]),
    )
    return NodeConfig(
        model=model,
        backend=values["backend"],
        engine_cache_dir=values["engine_cache_dir"],
        allow_engine_build=bool(values["allow_engine_build"]),
        gpu_device=int(values["gpu_device"]),
        ort_threads=int(values["ort_threads"]),
        options=options,
        outputs=frozenset(values["outputs"]),
        overlay_alpha=float(values["overlay_alpha"]),
        image_topic=values["image_topic"],
        input_transport=values["input_transport"],
        input_reliability=parse_reliability("input_reliability", values["input_reliability"]),
        output_reliability=parse_reliability(
            "output_reliability", values["output_reliability"], allow_auto=False
        ),
        input_timeout=float(values["input_timeout"]),
        diagnostics_period=float(values["diagnostics_period"]),
    )


def check_topic(node: Node, name: str, parameter: str = "image_topic") -> str:
    """Fully qualified ``name`` on ``node``; ConfigError naming the parameter if invalid."""
    try:
        full = expand_topic_name(name, node.get_name(), node.get_namespace())
        validate_full_topic_name(full)
    except (InvalidTopicNameException, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(
            f"parameter {parameter}='{name}' is not a valid ROS topic name ({reason}); "
            "pass e.g. image_topic:=/camera/image_raw"
        ) from None
    return full


class CompactInstCore:
    """What the plain and the lifecycle node share: configure, activate, deactivate, cleanup."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.log = node.get_logger()
        for name, spec in PARAMETERS.items():
            try:
                node.declare_parameter(name, spec.default, _descriptor(name, spec))
            except InvalidParameterTypeException as exc:
                raise ConfigError(
                    f"parameter {name}: {exc}; give it the default's type, e.g. "
                    f"{name}:={_ros_value(spec.default)} (see config/compactinst.yaml)"
                ) from None
            except InvalidParameterValueException as exc:
                raise ConfigError(f"parameter {name}: {exc}; see config/compactinst.yaml") from None
        self.config: NodeConfig | None = None
        self.stats = FrameStats()
        self.worker: Worker | None = None
        self.facts: dict[str, Any] = {}
        self.pubs: dict[str, Any] = {}
        self.latency_pubs: dict[str, Any] = {}
        self.subs: dict[str, Any] = {}
        self.reliability: dict[str, ReliabilityPolicy] = {}
        self.timers: list[Any] = []
        self.active = False
        self.diag_pub: Any = None
        self._match_timer: Any = None

    # -- transitions ---------------------------------------------------------------------------

    def configure(self) -> None:
        """Validate parameters, load the model on the worker thread, create publishers."""
        values = {name: self.node.get_parameter(name).value for name in PARAMETERS}
        cfg = read_config(values)
        for kind in ("raw", "compressed"):
            check_topic(self.node, self._topic(kind, cfg))
        self.config = cfg
        self.stats = FrameStats()
        self.worker = Worker(self._make_pipeline, self._process)
        self.facts = {"status": "loading"}
        pipeline = self.worker.start()
        self.facts = {"backend": pipeline.backend_name, **pipeline.describe()}
        labels = pipeline.bundle.labels
        out_qos = output_qos(cfg.output_reliability)
        images = {"instance_mask", "panoptic", "semantic", "overlay"}
        for name in sorted(cfg.outputs & images):
            self.pubs[name] = self.node.create_publisher(Image, f"~/{name}", out_qos)
        if "instance_table" in cfg.outputs:
            self.pubs["instance_table"] = self.node.create_publisher(
                PointCloud2, "~/instance_table", out_qos
            )
        if "panoptic_segments" in cfg.outputs:
            self.pubs["panoptic_segments"] = self.node.create_publisher(
                PointCloud2, "~/panoptic_segments", out_qos
            )
        labels_pub = self.node.create_publisher(String, "~/labels", latched_qos())
        labels_pub.publish(String(data=convert.labels_json(labels)))
        self.pubs["labels"] = labels_pub
        if "detections" in cfg.outputs:
            if vision_msgs is None:
                self.log.warning(
                    "vision_msgs is not installed: ~/detections and ~/label_info are off; "
                    "~/instance_table and ~/labels carry the same data (install "
                    "ros-<distro>-vision-msgs to enable them)"
                )
            else:
                self.pubs["detections"] = self.node.create_publisher(
                    vision_msgs.Detection2DArray, "~/detections", out_qos
                )
                info_pub = self.node.create_publisher(
                    vision_msgs.LabelInfo, "~/label_info", latched_qos()
                )
                header = Header()
                header.stamp = self.node.get_clock().now().to_msg()
                info_pub.publish(
                    convert.label_info_msg(header, labels, cfg.options.score_threshold, vision_msgs)
                )
                self.pubs["label_info"] = info_pub
        if "latency" in cfg.outputs:
            for stage in STAGES:
                self.latency_pubs[stage] = self.node.create_publisher(
                    Float64, f"~/latency/{stage}", out_qos
                )
            self.pubs["latency_frame"] = self.node.create_publisher(
                JointState, "~/latency/frame", out_qos
            )
        self.diag_pub = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.timers.append(
            self.node.create_timer(cfg.diagnostics_period, self._publish_diagnostics)
        )
        self.log.info(
            f"loaded {self.facts.get('model')} ({self.facts.get('input_size')}) on "
            f"{self.facts.get('backend')}; outputs: {sorted(cfg.outputs)}"
        )

    def activate(self) -> None:
        """Subscribe to the input topic(s); in auto mode keep the QoS matched to publishers."""
        assert self.config is not None
        transports = {"raw": ("raw",), "compressed": ("compressed",), "both": ("raw", "compressed")}
        for kind in transports[self.config.input_transport]:
            self._subscribe(kind, self.config.input_reliability or ReliabilityPolicy.BEST_EFFORT)
        if self.config.input_reliability is None:
            self._match_timer = self.node.create_timer(0.5, self._match_qos)
            self.timers.append(self._match_timer)
            self._match_qos()
        self.active = True

    def deactivate(self) -> None:
        """Unsubscribe and discard a waiting frame; the model stays loaded."""
        self.active = False
        for sub in self.subs.values():
            self.node.destroy_subscription(sub)
        self.subs.clear()
        if self._match_timer is not None:
            self.node.destroy_timer(self._match_timer)
            self.timers.remove(self._match_timer)
            self._match_timer = None
        if self.worker is not None and self.worker.mailbox.clear():
            self.stats.on_dropped()

    def cleanup(self) -> None:
        """Stop the worker (it closes the pipeline on its own thread) and remove publishers."""
        if self.active:
            self.deactivate()
        if self.worker is not None and not self.worker.stop():
            self.log.warning("worker still busy after 10 s; leaving it to exit with the process")
        self.worker = None
        for timer in self.timers:
            self.node.destroy_timer(timer)
        self.timers.clear()
        for pub in [*self.pubs.values(), *self.latency_pubs.values()]:
            self.node.destroy_publisher(pub)
        self.pubs.clear()
        self.latency_pubs.clear()
        if self.diag_pub is not None:
            self.node.destroy_publisher(self.diag_pub)
            self.diag_pub = None

    # -- input ---------------------------------------------------------------------------------

    def _topic(self, kind: str, config: NodeConfig | None = None) -> str:
        cfg = config or self.config
        if cfg is None:
            raise RuntimeError("the node is not configured; configure it before subscribing")
        base = cfg.image_topic
        return base if kind == "raw" else f"{base.rstrip('/')}/compressed"

    def _subscribe(self, kind: str, reliability: ReliabilityPolicy) -> None:
        """(Re-)subscribe ``kind``; the new reader exists before the old one goes (fewer gaps)."""
        old = self.subs.pop(kind, None)
        msg_type = Image if kind == "raw" else CompressedImage
        events = SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible_qos)
        compressed = kind == "compressed"
        self.subs[kind] = self.node.create_subscription(
            msg_type,
            self._topic(kind),
            lambda msg: self._on_image(msg, compressed),
            input_qos(reliability),
            event_callbacks=events,
        )
        self.reliability[kind] = reliability
        if old is not None:
            self.node.destroy_subscription(old)

    def _publisher_infos(self, kind: str) -> list:
        sub = self.subs.get(kind)
        topic = sub.topic_name if sub is not None else self._topic(kind)
        return self.node.get_publishers_info_by_topic(topic)

    def _match_qos(self) -> None:
        """Re-create a subscription when the publishers' reliability calls for another one."""
        for kind in list(self.subs):
            wanted = matched_reliability(self._publisher_infos(kind))
            if wanted is not None and wanted != self.reliability.get(kind):
                self.log.info(
                    f"input {self.subs[kind].topic_name}: publishers are "
                    f"{reliability_name(wanted)}; re-subscribing {reliability_name(wanted)}"
                )
                self._subscribe(kind, wanted)

    def _on_incompatible_qos(self, event: Any) -> None:
        message = (
            "incompatible QoS on the input topic (policy "
            f"{qos_policy_name_from_kind(event.last_policy_kind)}); set "
            "input_reliability:=auto or match the camera's reliability"
        )
        self.stats.on_qos_incompatible(message)
        self.log.warning(message, throttle_duration_sec=5.0)

    def _on_image(self, msg: Any, compressed: bool) -> None:
        if self.worker is None or not self.active:
            return
        self.stats.on_received(self.worker.mailbox.put(Frame(msg, compressed)))

    # -- worker thread -------------------------------------------------------------------------

    def _make_pipeline(self) -> Any:
        from ..backends import resolve_backend_name
        from ..pipeline import Pipeline

        cfg = self.config
        assert cfg is not None
        backend = resolve_backend_name(cfg.backend)
        kwargs: dict[str, Any] = {}
        if backend == "onnxruntime" and cfg.ort_threads:
            kwargs["threads"] = cfg.ort_threads
        if backend == "tensorrt":
            kwargs["allow_build"] = cfg.allow_engine_build
            kwargs["device"] = cfg.gpu_device
            kwargs["overlay_alpha"] = cfg.overlay_alpha
            if cfg.engine_cache_dir:
                kwargs["engine_cache_dir"] = cfg.engine_cache_dir
        return Pipeline(cfg.model, backend=backend, options=cfg.options, **kwargs)

    def _wanted(self) -> dict[str, bool]:
        wanted = {
            name: pub.get_subscription_count() > 0
            for name, pub in self.pubs.items()
            if name not in ("labels", "label_info")
        }
        wanted["latency"] = wanted.get("latency_frame", False) or any(
            p.get_subscription_count() > 0 for p in self.latency_pubs.values()
        )
        return wanted

    def _process(self, pipeline: Any, frame: Frame) -> None:
        """Convert, infer and publish one frame; errors are counted, logged and reported."""
        start = time.perf_counter()
        queue_ms = (start - frame.received) * 1e3
        try:
            wanted = self._wanted()
            if not any(wanted.values()):
                self.stats.on_idle()
                return
            if frame.compressed:
                image, encoding = convert.image_from_compressed(frame.msg)
            else:
                image, encoding = convert.image_from_msg(frame.msg)
            decoded = time.perf_counter()
            outputs = OutputSet(
                instance=any(
                    wanted.get(k, False)
                    for k in ("instance_mask", "overlay", "detections", "instance_table")
                ),
                panoptic=wanted.get("panoptic", False) or wanted.get("panoptic_segments", False),
                semantic=wanted.get("semantic", False),
                overlay=wanted.get("overlay", False),
            )
            result = pipeline(image, encoding, outputs)
            inferred = time.perf_counter()
            self._publish_outputs(frame.msg.header, image, encoding, result, wanted, pipeline)
            done = time.perf_counter()
            timings = dict(result.timings_ms)
            timings["decode"] = (decoded - start) * 1e3
            timings["queue"] = queue_ms
            timings["publish"] = (done - inferred) * 1e3
            timings["total"] = (done - frame.received) * 1e3
            self.stats.on_processed(timings)
            if wanted["latency"]:
                self._publish_latency(frame.msg.header, timings)
        except InputError as exc:
            self.stats.on_error(f"bad input frame: {exc}", input_error=True)
            self.log.warning(f"skipping a bad input frame: {exc}", throttle_duration_sec=2.0)
        except Exception as exc:
            if not self.node.context.ok():
                return  # shutting down (Ctrl-C): publishers are gone, nothing to report
            self.stats.on_error(f"{type(exc).__name__}: {exc}", input_error=False)
            self.log.error(
                f"frame failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                throttle_duration_sec=2.0,
            )

    def _publish_outputs(
        self, header: Any, image: Any, encoding: str, result: Any, wanted: dict, pipeline: Any
    ) -> None:
        for name, raster in convert.result_rasters(result).items():
            if wanted.get(name) and raster is not None:
                self.pubs[name].publish(convert.image_msg(raster, header))
        if wanted.get("instance_table"):
            self.pubs["instance_table"].publish(
                convert.instance_table_msg(header, result.instances)
            )
        if wanted.get("panoptic_segments"):
            self.pubs["panoptic_segments"].publish(
                convert.segment_table_msg(header, result.segments)
            )
        if wanted.get("detections"):
            self.pubs["detections"].publish(
                convert.detections_msg(header, result.instances, vision_msgs)
            )
        if wanted.get("overlay") and result.instance_raster is not None:
            from ..overlay import overlay_bgr

            blended = overlay_bgr(
                image, encoding, result, pipeline.bundle.labels, self.config.overlay_alpha
            )
            self.pubs["overlay"].publish(convert.image_msg(blended, header, "bgr8"))

    def _publish_latency(self, header: Any, timings: dict[str, float]) -> None:
        for stage, pub in self.latency_pubs.items():
            if stage in timings and pub.get_subscription_count() > 0:
                pub.publish(Float64(data=float(timings[stage])))
        frame_pub = self.pubs.get("latency_frame")
        if frame_pub is not None and frame_pub.get_subscription_count() > 0:
            frame_pub.publish(convert.latency_record_msg(header, STAGES, timings))

    # -- diagnostics ---------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        cfg = self.config
        assert cfg is not None
        publishers = 0
        if self.active:
            publishers = sum(len(self._publisher_infos(kind)) for kind in self.subs)
        loaded = self.worker is not None and self.worker.alive
        facts = {
            **self.facts,
            "state": "active" if self.active else "inactive",
            "input_topic": ", ".join(s.topic_name for s in self.subs.values())
            or "(not subscribed)",
            "input_reliability": ", ".join(
                f"{k}={reliability_name(v)}" for k, v in self.reliability.items() if k in self.subs
            ),
        }
        status = health_status(
            name=f"{self.node.get_name()}: segmentation",
            hardware_id=str(self.facts.get("device", self.facts.get("backend", ""))),
            report=self.stats.tick(),
            facts=facts,
            publishers=publishers if self.active else 1,
            input_timeout_s=cfg.input_timeout,
            loaded=loaded,
        )
        self.diag_pub.publish(diagnostic_array(self.node.get_clock().now().to_msg(), [status]))


class CompactInstNode(Node):
    """The plain node: loads the model and subscribes at construction."""

    def __init__(self, name: str = "compactinst", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.core = CompactInstCore(self)
        try:
            self.core.configure()
            self.core.activate()
        except BaseException:
            self.core.cleanup()
            raise

    def destroy_node(self) -> None:
        """Stop the worker before the publishers go away."""
        if getattr(self, "core", None) is not None:
            self.core.cleanup()
        super().destroy_node()


def _lifecycle_class() -> type:
    from rclpy.lifecycle import Node as LifecycleNode
    from rclpy.lifecycle import State, TransitionCallbackReturn

    class CompactInstLifecycleNode(LifecycleNode):
        """Lifecycle variant: configure loads the model, activate subscribes."""

        def __init__(self, name: str = "compactinst", **kwargs: Any) -> None:
            super().__init__(name, **kwargs)
            self.core = CompactInstCore(self)

        def on_configure(self, state: State) -> TransitionCallbackReturn:
            """Load the model and create publishers; FAILURE names the problem."""
            try:
                self.core.configure()
            except CompactInstError as exc:
                self.get_logger().error(f"configure failed: {exc}")
                self.core.cleanup()
                return TransitionCallbackReturn.FAILURE
            return TransitionCallbackReturn.SUCCESS

        def on_activate(self, state: State) -> TransitionCallbackReturn:
            """Subscribe to the input; FAILURE (stays inactive) if that is impossible."""
            try:
                self.core.activate()
            except CompactInstError as exc:
                self.get_logger().error(f"activate failed: {exc}")
                self.core.deactivate()
                return TransitionCallbackReturn.FAILURE
            return TransitionCallbackReturn.SUCCESS

        def on_deactivate(self, state: State) -> TransitionCallbackReturn:
            """Unsubscribe; the model stays loaded."""
            self.core.deactivate()
            return TransitionCallbackReturn.SUCCESS

        def on_cleanup(self, state: State) -> TransitionCallbackReturn:
            """Stop the worker and remove publishers."""
            self.core.cleanup()
            return TransitionCallbackReturn.SUCCESS

        def on_shutdown(self, state: State) -> TransitionCallbackReturn:
            """Release everything before the node goes away."""
            self.core.cleanup()
            return TransitionCallbackReturn.SUCCESS

        def on_error(self, state: State) -> TransitionCallbackReturn:
            """A transition raised: release everything so the node ends up cleanly unconfigured."""
            self.get_logger().error(f"transition from '{state.label}' raised; cleaning up")
            self.core.cleanup()
            return TransitionCallbackReturn.SUCCESS

        def destroy_node(self) -> None:
            """Stop the worker before the publishers go away."""
            if getattr(self, "core", None) is not None:
                self.core.cleanup()
            super().destroy_node()

    return CompactInstLifecycleNode


def _parse_cli(argv: list[str], lifecycle: bool) -> None:
    from rclpy.utilities import remove_ros_args

    prog = "compactinst_lifecycle_node" if lifecycle else "compactinst_node"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(__doc__ or "").splitlines()[0],
        epilog="Parameters (--ros-args -p name:=value): "
        + ", ".join(f"{n} [{s.default}]" for n, s in PARAMETERS.items()),
    )
    parser.parse_args(remove_ros_args(argv)[1:])


def _spin(node_factory: Any, argv: list[str] | None, lifecycle: bool) -> int:
    argv = list(sys.argv if argv is None else argv)
    _parse_cli(argv, lifecycle)
    rclpy.init(args=argv)
    node = None
    code = 0
    try:
        node = node_factory()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except CompactInstError as exc:
        rclpy.logging.get_logger("compactinst").error(str(exc))
        code = 1
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code


def main(args: list[str] | None = None) -> int:
    """Entry point of ``compactinst_node``."""
    return _spin(CompactInstNode, args, lifecycle=False)


def lifecycle_main(args: list[str] | None = None) -> int:
    """Entry point of ``compactinst_lifecycle_node`` (starts unconfigured)."""
    return _spin(_lifecycle_class(), args, lifecycle=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
