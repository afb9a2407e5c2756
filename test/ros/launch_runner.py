"""Run a launch file through ``launch.LaunchService`` as ``ros2 launch <file> name:=value`` does.

python launch_runner.py path/to/file.launch.py name:=value ...   (exit code: the service's)
"""

from __future__ import annotations

import sys

from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import AnyLaunchDescriptionSource

from launch import LaunchService


def main(argv: list[str]) -> int:
    """Include the launch file with its ``name:=value`` arguments; run until it ends or SIGINT."""
    path, *arguments = argv
    pairs = [tuple(a.split(":=", 1)) for a in arguments]
    if any(len(p) != 2 for p in pairs):
        raise SystemExit(f"arguments must be name:=value, got {arguments}")
    service = LaunchService(argv=arguments)
    service.include_launch_description(
        IncludeLaunchDescription(AnyLaunchDescriptionSource(path), launch_arguments=pairs)
    )
    return service.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
