"""Shipped files (Fast DDS profiles, default model) are found from a checkout, an ament install
prefix and a pip install alike; the package is copied out of the checkout for the installed
layouts, so nothing but the install location can lead to the files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from compactinst_ros import dds_env, resources
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.eval.realtime import ros_environment

REPO = Path(__file__).resolve().parents[2]
PROBE = (
    "import json\n"
    "from compactinst_ros import resources\n"
    "from compactinst_ros.bundle import default_bundle_path\n"
    "from compactinst_ros.eval.realtime import ros_environment\n"
    "env = ros_environment()\n"
    "print(json.dumps({'profile': str(resources.loopback_profile()),\n"
    "    'model': str(resources.default_model()), 'bundle': str(default_bundle_path()),\n"
    f"    'env': env.get({dds_env.PROFILE_VARIABLES[0]!r})}}))\n"
)


def installed_package(site: Path) -> Path:
    """A copy of the package alone (no checkout around it), as pip or colcon installs it."""
    shutil.copytree(
        REPO / "compactinst_ros",
        site / "compactinst_ros",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return site


def share_tree(prefix: Path) -> Path:
    """``prefix/share/compactinst_ros`` with the profile and a model folder, as setup.py's
    data_files lay them out."""
    share = prefix / "share" / resources.PACKAGE
    (share / "config").mkdir(parents=True)
    for profile in (resources.FASTDDS_PROFILE, resources.LOOPBACK_PROFILE):
        shutil.copy(REPO / profile, share / profile)
    (share / resources.DEFAULT_MODEL).mkdir(parents=True)
    (share / resources.DEFAULT_MODEL / "bundle.json").write_text("{}")
    return share


def probe(python: str, site: Path, ament_prefix: str | None) -> dict:
    """What the installed copy finds, run in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in dds_env.PROFILE_VARIABLES}
    others = [p for p in sys.path if p and Path(p).resolve() != REPO]  # numpy, rosbags, ...
    env["PYTHONPATH"] = os.pathsep.join([str(site), *others])
    env.pop("AMENT_PREFIX_PATH", None)
    if ament_prefix is not None:
        env["AMENT_PREFIX_PATH"] = ament_prefix
    proc = subprocess.run(
        [python, "-c", PROBE], env=env, cwd=site, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_checkout_files_are_found_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    share_tree(tmp_path)
    assert resources.fastdds_profile() == REPO / "config" / "fastdds_shm.xml"
    assert resources.loopback_profile() == REPO / "config" / "fastdds_loopback.xml"
    assert resources.default_model() == default_bundle_path() == REPO / "models" / "default"
    site = tmp_path / "site.xml"
    site.write_text("<profiles/>")
    for name in dds_env.PROFILE_VARIABLES:  # the replay keeps to loopback even over a site's
        monkeypatch.setenv(name, str(site))
    env = ros_environment()
    assert env[dds_env.PROFILE_VARIABLES[0]] == str(resources.loopback_profile())
    assert str(site) not in env.values()


def test_ament_install_prefix_is_searched(tmp_path: Path) -> None:
    site = installed_package(tmp_path / "site")
    share = share_tree(tmp_path / "install" / "compactinst_ros")
    prefixes = os.pathsep.join([str(tmp_path / "elsewhere"), str(share.parents[1])])
    found = probe(sys.executable, site, prefixes)
    assert found["profile"] == found["env"] == str(share / resources.LOOPBACK_PROFILE)
    assert found["model"] == found["bundle"] == str(share / resources.DEFAULT_MODEL)


def test_pip_install_data_prefix_is_searched(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(prefix)
    site = installed_package(tmp_path / "site")
    python = str(prefix / "bin" / "python")
    nothing = {"profile": "None", "model": "None", "bundle": "None", "env": None}
    assert probe(python, site, str(tmp_path / "empty")) == nothing  # profile left unset
    share = share_tree(prefix)
    found = probe(python, site, None)
    assert Path(found["profile"]).resolve() == (share / resources.LOOPBACK_PROFILE).resolve()
    assert Path(found["model"]).resolve() == (share / resources.DEFAULT_MODEL).resolve()
