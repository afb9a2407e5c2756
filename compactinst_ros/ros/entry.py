"""Command-line entry of the nodes: ``--help`` lists the parameters, then init, spin, shut down."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

from ..errors import CompactInstError
from .params import PARAMETERS


def parse_cli(argv: list[str], prog: str, doc: str | None) -> None:
    """Answer ``--help`` (``doc``'s first line, every parameter with its default) and refuse
    unknown non-ROS arguments."""
    from rclpy.utilities import remove_ros_args

    parser = argparse.ArgumentParser(
        prog=prog,
        description=(doc or "").splitlines()[0],
        epilog="Parameters (--ros-args -p name:=value): "
        + ", ".join(f"{n} [{s.default}]" for n, s in PARAMETERS.items()),
    )
    parser.parse_args(remove_ros_args(argv)[1:])


def spin(
    node_factory: Callable[[], Node], argv: list[str] | None, prog: str, doc: str | None
) -> int:
    """Run the node ``node_factory`` makes until Ctrl-C; exit code 1 on a CompactInstError."""
    argv = list(sys.argv if argv is None else argv)
    parse_cli(argv, prog, doc)
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
    except RuntimeError:
        # SIGTERM shuts the context down on rclpy's own thread; landing between the executor's
        # ok() check and its wait set, it surfaces as an RCLError (a RuntimeError), not as
        # ExternalShutdownException. Only a context that is still up makes it a real fault.
        if rclpy.ok():
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code
