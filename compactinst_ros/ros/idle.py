"""No cost when nobody listens: the input is subscribed only while some output has a subscriber.

Like Autoware's nodes, which subscribe on connect: with no subscriber on any output the node
drops its input subscription, so DDS delivers, and rclpy deserialises, no camera frame at all;
it subscribes again as soon as a subscriber appears. Humble's rclpy has no publisher "matched"
event, so a timer polls the output publishers' subscription counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.clock import Clock, ClockType
from rclpy.node import Node

#: seconds between polls of the output subscription counts (a new subscriber waits at most this)
POLL_PERIOD_S = 0.2


class IdleGate:
    """Calls ``start`` when the first output subscriber appears and ``stop`` when the last goes.

    Created on activation (it polls at once, so a node with subscribers subscribes immediately);
    ``close`` stops polling and leaves the input as it is for the caller to release.
    """

    def __init__(
        self,
        node: Node,
        listening: Callable[[], bool],
        start: Callable[[], None],
        stop: Callable[[], None],
        period_s: float = POLL_PERIOD_S,
    ) -> None:
        self.node = node
        self._listening = listening
        self._start = start
        self._stop = stop
        self.idle = True
        # a steady clock: with use_sim_time and no /clock yet, a ROS-time timer never fires
        self._timer: Any = node.create_timer(
            period_s, self.poll, clock=Clock(clock_type=ClockType.STEADY_TIME)
        )
        self.poll()

    def poll(self) -> None:
        """Subscribe or unsubscribe the input when the outputs' subscribers changed."""
        listening = self._listening()
        if listening and self.idle:
            self._start()
            self.idle = False
        elif not listening and not self.idle:
            self._stop()
            self.idle = True

    def close(self) -> None:
        """Stop polling."""
        if self._timer is not None:
            self.node.destroy_timer(self._timer)
            self._timer = None
