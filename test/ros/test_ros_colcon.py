"""Packaging check: ``colcon build`` of the package; the installed entry point starts the node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_domains import next_domain
from ros_harness import REPO, ros_env

pytest.importorskip("colcon_core")
pytest.importorskip("colcon_ros")


def test_colcon_build_installs_a_node_that_starts_and_stops(tmp_path, random_bundle):
    colcon = Path(sys.executable).with_name("colcon")
    if not colcon.exists():
        pytest.skip("colcon is not installed in this environment")
    build = subprocess.run(
        [
            str(colcon),
            "--log-base",
            str(tmp_path / "log"),
            "build",
            "--paths",
            str(REPO),
            "--build-base",
            str(tmp_path / "build"),
            "--install-base",
            str(tmp_path / "install"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    prefix = tmp_path / "install" / "compactinst_ros"
    share = prefix / "share" / "compactinst_ros"
    for rel in (
        "package.xml",
        "launch/compactinst.launch.py",
        "config/compactinst.yaml",
        "config/fastdds_shm.xml",
        "config/fastdds_loopback.xml",
        "rviz/compactinst.rviz",
    ):
        assert (share / rel).is_file(), rel
    assert (
        prefix / "share" / "ament_index" / "resource_index" / "packages" / "compactinst_ros"
    ).exists()
    site = next(prefix.glob("lib/python3*/site-packages"))
    env = ros_env(next_domain())
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env["AMENT_PREFIX_PATH"] = str(prefix)
    where = subprocess.run(
        [sys.executable, "-c", "import compactinst_ros; print(compactinst_ros.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert where.stdout.strip().startswith(str(site)), "the installed copy must be imported"

    exe = prefix / "lib" / "compactinst_ros" / "compactinst_node"
    helped = subprocess.run(
        [str(exe), "--help"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert helped.returncode == 0 and "image_topic" in helped.stdout
    proc = subprocess.Popen(
        [str(exe), "--ros-args", "-p", f"model:={random_bundle}", "-p", "backend:=onnxruntime"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "loaded compactinst_demo" in line:
                break
        assert any("loaded compactinst_demo" in x for x in lines), "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, "".join(lines) + out
