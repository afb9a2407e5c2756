"""ROS_DOMAIN_IDs for the tests: each pytest-xdist worker draws from its own block, and a domain
that a local participant still holds is skipped, so no two live tests share one."""

from __future__ import annotations

import itertools
import os

from compactinst_ros import dds_env

#: the tests' domains: above 1..101, where the realtime replays pick their own
#: (``dds_env.private_domain``), and below 200, whose RTPS ports stay clear of 65535
FIRST, LAST = 102, 200
_DRAWN = itertools.count()


def _worker() -> tuple[int, int]:
    """This process's pytest-xdist worker index and the worker count ((0, 1) without xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return (int(name[2:]) if name[2:].isdigit() else 0), max(count, 1)


def next_domain() -> int:
    """A ROS_DOMAIN_ID of this worker's block that no local participant holds."""
    worker, workers = _worker()
    span = (LAST - FIRST + 1) // workers
    first = FIRST + worker * span
    for _ in range(span):
        domain = first + next(_DRAWN) % span
        if not dds_env.domain_in_use(domain):
            return domain
    raise RuntimeError(f"every ROS domain {first}..{first + span - 1} has a local participant")
