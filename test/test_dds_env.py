"""The DDS environment we give every process is read, and stays on loopback, on every distribution
the package claims: checked against what Humble, Jazzy, Kilted and Lyrical read, as recorded from
upstream in test/fixtures/dds/distributions.json (scripts/dds_fixture.py), without running those
stacks."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compactinst_ros import dds_env

REPO = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((REPO / "test" / "fixtures" / "dds" / "distributions.json").read_text())
DISTRIBUTIONS = FIXTURE["distributions"]
NS = {"f": "http://www.eprosima.com"}
LOOPBACK_XML = REPO / "config" / "fastdds_loopback.xml"
VEHICLE_XML = REPO / "config" / "fastdds_shm.xml"


def check_distribution(distro: str, env: dict[str, str], profile: str) -> None:
    """``env`` points the Fast DDS of ``distro`` at ``profile`` and keeps its rcl on loopback,
    without a variable that its rcl or rmw_fastrtps warns about on every start."""
    facts = DISTRIBUTIONS[distro]
    variable = FIXTURE["fastdds"][facts["fastdds"]]["profile_variable"]
    assert env.get(variable) == profile, f"{distro}: Fast DDS {facts['fastdds']} reads {variable}"
    warning = facts["rmw_fastrtps"]["profile_variable_warning"]
    if warning:
        assert warning.split()[0] not in env, f"{distro}'s rmw_fastrtps logs: {warning}"
    rcl = facts["rcl"]
    loopback = {dds_env.DISCOVERY_RANGE: "LOCALHOST", dds_env.LOCALHOST_ONLY: "1"}
    honoured = [name for name in rcl["reads"] if env.get(name) == loopback[name]]
    assert honoured, f"{distro}: its rcl reads only {rcl['reads']}, none set to loopback ({env})"
    if rcl["localhost_only_warning"]:
        assert dds_env.LOCALHOST_ONLY not in env, f"{distro} logs: {rcl['localhost_only_warning']}"


def test_fixture_has_each_distribution_with_the_fastdds_it_ships() -> None:
    shipped = {d: DISTRIBUTIONS[d]["fastdds"] for d in ("humble", "jazzy", "kilted", "lyrical")}
    assert shipped == {"humble": "2.6.x", "jazzy": "2.14.x", "kilted": "3.2.x", "lyrical": "3.6.x"}
    assert FIXTURE["fastdds"]["3.6.x"]["profile_variable"] == "FASTDDS_DEFAULT_PROFILES_FILE"
    names = {branch: f["profile_variable"] for branch, f in FIXTURE["fastdds"].items()}
    assert set(names.values()) == set(dds_env.PROFILE_VARIABLES)


@pytest.mark.parametrize("distro", sorted(DISTRIBUTIONS))
def test_every_distribution_reads_our_profile_and_discovers_on_loopback_only(distro: str) -> None:
    env = dds_env.loopback_environment({"ROS_DISTRO": distro}, "/p/loopback.xml")
    check_distribution(distro, env, "/p/loopback.xml")
    for name in dds_env.PROFILE_VARIABLES:  # a site's profile cannot override ours
        site = {"ROS_DISTRO": distro, name: "/site.xml"}
        assert "/site.xml" not in dds_env.loopback_environment(site, "/p/loopback.xml").values()


def test_an_unset_ros_distro_is_the_distribution_of_the_installed_rclpy_wheel() -> None:
    """PyPI's wheels set no ROS_DISTRO: the environment then follows the rclpy wheel this
    Python holds, so Jazzy's Fast DDS 2.14 gets the profile name it reads (on the Jazzy lane of
    make test) and Kilted's only its own (on the Kilted lane)."""
    import importlib.metadata

    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
    wheels = [d for d in dds_env.PYPI_DISTROS if f"ros-{d}-rclpy" in names]
    if not wheels:
        pytest.skip("no ros-<distro>-rclpy wheel in this Python (a ROS from apt sets ROS_DISTRO)")
    assert dds_env.distro({}) == wheels[0] == dds_env.installed_distro()
    assert dds_env.distro({"ROS_DISTRO": "Humble "}) == "humble"  # a set ROS_DISTRO wins
    check_distribution(
        wheels[0], dds_env.loopback_environment({}, "/p/loopback.xml"), "/p/loopback.xml"
    )


