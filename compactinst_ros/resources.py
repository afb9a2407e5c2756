"""Files shipped beside the code (the Fast DDS profiles, the default model), found the same way
from a source checkout, a colcon/ament install and a pip install.

setup.py installs them as ``data_files`` under ``share/compactinst_ros``: below each ament prefix
(``$AMENT_PREFIX_PATH``) after ``colcon build``, below the Python prefix after ``pip install``.
A checkout (the folder holding package.xml next to this package) is searched first, so the code
and the files of one version go together.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

PACKAGE = "compactinst_ros"
FASTDDS_PROFILE = Path("config") / "fastdds_shm.xml"
LOOPBACK_PROFILE = Path("config") / "fastdds_loopback.xml"
DEFAULT_MODEL = Path("models") / "default"
#: the metadata file of every model bundle folder (bundle.py reads it)
METADATA_FILE = "bundle.json"


def search_roots() -> list[Path]:
    """Folders that may hold the shipped files, in search order, each listed once."""
    roots = []
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "package.xml").is_file():
        roots.append(checkout)
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(sysconfig.get_path("data"))
    roots += [Path(prefix) / "share" / PACKAGE for prefix in prefixes]
    return list(dict.fromkeys(roots))


def find_file(relative: Path) -> Path | None:
    """The first ``root/relative`` that is a file, or None when no root has it."""
    return next((r / relative for r in search_roots() if (r / relative).is_file()), None)


def fastdds_profile() -> Path | None:
    """The shipped vehicle profile: 32 MB shared memory, UDPv4 to other hosts (fastdds_shm.xml)."""
    return find_file(FASTDDS_PROFILE)


def loopback_profile() -> Path | None:
    """The shipped loopback-only profile of the tests and the replay (fastdds_loopback.xml)."""
    return find_file(LOOPBACK_PROFILE)


def default_model() -> Path | None:
    """The embedded default model bundle folder (models/default), None when not installed."""
    found = find_file(DEFAULT_MODEL / METADATA_FILE)
    return found.parent if found is not None else None
