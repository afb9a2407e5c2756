"""The vehicle install keeps the ROS machine's apt numpy (1.x on Humble and Jazzy, 2.3 on
Lyrical): pip's resolver, run for real.

``pip install '.[vehicle]'`` is resolved (``--dry-run --report``) for the vehicle's platform:
aarch64, the distro's Python, its apt numpy pinned by constraints/<distro>.txt. pip evaluates
environment markers with the interpreter it runs on, so each case needs a Python here whose
markers match the distro's (skips otherwise), and it needs PyPI (skips, naming it, when PyPI is
unreachable).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

#: two resolver runs per distro against PyPI (about 30 s each)
pytestmark = [pytest.mark.slow, pytest.mark.network]

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints"
#: manylinux tags a Jetson on Ubuntu 22.04 (glibc 2.35) or 24.04 (glibc 2.39) accepts
AARCH64_TAGS = ["manylinux2014_aarch64"] + [f"manylinux_2_{v}_aarch64" for v in range(17, 40)]


def _interpreter(version: str) -> str | None:
    """A python``version`` with pip on this machine (PATH, then pyenv's versions), or None."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python3"))
    )
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-m", "pip", "--version"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return exe
    return None


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


def resolve(
    python: str, constraints: Path, tmp_path: Path, requirement: str, version: str | None = None
) -> dict[str, str]:
    """name -> version that pip would install for ``requirement`` on aarch64 with ``python``,
    for wheels of Python ``version`` (default: ``python``'s own)."""
    version = version or subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    report = tmp_path / "report.json"
    cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", str(report), "--target", str(tmp_path / "target")]
    cmd += ["--only-binary=:all:", "--implementation", "cp", "--python-version", version]
    for tag in AARCH64_TAGS:
        cmd += ["--platform", tag]
    cmd += ["-c", str(constraints), requirement]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, f"pip could not resolve {requirement}:\n{run.stdout}{run.stderr}"
    installs = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


@pytest.mark.parametrize(
    ("distro", "python_version", "constraints", "apt_numpy"),
    [
        ("humble", "3.10", "humble-jetpack6.txt", "1.21.5"),  # JetPack 6.1/6.2, Ubuntu 22.04
        ("jazzy", "3.12", "jazzy-noble.txt", "1.26.4"),  # JetPack 7.2, Ubuntu 24.04
        ("lyrical", "3.13", "lyrical-resolute.txt", "2.3"),  # Ubuntu 26.04: Python 3.14
    ],
)
def test_vehicle_extra_keeps_the_apt_numpy(
    tmp_path, distro, python_version, constraints, apt_numpy
):
    """Lyrical's Python is 3.14, whose wheels are resolved; pip runs on a 3.13 (the extra's
    markers read the same from 3.13 on) where no 3.14 is at hand."""
    python = _interpreter(python_version)
    if python is None:
        pytest.skip(
            f"no Python {python_version} with pip here: pip evaluates the extra's markers with "
            f"the interpreter it runs on, so ROS {distro}'s case needs one"
        )
    if not _pypi_reachable():
        pytest.skip("PyPI (pypi.org:443) is unreachable; this check resolves against it")
    pins = CONSTRAINTS / constraints
    wheels = "3.14" if distro == "lyrical" else python_version
    resolved = resolve(python, pins, tmp_path, f"{REPO}[vehicle]", wheels)
    assert resolved["numpy"] == apt_numpy or resolved["numpy"].startswith(f"{apt_numpy}.")
    numpy_2 = distro == "lyrical"  # no cap: opencv 4.12+, which needs numpy 2, is fine there
    assert (_release(resolved["opencv-python-headless"]) >= (4, 12)) == numpy_2
    assert "onnxruntime" in resolved
    # the FP16 graphs are derived on the vehicle: the converter the recorded hashes came from,
    # and an onnx that gives the same bytes (1.17 and later; 1.17 takes numpy 1.21.5)
    assert resolved["onnxconverter-common"] == "1.16.0"
    assert _release(resolved["onnx"]) >= (1, 17)
    # without the constraints file the extra alone keeps numpy's major: below 2 before Lyrical
    unpinned = tmp_path / "none.txt"
    unpinned.write_text("")
    alone = resolve(python, unpinned, tmp_path, f"{REPO}[vehicle]", wheels)["numpy"]
    assert (_release(alone) >= (2,)) == numpy_2
