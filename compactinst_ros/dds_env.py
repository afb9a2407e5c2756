"""The DDS environment of every process we start, for every ROS 2 distribution we support.

One place for three facts (test/fixtures/dds/distributions.json records them from upstream):

* Fast DDS 3.x (Kilted's 3.2, Lyrical's 3.6) reads its XML profile from
  ``FASTDDS_DEFAULT_PROFILES_FILE``; Fast DDS
  2.6 (Humble) and 2.14 (Jazzy) read only ``FASTRTPS_DEFAULT_PROFILES_FILE``, which Kilted's
  rmw_fastrtps still honours but warns about on every start. So the 3.x name is set always and
  the 2.x name where ``ROS_DISTRO`` (set by every ROS setup script) is ``humble`` or ``jazzy``.
* Loopback-only discovery is ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` from Iron on; Humble's
  rcl knows only ``ROS_LOCALHOST_ONLY=1``, which Jazzy's rcl warns about on every start and
  Kilted's ignores. So ``ROS_LOCALHOST_ONLY`` is set only where ``ROS_DISTRO`` is ``humble``.
* A private ROS domain is one whose RTPS port block no local socket uses.

PyPI's ROS wheels set no ``ROS_DISTRO``; where it is unset, the distribution is the one whose
rclpy wheel this Python holds (``ros-<distro>-rclpy``), so Jazzy's wheels from PyPI get the
profile variable Fast DDS 2.14 reads (without it, best-effort frames over 0.5 MB are lost, see
docs/ros.md). With neither, a distribution after Jazzy is assumed. Lyrical reads what Kilted
reads (Fast DDS 3.6, rcl without ``ROS_LOCALHOST_ONLY``, an rmw_fastrtps that warns about the
2.x profile name).

Standard library only and runnable as a script (scripts/ros_env.sh evaluates its output), so
that launch files, shell scripts and tests use it before anything imports rclpy.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

#: the profile variable of Fast DDS 3.x first, then that of Fast DDS 2.x (Humble, Jazzy)
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
DISCOVERY_RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"
LOCALHOST_ONLY = "ROS_LOCALHOST_ONLY"
#: distributions that ship Fast DDS 2.x: they read only PROFILE_VARIABLES[1]
FASTDDS_2_DISTROS = ("humble", "jazzy")
#: distributions with rclpy wheels on PyPI (``ros-<distro>-rclpy``), newest first
PYPI_DISTROS = ("lyrical", "kilted", "jazzy", "humble")
#: distributions whose rcl has no ROS_AUTOMATIC_DISCOVERY_RANGE, only ROS_LOCALHOST_ONLY
LOCALHOST_ONLY_DISTROS = ("humble",)
#: RTPS well-known ports (spec 9.6.1.1, Fast DDS defaults): domain d owns [PB + DG*d, +DG)
PORT_BASE, DOMAIN_GAIN = 7400, 250
#: domain ids whose ports stay below Linux's ephemeral range (ROS 2 "Domain ID" guide): 0..101
MAX_PORTABLE_DOMAIN = 101


def distro(env: Mapping[str, str]) -> str:
    """The distribution ``ROS_DISTRO`` names, lower case; where it is unset, the one whose PyPI
    rclpy wheel this Python holds (``installed_distro``), "" where neither says."""
    return env.get("ROS_DISTRO", "").strip().lower() or installed_distro()


@functools.cache
def installed_distro() -> str:
    """The distribution of the ``ros-<distro>-rclpy`` wheel this Python has installed (the
    newest where several are), "" where none is (a ROS from apt: its setup script sets
    ``ROS_DISTRO``)."""
    for name in PYPI_DISTROS:
        try:
            importlib.metadata.version(f"ros-{name}-rclpy")
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return ""


def profile_variables(env: Mapping[str, str]) -> tuple[str, ...]:
    """The profile variables the Fast DDS of the distribution in ``env`` reads without a warning."""
    return PROFILE_VARIABLES if distro(env) in FASTDDS_2_DISTROS else PROFILE_VARIABLES[:1]


def site_profile(env: Mapping[str, str]) -> str | None:
    """The profile ``env`` names under either variable (the 3.x name first), or None."""
    return next((env[name] for name in PROFILE_VARIABLES if env.get(name)), None)


def profile_settings(env: Mapping[str, str], profile: str | Path) -> dict[str, str]:
    """The profile variable(s) of the distribution in ``env``, and any ``env`` already sets
    (Kilted's rmw_fastrtps still loads the 2.x one), set to ``profile``."""
    names = [n for n in PROFILE_VARIABLES if n in profile_variables(env) or env.get(n)]
    return dict.fromkeys(names, str(profile))


def kept_profile_settings(env: Mapping[str, str], default: str | Path) -> dict[str, str]:
    """The variables to set so that a site's profile (under either name) is kept, and read by
    the distribution's Fast DDS, and ``default`` is used only where ``env`` names none."""
    profile = site_profile(env) or str(default)
    return {name: profile for name in profile_variables(env) if not env.get(name)}


def loopback_settings(env: Mapping[str, str]) -> dict[str, str]:
    """Discovery on this host only, in the variable(s) the distribution in ``ROS_DISTRO`` reads."""
    settings = {DISCOVERY_RANGE: "LOCALHOST"}
    if distro(env) in LOCALHOST_ONLY_DISTROS:
        settings[LOCALHOST_ONLY] = "1"
    return settings


def loopback_environment(env: Mapping[str, str], profile: str | Path | None) -> dict[str, str]:
    """A copy of ``env`` with loopback-only discovery and the distribution's Fast DDS pointed at
    ``profile`` (the environment's profile is kept where ``profile`` is None)."""
    out = {**env, **loopback_settings(env)}
    if profile is not None:
        out.update(profile_settings(env, profile))
    return out


def _bound_udp_ports() -> set[int] | None:
    """Local UDP ports in use (IPv4 and IPv6), or None where /proc/net does not say."""
    ports: set[int] = set()
    found = False
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found = True
        ports.update(int(line.split()[1].rsplit(":", 1)[1], 16) for line in lines if line.strip())
    return ports if found else None


def domain_in_use(domain: int, bound: set[int] | None = None) -> bool:
    """Whether a local socket holds a port of ``domain``'s RTPS block (a participant on it)."""
    bound = _bound_udp_ports() if bound is None else bound
    first = PORT_BASE + DOMAIN_GAIN * domain
    return bool(bound) and any(first <= port < first + DOMAIN_GAIN for port in bound)


def private_domain(seed: int | None = None) -> int:
    """A ROS domain in 1..101 (never 0, the default every vehicle uses) that no local
    participant uses, starting from one derived from ``seed`` (default: this process id)."""
    seed = os.getpid() if seed is None else seed
    bound = _bound_udp_ports() or set()
    for step in range(MAX_PORTABLE_DOMAIN):
        domain = (seed + step) % MAX_PORTABLE_DOMAIN + 1
        if not domain_in_use(domain, bound):
            return domain
    raise RuntimeError(
        f"every ROS domain 1..{MAX_PORTABLE_DOMAIN} has a local participant; pass a domain id"
    )


def shell_exports(env: Mapping[str, str], default_profile: str | Path) -> str:
    """``export`` lines for a POSIX shell: loopback discovery and the profile (a site's kept)."""
    settings = {**loopback_settings(env), **kept_profile_settings(env, default_profile)}
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in settings.items())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DEFAULT_PROFILE  (prints export lines for sh)")
    sys.stdout.write(shell_exports(os.environ, sys.argv[1]))