@pytest.mark.parametrize("distro", sorted(DISTRIBUTIONS))
def test_ros_env_sh_sets_what_each_distribution_reads(distro: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROS_", "FAST"))}
    script = ". scripts/ros_env.sh && env"
    run = subprocess.run(
        ["sh", "-c", script],
        cwd=REPO,
        env={**env, "ROS_DISTRO": distro},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    out = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
    check_distribution(distro, out, str(LOOPBACK_XML))


@pytest.mark.parametrize("distro", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("site_variable", dds_env.PROFILE_VARIABLES)
def test_a_site_profile_under_either_name_is_kept_and_read(distro: str, site_variable: str) -> None:
    env = {"ROS_DISTRO": distro, site_variable: "/site.xml"}
    settings = dds_env.kept_profile_settings(env, "/shipped.xml")
    facts = DISTRIBUTIONS[distro]
    read = FIXTURE["fastdds"][facts["fastdds"]]["profile_variable"]
    assert {**env, **settings}[read] == "/site.xml", f"{distro} reads {read}"
    warning = facts["rmw_fastrtps"]["profile_variable_warning"]
    assert not warning or warning.split()[0] not in settings, warning  # the site's, not ours
    assert set(settings.values()) <= {"/site.xml"}
    both = {"ROS_DISTRO": distro, **dict.fromkeys(dds_env.PROFILE_VARIABLES, "/site.xml")}
    assert dds_env.kept_profile_settings(both, "/shipped.xml") == {}
    shipped = dds_env.kept_profile_settings({"ROS_DISTRO": distro}, "/shipped.xml")
    check_distribution(distro, {**shipped, **dds_env.loopback_settings(env)}, "/shipped.xml")


def test_no_other_module_names_a_profile_variable() -> None:
    """One place: the package, launch files and scripts take the names from dds_env."""
    names = set(dds_env.PROFILE_VARIABLES) | {dds_env.LOCALHOST_ONLY, dds_env.DISCOVERY_RANGE}
    files = [
        *REPO.glob("compactinst_ros/**/*.py"),
        *REPO.glob("launch/*.py"),
        *REPO.glob("scripts/*.py"),
    ]
    offenders = []
    for path in files:
        if path.name in ("dds_env.py", "dds_fixture.py"):
            continue
        text = path.read_text()
        if not any(name in text for name in names):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value in names:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value}")
    shell = [p for p in REPO.glob("scripts/*.sh") if any(n in p.read_text() for n in names)]
    assert not offenders and not shell, offenders + [str(p) for p in shell]


def test_private_domain_skips_one_a_local_participant_uses_and_is_never_0() -> None:
    seed = 40
    first = dds_env.private_domain(seed)
    assert 1 <= first <= dds_env.MAX_PORTABLE_DOMAIN
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        port = dds_env.PORT_BASE + dds_env.DOMAIN_GAIN * first + 11
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"port {port} is taken: domain {first} is in use after all")
        assert dds_env.domain_in_use(first)
        assert dds_env.private_domain(seed) not in (first, 0)
    assert dds_env.private_domain(dds_env.MAX_PORTABLE_DOMAIN - 1) != 0


def test_test_domains_are_per_worker_blocks_above_the_replays_and_skip_held_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ros_domains

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    drawn = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        drawn[worker] = {ros_domains.next_domain() for _ in range(60)}
    assert not drawn["gw0"] & drawn["gw1"]
    every = drawn["gw0"] | drawn["gw1"]
    assert min(every) > dds_env.MAX_PORTABLE_DOMAIN and max(every) <= ros_domains.LAST
    block = sorted(drawn["gw1"])
    last = ros_domains.next_domain()
    following = block[(block.index(last) + 1) % len(block)]  # the one gw1 would draw next
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # a participant's port
        port = dds_env.PORT_BASE + dds_env.DOMAIN_GAIN * following + 11
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"port {port} is taken: domain {following} is in use after all")
        assert ros_domains.next_domain() in set(block) - {following}


def transports(path: Path) -> dict[str, ET.Element]:
    """The transport descriptors of a profile by id."""
    root = ET.parse(path).getroot()
    found = root.iterfind(".//f:transport_descriptor", NS)
    return {t.findtext("f:transport_id", namespaces=NS): t for t in found}


