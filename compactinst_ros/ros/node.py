"""``compactinst_node``: camera images in; instance, panoptic, semantic masks, overlay, latency out.

A thin rclpy shell around ``Pipeline``: parameters live in ``params``, each camera's input,
outputs and health in ``camera``. Subscription callbacks only put each camera's newest frame in
its one-slot mailbox; one worker thread owns the pipeline (and, on the GPU backend, its CUDA
context) and runs every camera's waiting frame as one batch. See docs/ros.md for topics,
parameters and QoS."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from ..bundle import model_caveat
from ..errors import CompactInstError
from ..jit import cpu_loops
from ..pipeline import Pipeline
from .camera import Camera, StartedRound, finish_round, start_round
from .diagnostics import (
    BatchStats,
    NamesakeCheck,
    batch_status,
    batch_status_name,
    diagnostic_array,
    status_name,
)
from .entry import spin
from .fallback import cpu_fallback_warning, cpu_loops_warning
from .params import PARAMETERS, NodeConfig, check_topic, declare_parameters, read_config
from .worker import Round, Worker


class CompactInstCore:
    """What the plain and the lifecycle node share: configure, activate, deactivate, cleanup."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.log = node.get_logger()
        declare_parameters(node, lambda: self.worker is not None, self._apply_config)
        self.config: NodeConfig | None = None
        self.worker: Worker | None = None
        self.cameras: list[Camera] = []
        self.batch_stats = BatchStats()
        self.facts: dict[str, Any] = {}
        self.fallback: str | None = None
        self.namesakes = NamesakeCheck(node)
        self.timers: list[Any] = []
        self.active = False
        self.diag_pub: Any = None
        self._match_timer: Any = None
        self._diag_timer: Any = None

    def configure(self) -> None:
        """Validate parameters, load the model on the worker thread, create each camera."""
        values = {name: self.node.get_parameter(name).value for name in PARAMETERS}
        cfg = read_config(values)
        for camera in cfg.cameras:
            for kind in ("raw", "compressed"):
                check_topic(self.node, camera.topic(kind), camera.parameter)
            if camera.camera_info_topic:
                info = camera.parameter.replace("image_", "camera_info_")
                check_topic(self.node, camera.camera_info_topic, info)
        self.config = cfg
        self.batch_stats = BatchStats()
        self.worker = Worker(
            self._make_pipeline,
            self._start_round,
            finish_round,
            len(cfg.cameras),
            cfg.batch_window_ms / 1e3,
            overlap=cfg.overlap_stages,
        )
        self.facts = {"status": "loading"}
        pipeline = self.worker.start()
        self.facts = {"backend": pipeline.backend_name, **pipeline.describe()}
        self.facts["stage_threads"] = 2 if self.worker.staged else 1
        self.facts.setdefault("precision", cfg.backend_options.precision or "backend default")
        self.fallback = cpu_fallback_warning(cfg.backend, pipeline.backend_name)
        if self.fallback:
            self.log.warning(self.fallback)
        self.facts["cpu_loops"] = cpu_loops()  # on /diagnostics with the other facts
        slow_loops = cpu_loops_warning(pipeline.backend_name)
        if slow_loops:  # said once, at start: it holds for the node's lifetime
            self.log.warning(slow_loops)
        labels = pipeline.bundle.labels
        for i, camera in enumerate(cfg.cameras):  # one by one: cleanup removes those made
            tracker = pipeline.make_tracker()
            self.cameras.append(
                Camera(self.node, i, camera, cfg, labels, self.worker.batcher, tracker)
            )
        self.diag_pub = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.node.create_timer(
            cfg.diagnostics_period,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        self.timers.append(self._diag_timer)
        inputs = "; ".join(
            (f"{c.camera.name}: " if len(self.cameras) > 1 else "") + c.describe_inputs()
            for c in self.cameras
        )
        outputs = self.cameras[0].pubs.offered() if self.cameras[0].pubs else []
        layout = ", each camera's under ~/<camera_name>/" if len(self.cameras) > 1 else ""
        self.log.info(
            f"loaded {self.facts.get('model')} ({self.facts.get('input_size')}) on "
            f"{self.facts.get('backend')}, precision {self.facts['precision']}; input: {inputs}; "
            f"outputs: {outputs}{layout}"
        )
        caveat = model_caveat(pipeline.bundle)
        if caveat:
            self.log.warning(f"{caveat}; pass model:=/path/to/your/bundle for real use")

    def activate(self) -> None:
        """Subscribe each camera's input while one of its outputs has a subscriber; in auto
        mode keep the QoS matched to publishers."""
        assert self.config is not None and self.cameras
        for camera in self.cameras:
            camera.activate()
        if self.config.input_reliability is None:
            self._match_timer = self.node.create_timer(
                0.5, self._match_qos, clock=Clock(clock_type=ClockType.STEADY_TIME)
            )
            self.timers.append(self._match_timer)
            self._match_qos()
        self.active = True

    def deactivate(self) -> None:
        """Unsubscribe and discard waiting frames; the model stays loaded."""
        self.active = False
        for camera in self.cameras:
            camera.deactivate()
        if self._match_timer is not None:
            self.node.destroy_timer(self._match_timer)
            self.timers.remove(self._match_timer)
            self._match_timer = None

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
        for camera in self.cameras:
            camera.destroy()
        self.cameras = []
        if self.diag_pub is not None:
            self.node.destroy_publisher(self.diag_pub)
            self.diag_pub = None

    def report_failure(self, what: str, exc: Exception) -> None:
        """Log a failed transition, with the traceback unless it is a CompactInstError (whose
        message names the fix), and report it on /diagnostics at once where that exists."""
        ours = isinstance(exc, CompactInstError)
        message = f"{what} failed: {exc}" if ours else f"{what} failed: {type(exc).__name__}: {exc}"
        self.log.error(message if ours else f"{message}\n{traceback.format_exc()}")
        for camera in self.cameras:
            camera.stats.on_failure(message)
        if self.diag_pub is not None and self.config is not None:
            self._publish_diagnostics(failure=message)

    def _apply_config(self, cfg: NodeConfig) -> None:
        """A run-time parameter change (only while configured): the worker's next round uses it."""
        assert self.worker is not None
        self.config = cfg
        self.worker.update_options(cfg.options)
        self.worker.batcher.set_window(cfg.batch_window_ms / 1e3)
        for camera in self.cameras:
            camera.config = cfg
        self._diag_timer.timer_period_ns = int(cfg.diagnostics_period * 1e9)

    def _match_qos(self) -> None:
        for camera in self.cameras:
            camera.match_qos()

    def _make_pipeline(self) -> Pipeline:
        cfg = self.config
        assert cfg is not None
        return Pipeline(
            cfg.model, cfg.backend, cfg.options, cfg.backend_options, tracking=cfg.tracking
        )

    def _start_round(self, pipeline: Pipeline, batch: Round) -> StartedRound | None:
        """The worker's round: every camera's frame in one batch (``camera.start_round``)."""
        return start_round(pipeline, self.cameras, batch, self.batch_stats)

    def _publish_diagnostics(self, failure: str | None = None) -> None:
        """One /diagnostics report: a status per camera, and with several cameras the batch's;
        ``failure`` (a transition that failed) makes the cameras' ERROR."""
        assert self.config is not None
        node_name = self.node.get_fully_qualified_name()
        several = len(self.cameras) > 1
        loaded = self.worker is not None and self.worker.alive
        warnings = [w for w in (self.fallback, self.namesakes()) if w]
        statuses: list[DiagnosticStatus] = [
            camera.status(
                status_name(node_name, camera.camera.name if several else ""),
                self.facts,
                loaded,
                warnings,
                failure,
            )
            for camera in self.cameras
        ]
        if several:
            report = self.batch_stats.tick(len(self.cameras))
            facts = {
                "batch_window_ms": self.config.batch_window_ms,
                "batch_sizes": list(self.config.backend_options.batch_sizes or ()) or "default",
            }
            statuses.append(batch_status(batch_status_name(node_name), report, facts))
        self.diag_pub.publish(diagnostic_array(self.node.get_clock().now().to_msg(), statuses))


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
