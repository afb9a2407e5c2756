"""Build ROS interface packages that have no PyPI wheel for the tests: the node's 3-D packages
(vision_msgs, tf2_msgs, shipped with the package: ``compactinst_ros.ros.interfaces``) and the
test-only ones (composition_interfaces, ffmpeg_image_transport_msgs, foxglove_msgs), with the
package's builder, into its cache; a missing toolchain skips, a failed build fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compactinst_ros.ros.interfaces import (
    TF2_MSGS,
    VISION_MSGS,
    BuildError,
    InterfacePackage,
    InterfacePrefix,
    build_interface,
    missing_toolchain,
)

REPO = Path(__file__).resolve().parents[2]
#: prebuilt launch wheels and the composition_interfaces source: a folder next to the checkout
#: where present ($COMPACTINST_LAUNCH_WHEELS names another place)
ROS_LAUNCH_DIR = Path(
    os.environ.get("COMPACTINST_LAUNCH_WHEELS", REPO.parent / "shared" / "ros-launch")
).resolve()
COMPOSITION_INTERFACES = InterfacePackage(ROS_LAUNCH_DIR / "composition_interfaces")
#: the video transports' messages (ffmpeg_image_transport, Foxglove): no wheel exists either
FFMPEG_IMAGE_TRANSPORT_MSGS = InterfacePackage(
    REPO / "test" / "fixtures" / "ffmpeg_image_transport_msgs"
)
FOXGLOVE_MSGS = InterfacePackage(REPO / "test" / "fixtures" / "foxglove_msgs")


def built_for_test(package: InterfacePackage, request: pytest.FixtureRequest) -> InterfacePrefix:
    """The built prefix for a fixture: skips if it cannot be built here, fails if the build does."""
    reason = missing_toolchain(package)
    if reason is not None:
        pytest.skip(f"cannot build {package.source.name}: {reason}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    try:
        return build_interface(package, progress=progress)
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


#: every package the tests build, in the order they are first needed (the slowest files first)
TEST_PACKAGES = (VISION_MSGS, TF2_MSGS, FFMPEG_IMAGE_TRANSPORT_MSGS, FOXGLOVE_MSGS,
                 COMPOSITION_INTERFACES)  # fmt: skip


def build_all() -> int:
    """Build (or reuse) every test package into the cache, so that the tests reuse them: `make
    test` runs this for the Jazzy lane beside the Kilted lane, at low priority, in the CPU time
    that lane leaves idle. A missing toolchain is left to the tests to report; a failed build
    exits 1 (the tests would fail on it too)."""
    failed = 0
    for package in TEST_PACKAGES:
        reason = missing_toolchain(package)
        if reason is not None:
            print(f"{package.source.name}: not built ({reason})")
            continue
        try:
            build_interface(package)
        except BuildError as exc:
            print(exc)
            failed = 1
    return failed


if __name__ == "__main__":
    raise SystemExit(build_all())