def test_loopback_profile_is_the_vehicle_shared_memory_plus_udp_on_127_0_0_1_only() -> None:
    loopback, vehicle = transports(LOOPBACK_XML), transports(VEHICLE_XML)
    shm = [t for t in loopback.values() if t.findtext("f:type", namespaces=NS) == "SHM"]
    vehicle_shm = [t for t in vehicle.values() if t.findtext("f:type", namespaces=NS) == "SHM"]
    assert len(shm) == len(vehicle_shm) == 1
    for field in ("segment_size", "maxMessageSize"):
        assert shm[0].findtext(f"f:{field}", namespaces=NS) == vehicle_shm[0].findtext(
            f"f:{field}", namespaces=NS
        )
    root = ET.parse(LOOPBACK_XML).getroot()
    used = [e.text for e in root.iterfind(".//f:participant//f:userTransports/f:transport_id", NS)]
    assert root.findtext(".//f:participant//f:useBuiltinTransports", namespaces=NS) == "false"
    assert set(used) == set(loopback)
    for branch, facts in FIXTURE["fastdds"].items():  # the element names every Fast DDS reads
        for transport in loopback.values():
            if transport.findtext("f:type", namespaces=NS) == "SHM":
                continue
            allowed = transport.find(f"f:{facts['udp_whitelist_element']}", NS)
            assert allowed is not None, f"Fast DDS {branch}: UDP transport without a whitelist"
            addresses = [
                a.text for a in allowed.iterfind(f"f:{facts['udp_whitelist_address_element']}", NS)
            ]
            assert addresses == ["127.0.0.1"], branch
    udp = [t for t in vehicle.values() if t.findtext("f:type", namespaces=NS) == "UDPv4"]
    assert udp and all(len(t) == 2 for t in udp), "the vehicle profile's UDP reaches other hosts"


def test_tests_that_need_the_package_index_run_outside_the_private_network() -> None:
    """`make test` runs the suite under scripts/private_net.sh, except the NETWORK_TESTS files:
    exactly the tests that reach PyPI, each marked ``network``."""
    listed = re.search(r"^NETWORK_TESTS := (.*)$", (REPO / "Makefile").read_text(), re.M)
    assert listed, "Makefile has no NETWORK_TESTS"
    needs_index, marked = set(), set()
    for path in set((REPO / "test").rglob("test_*.py")) - {Path(__file__).resolve()}:
        text, name = path.read_text(), str(path.relative_to(REPO))
        if "pypi.org" in text or '"pip", "install"' in text:
            needs_index.add(name)
        if "pytest.mark.network" in text:
            marked.add(name)
    assert needs_index and needs_index == marked == set(listed.group(1).split())


def makefile_list(name: str) -> list[str]:
    """The words of a ``NAME := ...`` list of the Makefile (continued lines joined)."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    found = re.search(rf"^{name} := (.*)$", text, re.M)
    assert found, f"Makefile has no {name}"
    return found.group(1).split()


def test_tests_that_use_rclpy_run_on_the_jazzy_lane_too() -> None:
    """`make test` runs JAZZY_TESTS again on Jazzy's wheels: all of test/ros and every other
    test file that names rclpy or the ROS harness. (Files that start ROS only through the
    replay's node or the CLI were found by running the suite with a hook that noted each test
    whose processes loaded rclpy, and are listed by name.)"""
    listed = makefile_list("JAZZY_TESTS")
    assert "test/ros" in listed
    for name in listed:
        assert (REPO / name).exists(), f"JAZZY_TESTS names {name}, which is not there"
    words = ("rclpy", "ros_harness", "ros_script_env", "NodeProcess")
    using = {
        str(path.relative_to(REPO))
        for path in (REPO / "test").rglob("test_*.py")
        if path.parent.name != "ros" and any(w in path.read_text() for w in words)
    }
    assert using and using <= set(listed), f"not on the Jazzy lane: {sorted(using - set(listed))}"
    for test in makefile_list("JAZZY_DESELECT"):
        path, name = test.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"JAZZY_DESELECT: no {test}"
        assert path in listed, f"JAZZY_DESELECT: {path} is not on the lane"


def test_private_net_sh_leaves_only_loopback_or_says_why_not() -> None:
    run = subprocess.run(
        [str(REPO / "scripts" / "private_net.sh"), "cat", "/proc/net/dev"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    if "no private network namespace here" in run.stderr:
        pytest.skip(run.stderr.strip())
    interfaces = {line.split(":")[0].strip() for line in run.stdout.splitlines()[2:]}
    assert interfaces == {"lo"}, run.stdout


def test_our_environment_starts_this_machines_ros_without_a_deprecation_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Kilted's wheels a set FASTRTPS_DEFAULT_PROFILES_FILE draws rmw_fastrtps's warning;
    with Jazzy's (ROS_DISTRO=jazzy, the Jazzy lane) a set ROS_LOCALHOST_ONLY draws rcl's."""
    pytest.importorskip("rclpy")
    from compactinst_ros.eval.realtime import ros_environment

    for name in (*dds_env.PROFILE_VARIABLES, dds_env.LOCALHOST_ONLY):
        monkeypatch.delenv(name, raising=False)
    env = ros_environment(dds_env.private_domain())
    code = "import rclpy; rclpy.init(); rclpy.create_node('probe').destroy_node(); rclpy.shutdown()"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "deprecated" not in run.stderr, run.stderr
