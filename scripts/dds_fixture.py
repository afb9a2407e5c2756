#!/usr/bin/env python3
"""What each ROS 2 distribution's DDS stack reads from the environment, written as a test fixture.

The vehicle runs Humble or Jazzy; CI runs Kilted wheels. test/test_dds_env.py checks
compactinst_ros.dds_env against the facts this script reads from the upstream sources:

* ros2/ros2 ``ros2.repos`` of each distribution branch: the Fast DDS branch it ships;
* eProsima/Fast-DDS ``XMLParserCommon.cpp`` of that branch: the profile variable
  (``DEFAULT_FAST*_ENV_VARIABLE``) that ``XMLProfileManager.cpp`` reads, and the
  ``interfaceWhiteList``/``address`` element names of a UDP transport's whitelist;
* ros2/rcl ``localhost.c``, ``discovery_options.c`` and ``init.c`` (a git ref), or a built
  ``librcl.so`` where no source ref is at hand: which discovery variables rcl reads, and the
  warning it logs for ``ROS_LOCALHOST_ONLY``.

    python scripts/dds_fixture.py --ros2 ROS2_GIT --fast-dds FAST_DDS_GIT --rcl RCL_GIT \\
        --rcl-ref humble=humble --rcl-ref jazzy=9.2.0 \\
        --rcl-library kilted=$VIRTUAL_ENV/lib/librcl.so > test/fixtures/dds/distributions.json

``*_GIT`` are clones (bare or not) of github.com/ros2/ros2, eProsima/Fast-DDS and ros2/rcl with
the named branches; rcl 9.2.0 is the tag the jazzy branch was forked from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

DISTRIBUTIONS = ("humble", "jazzy", "kilted")
LOCALHOST_ONLY = "ROS_LOCALHOST_ONLY"
DISCOVERY_RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"
#: where Fast DDS keeps its XML parser constants (moved out of rtps/ in 3.0)
XML_DIRS = ("src/cpp/rtps/xmlparser", "src/cpp/xmlparser")
ENV_VARIABLE = re.compile(r'DEFAULT_FAST\w*_ENV_VARIABLE\s*=\s*"(\w+)"')
CONSTANT = r'const char\*\s+{}\s*=\s*"(\w+)"'
WARNING = re.compile(r"RCUTILS_LOG_WARN_NAMED\(\s*ROS_PACKAGE_NAME,\s*((?:\"[^\"]*\"\s*)+)\)")


def git_show(repo: Path, ref: str, path: str) -> str | None:
    """``ref:path`` of git repository ``repo``, or None where it has no such file."""
    run = subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True
    )
    return run.stdout if run.returncode == 0 else None


def git_commit(repo: Path, ref: str) -> str:
    """The commit ``ref`` names in ``repo``."""
    run = subprocess.run(
        ["git", "--git-dir", str(repo), "rev-parse", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip()


def git_dir(path: Path) -> Path:
    """The git directory of a clone (``path/.git``) or of a bare repository (``path``)."""
    return path / ".git" if (path / ".git").exists() else path


def shipped_fastdds(ros2: Path, distro: str) -> str:
    """The eProsima/Fast-DDS version (branch) that ``distro``'s ros2.repos pins."""
    repos = git_show(ros2, distro, "ros2.repos")
    if repos is None:
        raise SystemExit(f"{ros2} has no branch {distro} with ros2.repos")
    found = re.search(r"eProsima/Fast-DDS:\s*\n(?:\s+\w+:.*\n)*?\s+version:\s*(\S+)", repos)
    if found is None:
        raise SystemExit(f"ros2.repos of {distro} pins no eProsima/Fast-DDS version")
    return found.group(1)


