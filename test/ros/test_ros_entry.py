"""The nodes' entry point: a shutdown that lands while the executor builds its wait set is a
clean exit, and a real fault still fails."""

from __future__ import annotations

import os

import pytest
import rclpy
from rclpy.node import Node
from rclpy.waitable import NumberOfEntities, Waitable
from ros_domains import next_domain

from compactinst_ros.ros.entry import spin


class ShutdownWhileWaiting(Waitable):
    """Shuts the context down from inside the executor's wait-set construction: the moment a
    SIGTERM's shutdown thread can land between the executor's ``ok()`` check and its wait set."""

    def __init__(self, node: Node) -> None:
        super().__init__(node.default_callback_group)

    def __enter__(self) -> None:
        rclpy.try_shutdown()

    def __exit__(self, *exc_info: object) -> None:
        return None

    def get_num_entities(self) -> NumberOfEntities:
        return NumberOfEntities()

    def is_ready(self, wait_set: object) -> bool:
        return False

    def add_to_wait_set(self, wait_set: object) -> None:
        return None

    def take_data(self) -> None:
        return None

    async def execute(self, taken_data: None) -> None:
        return None


@pytest.fixture(autouse=True)
def own_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "ROS_DOMAIN_ID", str(next_domain()))


def test_shutdown_during_the_wait_set_exits_0() -> None:
    def make() -> Node:
        node = Node("compactinst_entry_test")
        node.add_waitable(ShutdownWhileWaiting(node))
        return node

    assert spin(make, ["compactinst_node"], "compactinst_node", "entry test") == 0
    assert not rclpy.ok()


def test_a_fault_while_the_context_is_up_still_raises() -> None:
    def make() -> Node:
        node = Node("compactinst_entry_test")

        def fail() -> None:
            raise RuntimeError("a callback's own fault")

        node.create_timer(0.01, fail)
        return node

    with pytest.raises(RuntimeError, match="a callback's own fault"):
        spin(make, ["compactinst_node"], "compactinst_node", "entry test")
    assert not rclpy.ok()
