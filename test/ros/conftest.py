"""Fixtures of the ROS tests; the harness itself lives in ros_harness.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from ros_harness import Client


@pytest.fixture
def make_client() -> Iterator[Callable[[int], Client]]:
    """Factory of clients, all closed at teardown."""
    clients: list[Client] = []

    def make(domain: int) -> Client:
        client = Client(domain)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
