#!/usr/bin/env python3
"""What each ROS 2 distribution's DDS stack reads from the environment, written as a test fixture.

The vehicle runs Humble, Jazzy or Lyrical; CI runs Kilted wheels. test/test_dds_env.py checks
compactinst_ros.dds_env against the facts this script reads from the upstream sources:

* ros2/ros2 ``ros2.repos`` of each distribution branch: the Fast DDS branch it ships;
* eProsima/Fast-DDS ``XMLParserCommon.cpp`` of that branch: the profile variable
  (``DEFAULT_FAST*_ENV_VARIABLE``) that ``XMLProfileManager.cpp`` reads, and the
  ``interfaceWhiteList``/``address`` element names of a UDP transport's whitelist;
* ros2/rcl ``localhost.c``, ``discovery_options.c`` and ``init.c`` (a git ref), or a built
  ``librcl.so`` where no source ref is at hand: which discovery variables rcl reads, and the
  warning it logs for ``ROS_LOCALHOST_ONLY``;
* ros2/rmw_fastrtps ``rmw_fastrtps_shared_cpp/src`` (a git ref) or a built
  ``librmw_fastrtps_shared_cpp.so``: the warning it logs when a profile variable is set.

    python scripts/dds_fixture.py --ros2 ROS2_GIT --fast-dds FAST_DDS_GIT --rcl RCL_GIT \\
        --rmw-fastrtps RMW_FASTRTPS_GIT --rcl-ref humble=humble --rcl-ref jazzy=9.2.0 \\
        --rcl-library kilted=$VIRTUAL_ENV/lib/librcl.so --rmw-ref humble=humble \\
        --rmw-ref jazzy=jazzy --rmw-library kilted=$VIRTUAL_ENV/lib/librmw_fastrtps_shared_cpp.so \\
        --rcl-release RCL_RELEASE_GIT --rcl-release-ref lyrical=release/lyrical/rcl/10.4.4-1 \\
        --rmw-release RMW_FASTRTPS_RELEASE_GIT \\
        --rmw-release-ref lyrical=release/lyrical/rmw_fastrtps_shared_cpp/9.4.7-3 \\
        > test/fixtures/dds/distributions.json

``*_GIT`` are clones (bare or not) of github.com/ros2/ros2, eProsima/Fast-DDS, ros2/rcl and
ros2/rmw_fastrtps with the named branches; rcl 9.2.0 is the tag the jazzy branch was forked from.
The libraries are those of the Kilted wheels the tests run on (``pip install -e '.[dev]'``).
Where a distribution's branch is missing from the clones (Lyrical), its released sources are
read from the bloom release repositories (``*_RELEASE_GIT``: ros2-gbp/rcl-release and
ros2-gbp/rmw_fastrtps-release), whose tags hold one package at the root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

DISTRIBUTIONS = ("humble", "jazzy", "kilted", "lyrical")
LOCALHOST_ONLY = "ROS_LOCALHOST_ONLY"
DISCOVERY_RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"
#: where Fast DDS keeps its XML parser constants (moved out of rtps/ in 3.0)
XML_DIRS = ("src/cpp/rtps/xmlparser", "src/cpp/xmlparser")
ENV_VARIABLE = re.compile(r'DEFAULT_FAST\w*_ENV_VARIABLE\s*=\s*"(\w+)"')
CONSTANT = r'const char\*\s+{}\s*=\s*"(\w+)"'
WARNING = re.compile(r"RCUTILS_LOG_WARN_NAMED\(\s*ROS_PACKAGE_NAME,\s*((?:\"[^\"]*\"\s*)+)\)")
PROFILE_WARNING = re.compile(r"\w+_DEFAULT_PROFILES_FILE[^\0\"]*deprecated[^\0\"]*")


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


def rcl_source_facts(
    repo: Path, ref: str, base: str = "rcl/src/rcl", origin: str = "ros2/rcl"
) -> dict:
    """Discovery variables rcl ``ref`` reads and its ROS_LOCALHOST_ONLY warning, from source
    (``base``: rcl's source folder, ``src/rcl`` in a release repository's tag)."""
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
        "source": f"{origin} {ref} ({git_commit(repo, ref)}): {base}/localhost.c, "
        "discovery_options.c, init.c",
        "reads": reads,
        "localhost_only_warning": next((w for w in warnings if LOCALHOST_ONLY in w), None),
    }


def library_source(library: Path, package: str) -> str:
    """A built library named by its package's version (``share/PACKAGE/package.xml`` beside
    its ``lib``) and its sha256."""
    xml = library.resolve().parents[1] / "share" / package / "package.xml"
    version = re.search(r"<version>([^<]+)</version>", xml.read_text() if xml.exists() else "")
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    return f"{library.name} of {package} {version.group(1) if version else '?'} (sha256 {digest})"


def rcl_library_facts(library: Path) -> dict:
    """Discovery variables a built librcl.so names (NUL-terminated strings) and its warning."""
    blob = library.read_bytes()
    reads = [name for name in (DISCOVERY_RANGE, LOCALHOST_ONLY) if name.encode() + b"\0" in blob]
    warned = re.search(rb"ROS_LOCALHOST_ONLY is deprecated[^\0]*", blob)
    return {
        "source": library_source(library, "rcl"),
        "reads": reads,
        "localhost_only_warning": warned.group().decode() if warned else None,
    }


def rmw_source_facts(
    repo: Path,
    ref: str,
    folder: str = "rmw_fastrtps_shared_cpp/src",
    origin: str = "ros2/rmw_fastrtps",
) -> dict:
    """The warning rmw_fastrtps ``ref`` logs when a profile variable is set, from source
    (``folder``: the shared library's sources, ``src`` in a release repository's tag)."""
    listing = subprocess.run(
        ["git", "--git-dir", str(repo), "ls-tree", "--name-only", f"{ref}:{folder}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    sources = "".join(git_show(repo, ref, f"{folder}/{name}") or "" for name in listing)
    code = re.sub(r"^\s*//[^\n]*", "", sources, flags=re.MULTILINE)  # a comment logs nothing
    joined = re.sub(r'"\s*"', "", code)  # adjacent C string literals
    warned = PROFILE_WARNING.search(joined)
    return {
        "source": f"{origin} {ref} ({git_commit(repo, ref)}): {folder}/*",
        "profile_variable_warning": warned.group() if warned else None,
    }


def rmw_library_facts(library: Path) -> dict:
    """The warning a built librmw_fastrtps_shared_cpp.so logs when a profile variable is set."""
    warned = PROFILE_WARNING.search(library.read_bytes().decode("latin-1"))
    return {
        "source": library_source(library, "rmw_fastrtps_shared_cpp"),
        "profile_variable_warning": warned.group() if warned else None,
    }


def main() -> int:
    """Write the fixture JSON to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ros2", type=Path, required=True, help="clone of ros2/ros2")
    parser.add_argument("--fast-dds", type=Path, required=True, help="clone of eProsima/Fast-DDS")
    parser.add_argument("--rcl", type=Path, required=True, help="clone of ros2/rcl")
    parser.add_argument("--rcl-ref", action="append", default=[], help="DISTRO=GIT_REF of rcl")
    parser.add_argument("--rcl-library", action="append", default=[], help="DISTRO=librcl.so")
    parser.add_argument("--rmw-fastrtps", type=Path, required=True, help="clone of rmw_fastrtps")
    parser.add_argument("--rmw-ref", action="append", default=[], help="DISTRO=GIT_REF")
    parser.add_argument("--rmw-library", action="append", default=[], help="DISTRO=librmw...so")
    parser.add_argument("--rcl-release", type=Path, help="clone of ros2-gbp/rcl-release")
    parser.add_argument("--rcl-release-ref", action="append", default=[], help="DISTRO=TAG")
    parser.add_argument("--rmw-release", type=Path, help="clone of ros2-gbp/rmw_fastrtps-release")
    parser.add_argument("--rmw-release-ref", action="append", default=[], help="DISTRO=TAG")
    args = parser.parse_args()
    ros2, fast_dds, rcl = git_dir(args.ros2), git_dir(args.fast_dds), git_dir(args.rcl)
    rmw = git_dir(args.rmw_fastrtps)
    rcl_refs = dict(item.split("=", 1) for item in args.rcl_ref)
    rcl_libraries = dict(item.split("=", 1) for item in args.rcl_library)
    rmw_refs = dict(item.split("=", 1) for item in args.rmw_ref)
    rmw_libraries = dict(item.split("=", 1) for item in args.rmw_library)
    rcl_releases = dict(item.split("=", 1) for item in args.rcl_release_ref)
    rmw_releases = dict(item.split("=", 1) for item in args.rmw_release_ref)
    distributions, fastdds = {}, {}
    for distro in DISTRIBUTIONS:
        branch = shipped_fastdds(ros2, distro)
        fastdds.setdefault(branch, fastdds_facts(fast_dds, branch))
        if distro in rcl_releases:
            rcl_facts = rcl_source_facts(
                git_dir(args.rcl_release), rcl_releases[distro], "src/rcl", "ros2-gbp/rcl-release"
            )
        elif distro in rcl_refs:
            rcl_facts = rcl_source_facts(rcl, rcl_refs[distro])
        elif distro in rcl_libraries:
            rcl_facts = rcl_library_facts(Path(rcl_libraries[distro]))
        else:
            raise SystemExit(f"give --rcl-ref {distro}=REF or --rcl-library {distro}=librcl.so")
        if distro in rmw_releases:
            rmw_facts = rmw_source_facts(
                git_dir(args.rmw_release), rmw_releases[distro], "src",
                "ros2-gbp/rmw_fastrtps-release",
            )  # fmt: skip
        elif distro in rmw_refs:
            rmw_facts = rmw_source_facts(rmw, rmw_refs[distro])
        elif distro in rmw_libraries:
            rmw_facts = rmw_library_facts(Path(rmw_libraries[distro]))
        else:
            raise SystemExit(f"give --rmw-ref {distro}=REF or --rmw-library {distro}=LIBRARY")
        distributions[distro] = {
            "ros2_repos": f"ros2/ros2 {distro} ({git_commit(ros2, distro)}): ros2.repos",
            "fastdds": branch,
            "rcl": rcl_facts,
            "rmw_fastrtps": rmw_facts,
        }
    json.dump({"fastdds": fastdds, "distributions": distributions}, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
