"""Test-only: ``compactinst_node`` whose Pipeline first sleeps the seconds written in the file
named by ``COMPACTINST_TEST_DELAY_FILE`` (read per batch), to play a slow or stalled backend.
Arguments are the node's (``--ros-args ...``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from compactinst_ros.pipeline import Pipeline
from compactinst_ros.ros.node import main
from compactinst_ros.structures import FrameResult

DELAY_FILE = Path(os.environ["COMPACTINST_TEST_DELAY_FILE"])


class SlowPipeline(Pipeline):
    """The real Pipeline, late by the delay the test sets."""

    def decode_batch(self, *args: Any, **kwargs: Any) -> list[FrameResult]:
        time.sleep(float(DELAY_FILE.read_text() or 0))
        return super().decode_batch(*args, **kwargs)


if __name__ == "__main__":
    import compactinst_ros.ros.node as node_module

    node_module.Pipeline = SlowPipeline
    sys.exit(main())
