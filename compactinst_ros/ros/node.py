"""``compactinst_node``: camera images in; instance, panoptic, semantic masks, overlay, latency out.

A thin rclpy shell around ``Pipeline``: parameters live in ``params``, output publishers in
``publishers``. Subscription callbacks only put the newest frame in a one-slot mailbox; one
worker thread owns the pipeline (and, on the GPU backend, its CUDA context), converts, infers and
publishes. See docs/ros.md for topics, parameters and QoS."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy, qos_policy_name_from_kind
from sensor_msgs.msg import CompressedImage, Image

from ..bundle import METADATA_FILE, ModelBundle, default_bundle_path
from ..errors import CompactInstError, InputError
from ..pipeline import Pipeline
from . import convert
from .camera_info import CameraInfoRelay, stamp_ns
from .diagnostics import (
    FrameStats,
    ReasonThrottle,
    diagnostic_array,
    health_status,
    input_facts,
    status_name,
)
from .entry import spin
from .fallback import cpu_fallback_warning
from .health import HealthLimits, HealthMonitor
from .idle import IdleGate
from .params import (
    INPUT_KINDS,
    PARAMETERS,
    NodeConfig,
    check_topic,
    declare_parameters,
    read_config,
)
from .publishers import Publishers, output_set
from .qos import frame_qos, matched_reliability, reliability_name
from .worker import Frame, Worker

try:
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks

#: seconds between two log lines of one error reason (each reason has its own window)
LOG_THROTTLE_S = 2.0


def demo_model_caveat(bundle: ModelBundle) -> str | None:
    """What to know when ``bundle`` is the embedded demo model (trained from models/default's
    checkpoint), else None."""
    default = default_bundle_path()
    if default is None:
        return None
    source = json.loads((default / METADATA_FILE).read_text()).get("source", {})
    checkpoint = source.get("checkpoint_sha256")
    if not checkpoint or bundle.source.get("checkpoint_sha256") != checkpoint:
        return None
    return (
        f"model {bundle.root} is the demo model ({bundle.name}): trained only on synthetic "
        "field/road scenes (models/README.md), it is not a detector for real camera images; "
        "pass model:=/path/to/your/bundle for real use"
    )


class CompactInstCore:
    """What the plain and the lifecycle node share: configure, activate, deactivate, cleanup."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.log = node.get_logger()
        declare_parameters(node, lambda: self.worker is not None, self._apply_config)
        self.config: NodeConfig | None = None
        self.stats = FrameStats()
        self.throttle = ReasonThrottle(LOG_THROTTLE_S)
        self.worker: Worker | None = None
        self.facts: dict[str, Any] = {}
        self.fallback: str | None = None
        self.pubs: Publishers | None = None
        self.subs: dict[str, Any] = {}
        self.reliability: dict[str, ReliabilityPolicy] = {}
        self.timers: list[Any] = []
        self.active = False
        self.diag_pub: Any = None
        self._match_timer: Any = None
        self._diag_timer: Any = None
        self.health = HealthMonitor(HealthLimits())
        self.camera_info: CameraInfoRelay | None = None
        self.gate: IdleGate | None = None

    def configure(self) -> None:
        """Validate parameters, load the model on the worker thread, create publishers."""
        values = {name: self.node.get_parameter(name).value for name in PARAMETERS}
        cfg = read_config(values)
        for kind in ("raw", "compressed"):
            check_topic(self.node, self._topic(kind, cfg))
        if cfg.camera_info_topic:
            check_topic(self.node, cfg.camera_info_topic, "camera_info_topic")
        self.config = cfg
        self.stats = FrameStats()
        self.throttle = ReasonThrottle(LOG_THROTTLE_S)
        self.health = HealthMonitor(cfg.health)
        self.worker = Worker(self._make_pipeline, self._process)
        self.facts = {"status": "loading"}
        pipeline = self.worker.start()
        self.facts = {"backend": pipeline.backend_name, **pipeline.describe()}
        self.facts.setdefault("precision", cfg.backend_options.precision or "backend default")
        self.fallback = cpu_fallback_warning(cfg.backend, pipeline.backend_name)
        if self.fallback:
            self.log.warning(self.fallback)
        labels = pipeline.bundle.labels
        self.pubs = Publishers(
            self.node,
            cfg.outputs,
            cfg.output_reliability,
            labels,
            cfg.options.score_threshold,
            cfg.overlay_jpeg_quality,
        )
        if cfg.camera_info_topic:
            self.camera_info = CameraInfoRelay(
                self.node,
                cfg.camera_info_topic,
                cfg.camera_info_tolerance_ms,
                cfg.output_reliability,
            )
        self.diag_pub = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.node.create_timer(
            cfg.diagnostics_period,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        self.timers.append(self._diag_timer)
        inputs = ", ".join(
            f"{self.node.resolve_topic_name(self._topic(kind, cfg))} ({kind})"
            for kind in INPUT_KINDS[cfg.input_transport]
        )
        self.log.info(
            f"loaded {self.facts.get('model')} ({self.facts.get('input_size')}) on "
            f"{self.facts.get('backend')}, precision {self.facts['precision']}; input: {inputs}; "
            f"outputs: {self.pubs.offered()}"
        )
        caveat = demo_model_caveat(pipeline.bundle)
        if caveat:
            self.log.warning(caveat)

    def activate(self) -> None:
        """Subscribe to the input topic(s) while an output has a subscriber (``IdleGate``); in
        auto mode keep the QoS matched to publishers."""
        assert self.config is not None and self.pubs is not None
        self.gate = IdleGate(self.node, self.pubs.listened, self._start_input, self._stop_input)
        if self.config.input_reliability is None:
            self._match_timer = self.node.create_timer(
                0.5, self._match_qos, clock=Clock(clock_type=ClockType.STEADY_TIME)
            )
            self.timers.append(self._match_timer)
            self._match_qos()
        self.active = True

    def deactivate(self) -> None:
        """Unsubscribe and discard a waiting frame; the model stays loaded."""
        self.active = False
        if self.gate is not None:
            self.gate.close()
            self.gate = None
        self._stop_input()
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
        self._diag_timer = None
        if self.pubs is not None:
            self.pubs.destroy()
            self.pubs = None
        if self.diag_pub is not None:
            self.node.destroy_publisher(self.diag_pub)
            self.diag_pub = None
        if self.camera_info is not None:
            self.camera_info.destroy()
            self.camera_info = None

    def report_failure(self, what: str, exc: Exception) -> None:
        """Log a failed transition, with the traceback unless it is a CompactInstError (whose
        message names the fix), and report it on /diagnostics at once where that exists."""
        ours = isinstance(exc, CompactInstError)
        message = f"{what} failed: {exc}" if ours else f"{what} failed: {type(exc).__name__}: {exc}"
        self.log.error(message if ours else f"{message}\n{traceback.format_exc()}")
        self.stats.on_failure(message)
        if self.diag_pub is not None and self.config is not None:
            self._publish_diagnostics(failure=message)

    def _apply_config(self, cfg: NodeConfig) -> None:
        """A run-time parameter change (only while configured): the worker's next frame uses it."""
        assert self.worker is not None
        self.config = cfg
        self.worker.update_options(cfg.options)
        self._diag_timer.timer_period_ns = int(cfg.diagnostics_period * 1e9)

    def _topic(self, kind: str, config: NodeConfig | None = None) -> str:
        cfg = config or self.config
        if cfg is None:
            raise RuntimeError("the node is not configured; configure it before subscribing")
        base = cfg.image_topic
        return base if kind == "raw" else f"{base.rstrip('/')}/compressed"

    def _start_input(self) -> None:
        """Subscribe to the input transport(s) (and the camera_info), at the last known QoS."""
        assert self.config is not None
        default = self.config.input_reliability or ReliabilityPolicy.BEST_EFFORT
        for kind in INPUT_KINDS[self.config.input_transport]:
            self._subscribe(kind, self.reliability.get(kind, default))
        if self.camera_info is not None:
            self.camera_info.start()

    def _stop_input(self) -> None:
        """Unsubscribe the input (idle or inactive): DDS delivers no frame to this node."""
        for sub in self.subs.values():
            self.node.destroy_subscription(sub)
        self.subs.clear()
        if self.camera_info is not None:
            self.camera_info.stop()

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
            frame_qos(reliability),
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
        policy = qos_policy_name_from_kind(event.last_policy_kind)
        message = (
            f"incompatible QoS on the input topic (policy {policy}); set "
            "input_reliability:=auto or match the camera's reliability"
        )
        self.stats.on_qos_incompatible(message)
        self.log.warning(message, throttle_duration_sec=5.0)

    def _on_image(self, msg: Any, compressed: bool) -> None:
        if self.worker is None or not self.active:
            return
        now_ns = self.node.get_clock().now().nanoseconds
        self.health.stamp_age.tick(stamp_ns(msg.header.stamp), now_ns)
        self.stats.on_received(self.worker.mailbox.put(Frame(msg, compressed)))

    def _make_pipeline(self) -> Pipeline:
        cfg = self.config
        assert cfg is not None
        return Pipeline(
            cfg.model, cfg.backend, cfg.options, cfg.backend_options, tracking=cfg.tracking
        )

    def _process(self, pipeline: Pipeline, frame: Frame) -> None:
        """Convert, infer and publish one frame; errors are counted, logged and reported."""
        start = time.perf_counter()
        queue_ms = (start - frame.received) * 1e3
        pubs = self.pubs
        if pubs is None:
            return  # cleaned up while the worker was still busy: nothing to publish on
        try:
            wanted = pubs.wanted()
            if not any(wanted.values()):
                self.stats.on_idle()
                return
            if frame.compressed:
                image, encoding = convert.image_from_compressed(frame.msg)
            else:
                image, encoding = convert.image_from_msg(frame.msg)
            decoded = time.perf_counter()
            result = pipeline(image, encoding, output_set(wanted))
            inferred = time.perf_counter()
            header = frame.msg.header
            pubs.publish(header, result, wanted)
            if self.camera_info is not None:
                self.camera_info.publish(header, result.meta.src_h, result.meta.src_w)
            done = time.perf_counter()
            timings = dict(result.timings_ms)
            timings["decode"] = (decoded - start) * 1e3
            timings["queue"] = queue_ms
            timings["publish"] = (done - inferred) * 1e3
            timings["node"] = (done - frame.received) * 1e3
            now_ns = self.node.get_clock().now().nanoseconds
            timings["pipeline"] = self.health.pipeline.tick(stamp_ns(header.stamp), now_ns)
            self.stats.on_processed(timings)
            if wanted["latency"]:
                pubs.publish_latency(frame.msg.header, timings)
        except InputError as exc:
            message = f"bad input frame: {exc}"
            self._report_failure(message, True, f"skipping a {message}")
        except Exception as exc:
            if not self.node.context.ok():
                return  # shutting down (Ctrl-C): publishers are gone, nothing to report
            message = f"{type(exc).__name__}: {exc}"
            self._report_failure(message, False, f"frame failed: {message}", traceback.format_exc())

    def _report_failure(self, message: str, input_error: bool, line: str, detail: str = "") -> None:
        """Count a failed frame under its reason and log ``line`` (then ``detail``), throttled
        per reason: a frequent reason never hides another one."""
        suppressed = self.throttle.admit(self.stats.on_error(message, input_error))
        if suppressed is None:
            return
        more = f" ({suppressed} more like it since the last one logged)" if suppressed else ""
        log = self.log.warning if input_error else self.log.error
        log(f"{line}{more}" + (f"\n{detail}" if detail else ""))

    def _publish_diagnostics(self, failure: str | None = None) -> None:
        """One /diagnostics report; ``failure`` (a transition that failed) makes it ERROR."""
        cfg = self.config
        assert cfg is not None
        idle = self.gate is not None and self.gate.idle
        state = ("idle" if idle else "active") if self.active else "inactive"
        kinds = INPUT_KINDS[cfg.input_transport]
        publishers = sum(len(self._publisher_infos(k)) for k in kinds) if self.active else 1
        report = self.stats.tick()
        checks = [self.health.check(report["to_output"], report["processed"], state == "active")]
        if self.camera_info is not None:
            checks.append(self.camera_info.check())
        if failure is not None:
            checks.append(([(DiagnosticStatus.ERROR, failure)], {}))
        status = health_status(
            name=status_name(self.node.get_fully_qualified_name()),
            report=report,
            facts={**self.facts, **input_facts(self.subs, self.reliability), "state": state},
            publishers=publishers,
            input_timeout_s=cfg.input_timeout,
            loaded=self.worker is not None and self.worker.alive,
            warnings=[self.fallback] if self.fallback else (),
            checks=checks,
        )
        self.diag_pub.publish(diagnostic_array(self.node.get_clock().now().to_msg(), [status]))


class _OwnsCore:
    """Mixin of both nodes: ``destroy_node`` stops the worker before the publishers go away."""

    core: CompactInstCore

    def destroy_node(self) -> None:
        """Release the core (worker, publishers, timers), then the node."""
        if getattr(self, "core", None) is not None:
            self.core.cleanup()
        super().destroy_node()  # type: ignore[misc]


class CompactInstNode(_OwnsCore, Node):
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


def _lifecycle_class() -> type:
    from rclpy.lifecycle import Node as LifecycleNode
    from rclpy.lifecycle import State, TransitionCallbackReturn

    class CompactInstLifecycleNode(_OwnsCore, LifecycleNode):
        """Lifecycle variant: configure loads the model, activate subscribes."""

        def __init__(self, name: str = "compactinst", **kwargs: Any) -> None:
            super().__init__(name, **kwargs)
            self.core = CompactInstCore(self)

        def _attempt(
            self, what: str, step: Callable[[], None], undo: Callable[[], None]
        ) -> TransitionCallbackReturn:
            """Run ``step``; on any exception report it (``report_failure``), ``undo`` and
            return FAILURE. rclpy itself (humble and jazzy lifecycle/node.py,
            ``__execute_callback``) turns an exception into ERROR without logging it."""
            try:
                step()
            except Exception as exc:
                self.core.report_failure(what, exc)
                try:
                    undo()
                except Exception as undo_exc:
                    self.core.report_failure(f"undoing the failed {what}", undo_exc)
                    return TransitionCallbackReturn.ERROR
                return TransitionCallbackReturn.FAILURE
            return TransitionCallbackReturn.SUCCESS

        def on_configure(self, state: State) -> TransitionCallbackReturn:
            """Load the model and create publishers; FAILURE names the problem."""
            return self._attempt("configure", self.core.configure, self.core.cleanup)

        def on_activate(self, state: State) -> TransitionCallbackReturn:
            """Subscribe to the input; FAILURE (stays inactive) if that is impossible."""
            return self._attempt("activate", self.core.activate, self.core.deactivate)

        def on_deactivate(self, state: State) -> TransitionCallbackReturn:
            """Unsubscribe; the model stays loaded."""
            self.core.deactivate()
            return TransitionCallbackReturn.SUCCESS

        def on_cleanup(self, state: State) -> TransitionCallbackReturn:
            """Stop the worker and remove publishers (on shutdown too: release everything)."""
            self.core.cleanup()
            return TransitionCallbackReturn.SUCCESS

        on_shutdown = on_cleanup

        def on_error(self, state: State) -> TransitionCallbackReturn:
            """A transition raised: release everything so the node ends up cleanly unconfigured."""
            self.get_logger().error(f"transition from '{state.label}' raised; cleaning up")
            self.core.cleanup()
            return TransitionCallbackReturn.SUCCESS

    return CompactInstLifecycleNode


def main(args: list[str] | None = None) -> int:
    """Entry point of ``compactinst_node``."""
    return spin(CompactInstNode, args, "compactinst_node", __doc__)


def lifecycle_main(args: list[str] | None = None) -> int:
    """Entry point of ``compactinst_lifecycle_node`` (starts unconfigured)."""
    return spin(_lifecycle_class(), args, "compactinst_lifecycle_node", __doc__)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
