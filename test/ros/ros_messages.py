"""Test-side readers of the node's messages and a matched-publisher count that works on Humble.

Imported by name (``ros_messages``) like ``ros_harness``; scripts/bench_node_overhead.py uses
``publisher_count`` too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compactinst_ros.ros.convert import table_from_msg
from compactinst_ros.structures import RASTER_ENCODINGS

__all__ = ["publisher_count", "raster_from_image", "table_from_msg"]

_RASTER_DTYPES = {encoding: dtype for dtype, encoding in RASTER_ENCODINGS.items()}


def raster_from_image(msg: Any) -> np.ndarray:
    """HxW numpy view of a mono8/mono16/32SC1 sensor_msgs/Image (step padding dropped)."""
    dtype = _RASTER_DTYPES[msg.encoding]
    flat = np.frombuffer(msg.data, np.uint8)[: msg.height * msg.step]
    rows = flat.reshape(msg.height, msg.step)[:, : msg.width * dtype.itemsize]
    return rows.view(dtype).reshape(msg.height, msg.width)


def publisher_count(node: Any, subscription: Any) -> int:
    """Publishers matched to ``subscription``; on Humble, those on its topic in the graph.

    ``Subscription.get_publisher_count`` exists from Iron on (ros2/rclpy#1089); Humble has only
    ``Node.count_publishers``, which counts graph publishers whether or not they matched.
    """
    matched = getattr(subscription, "get_publisher_count", None)
    if matched is not None:
        return int(matched())
    return int(node.count_publishers(subscription.topic_name))
