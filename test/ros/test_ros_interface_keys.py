"""The interface builder (compactinst_ros.ros.interfaces) on each lane's ROS wheels: a build is
cached per distribution, the Fast DDS 2.x type supports are chosen by what is installed, and
either ament_cmake_ros package (Kilted's _core, Jazzy's) satisfies the toolchain check."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from compactinst_ros.ros import interfaces


def test_this_environment_holds_one_distributions_wheels_the_one_its_lane_names() -> None:
    """`make test` runs this in .venv (Kilted, ROS_DISTRO unset) and .venv-jazzy
    (ROS_DISTRO=jazzy): a venv with both distributions' wheels would name two."""
    assert interfaces.ros_distributions() == [os.environ.get("ROS_DISTRO") or "kilted"]


def test_introspection_type_support_is_built_exactly_for_fast_dds_2() -> None:
    try:
        major = int(importlib.metadata.version("ros-fastrtps").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        major = int(importlib.metadata.version("ros-fastdds").split(".")[0])
    assert interfaces.needs_introspection_c() == (major == 2)


def test_the_cache_key_separates_distributions_and_type_supports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = interfaces.cache_key(interfaces.VISION_MSGS)
    assert interfaces.cache_key(interfaces.VISION_MSGS) == key
    with monkeypatch.context() as patch:
        patch.setattr(interfaces, "ros_distributions", lambda: ["another"])
        assert interfaces.cache_key(interfaces.VISION_MSGS) != key
    with monkeypatch.context() as patch:
        flipped = not interfaces.needs_introspection_c()
        patch.setattr(interfaces, "needs_introspection_c", lambda: flipped)
        assert interfaces.cache_key(interfaces.VISION_MSGS) != key


@pytest.mark.parametrize("ament_cmake_ros", ["ament_cmake_ros_core", "ament_cmake_ros"])
def test_either_ament_cmake_ros_satisfies_the_toolchain(
    ament_cmake_ros: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix with every CMake package, one of the two ament_cmake_ros names among them."""
    reason = interfaces.missing_toolchain(interfaces.VISION_MSGS)
    if reason is not None:
        pytest.skip(f"no interface toolchain here: {reason}")
    packages = [p if isinstance(p, str) else ament_cmake_ros for p in interfaces.CMAKE_PACKAGES]
    for name in (*packages, *interfaces.VISION_MSGS.dependencies):
        (tmp_path / "share" / name / "cmake").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert interfaces.missing_toolchain(interfaces.VISION_MSGS) is None
    (tmp_path / "share" / ament_cmake_ros / "cmake").rmdir()
    assert "ament_cmake_ros" in (interfaces.missing_toolchain(interfaces.VISION_MSGS) or "")