def fastdds_facts(repo: Path, branch: str) -> dict:
    """Profile variable and whitelist element names of Fast DDS ``branch``."""
    for folder in XML_DIRS:
        common = git_show(repo, branch, f"{folder}/XMLParserCommon.cpp")
        manager = git_show(repo, branch, f"{folder}/XMLProfileManager.cpp")
        if common is not None and manager is not None:
            break
    else:
        raise SystemExit(f"Fast DDS {branch}: no XMLParserCommon.cpp under {XML_DIRS}")
    variables = ENV_VARIABLE.findall(common)
    read = re.findall(r"getenv(?:_s)?\([^)]*?(DEFAULT_FAST\w*_ENV_VARIABLE)\)", manager)
    if len(variables) != 1 or not read:
        raise SystemExit(f"Fast DDS {branch}: expected one profile variable read, got {variables}")
    names = {}
    for constant in ("WHITE_LIST", "ADDRESS"):
        match = re.search(CONSTANT.format(constant), common)
        names[constant] = match.group(1) if match else None
    return {
        "commit": git_commit(repo, branch),
        "source": f"{folder}/XMLParserCommon.cpp, {folder}/XMLProfileManager.cpp",
        "profile_variable": variables[0],
        "udp_whitelist_element": names["WHITE_LIST"],
        "udp_whitelist_address_element": names["ADDRESS"],
    }


def rcl_source_facts(repo: Path, ref: str) -> dict:
    """Discovery variables rcl ``ref`` reads and its ROS_LOCALHOST_ONLY warning, from source."""
    base = "rcl/src/rcl"
    localhost = git_show(repo, ref, f"{base}/localhost.c") or ""
    discovery = git_show(repo, ref, f"{base}/discovery_options.c") or ""
    init = git_show(repo, ref, f"{base}/init.c") or ""
    reads = [
        name
        for name, source in ((DISCOVERY_RANGE, discovery), (LOCALHOST_ONLY, localhost))
        if f'"{name}"' in source
    ]
    warnings = ["".join(re.findall(r'"([^"]*)"', m)) for m in WARNING.findall(init)]
    return {
        "source": f"ros2/rcl {ref} ({git_commit(repo, ref)}): {base}/localhost.c, "
        "discovery_options.c, init.c",
        "reads": reads,
        "localhost_only_warning": next((w for w in warnings if LOCALHOST_ONLY in w), None),
    }


def rcl_library_facts(library: Path) -> dict:
    """Discovery variables a built librcl.so names (NUL-terminated strings), its version from
    the ``share/rcl/package.xml`` beside it."""
    blob = library.read_bytes()
    package = library.resolve().parents[1] / "share" / "rcl" / "package.xml"
    text = package.read_text() if package.exists() else ""
    version = re.search(r"<version>([^<]+)</version>", text)
    reads = [name for name in (DISCOVERY_RANGE, LOCALHOST_ONLY) if name.encode() + b"\0" in blob]
    warned = re.search(rb"ROS_LOCALHOST_ONLY is deprecated[^\0]*", blob)
    return {
        "source": f"librcl.so of rcl {version.group(1) if version else '?'} "
        f"(sha256 {hashlib.sha256(blob).hexdigest()})",
        "reads": reads,
        "localhost_only_warning": warned.group().decode() if warned else None,
    }


def main() -> int:
    """Write the fixture JSON to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ros2", type=Path, required=True, help="clone of ros2/ros2")
    parser.add_argument("--fast-dds", type=Path, required=True, help="clone of eProsima/Fast-DDS")
    parser.add_argument("--rcl", type=Path, required=True, help="clone of ros2/rcl")
    parser.add_argument("--rcl-ref", action="append", default=[], help="DISTRO=GIT_REF of rcl")
    parser.add_argument("--rcl-library", action="append", default=[], help="DISTRO=librcl.so")
    args = parser.parse_args()
    ros2, fast_dds, rcl = git_dir(args.ros2), git_dir(args.fast_dds), git_dir(args.rcl)
    rcl_refs = dict(item.split("=", 1) for item in args.rcl_ref)
    rcl_libraries = dict(item.split("=", 1) for item in args.rcl_library)
    distributions, fastdds = {}, {}
    for distro in DISTRIBUTIONS:
        branch = shipped_fastdds(ros2, distro)
        fastdds.setdefault(branch, fastdds_facts(fast_dds, branch))
        if distro in rcl_refs:
            rcl_facts = rcl_source_facts(rcl, rcl_refs[distro])
        elif distro in rcl_libraries:
            rcl_facts = rcl_library_facts(Path(rcl_libraries[distro]))
        else:
            raise SystemExit(f"give --rcl-ref {distro}=REF or --rcl-library {distro}=librcl.so")
        distributions[distro] = {
            "ros2_repos": f"ros2/ros2 {distro} ({git_commit(ros2, distro)}): ros2.repos",
            "fastdds": branch,
            "rcl": rcl_facts,
        }
    json.dump({"fastdds": fastdds, "distributions": distributions}, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
