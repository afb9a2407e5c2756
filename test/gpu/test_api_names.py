"""Every TensorRT and pycuda name our GPU code uses exists in the real TensorRT 10.3 (JetPack
6.1/6.2), TensorRT 10.16 (JetPack 7.2 on Orin, CUDA 13), TensorRT 11.x (``pip install tensorrt``
on x86) and pycuda wheels, checked without a GPU; the names TensorRT 11 removed (weak typing)
are in neither our code nor the stand-in.

The fixtures in test/fixtures/api were written by scripts/api_names.py from the wheels named on
their first line. Names are matched whole or as a suffix of a registered string, because the
linker merges a string into the tail of a longer one (``num_errors`` lives in ``get_num_errors``).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import collections
import concurrent.futures
import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "test" / "fixtures" / "api"
sys.path.insert(0, str(ROOT / "scripts"))

from api_names import dotted, extension_names, python_names  # noqa: E402

#: Modules that call TensorRT or pycuda, and the names they bind those modules to.
GPU_SOURCES = (
    "compactinst_ros/backends/trt.py",
    "compactinst_ros/backends/trt_build.py",
    "compactinst_ros/backends/build_engine.py",
    "compactinst_ros/backends/acceptance.py",
    "compactinst_ros/gpu/launch.py",
    "compactinst_ros/gpu/loader.py",
    "compactinst_ros/gpu/preprocess.py",
    "compactinst_ros/gpu/postprocess.py",
    "compactinst_ros/gpu/overlay.py",
    "scripts/gpu_check.py",
    "scripts/bench_postprocess_gpu.py",
    "compactinst_ros/bench/runners.py",
    "compactinst_ros/bench/latency.py",
)
TRT_ROOTS = {"trt", "self._trt"}
PYCUDA_ROOTS = {"cuda", "self.cuda", "self._cuda"}
#: The package modules where every attribute must be explained (closed world).
CLOSED_WORLD = GPU_SOURCES[:9]

#: What TensorRT for RTX runs: its own modules and the TensorRT backend's code it reuses.
RTX_SOURCES = (
    "compactinst_ros/backends/rtx.py",
    "compactinst_ros/backends/rtx_build.py",
    "compactinst_ros/backends/trt.py",
    "compactinst_ros/backends/trt_build.py",
)


@functools.cache
def rtx_names() -> frozenset[str]:
    """Every name the installed TensorRT for RTX bindings offer: the module's and each of its
    classes' and enums' (the ``dev`` extra installs it; it imports without a GPU)."""
    from compactinst_ros.backends.rtx_build import import_tensorrt_rtx

    trt = import_tensorrt_rtx()
    names = set(dir(trt))
    for name in dir(trt):
        names |= set(dir(getattr(trt, name)))
    for nested in ("Severity",):  # ILogger.Severity
        names |= set(dir(getattr(trt.ILogger, nested)))
    return frozenset(names)


#: TensorRT 8 names that TensorRT 10 removed; the fixture must not know them.
REMOVED_IN_TRT10 = (
    "execute_async_v2",
    "get_binding_index",
    "num_bindings",
    "max_workspace_size",
    "build_engine",
    "get_binding_shape",
)


def load_names(name: str) -> frozenset[str]:
    """Names of one fixture file (first line is the provenance header)."""
    lines = (FIXTURES / name).read_text().splitlines()
    assert lines[0].startswith("# ") and "sha256" in lines[0]
    return frozenset(lines[1:])


#: TensorRT version -> the names its Python bindings register: every version the builder claims.
TRT_VERSIONS = {
    "10.3": load_names("tensorrt-10.3.0.txt"),
    "10.16": load_names("tensorrt-10.16.1.11.txt"),
    "11.4": load_names("tensorrt-11.4.0.106.txt"),
}
TRT_NAMES = TRT_VERSIONS["10.3"]
TRT_11_NAMES = TRT_VERSIONS["11.4"]
PYCUDA_NAMES = load_names("pycuda-2026.1.txt")
#: Removed BuilderFlag names that TensorRT 11 keeps as DataType members (so still registered).
STILL_DATA_TYPES = frozenset({"BF16", "INT8", "FP8", "INT4", "FP4"})


def registered(name: str, names: frozenset[str]) -> bool:
    """Whole name, or the tail of a longer registered string (linker string merging)."""
    return name in names or any(other.endswith(name) for other in names)


def api_uses(tree: ast.AST, roots: set[str], package: str) -> set[str]:
    """Attribute names reached from a module alias, through calls and subscripts
    (``cuda.Device(0).retain_primary_context()`` gives both), and names imported from
    ``package``."""
    used: set[str] = set()

    def rooted(node: ast.expr) -> bool:
        while True:
            if dotted(node) in roots:
                return True
            if isinstance(node, ast.Attribute):
                node = node.value
            elif isinstance(node, ast.Call):
                node = node.func
            elif isinstance(node, ast.Subscript):
                node = node.value
            else:
                return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and dotted(node) not in roots and rooted(node.value):
            used.add(node.attr)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            used |= {alias.name for alias in node.names}
    return used


def argparse_dests(tree: ast.AST) -> set[str]:
    """Attribute names that ``add_argument`` calls create on the parsed namespace."""
    dests = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
            long = [f for f in flags if isinstance(f, str) and f.startswith("--")]
            name = (long or flags or [""])[0]
            dests.add(str(name).lstrip("-").replace("-", "_"))
    return dests


def test_fixtures_know_the_tensorrt_10_api_and_not_the_removed_one() -> None:
    for name in ("execute_async_v3", "set_tensor_address", "IProgressMonitor", "nptype"):
        assert registered(name, TRT_NAMES), name
    for name in REMOVED_IN_TRT10:
        assert not registered(name, TRT_NAMES), f"{name} was removed in TensorRT 10"
    for name in ("retain_primary_context", "pagelocked_empty", "prepared_async_call"):
        assert registered(name, PYCUDA_NAMES), name


def test_fixtures_know_the_strongly_typed_api_in_both_versions() -> None:
    """What the strongly typed builder uses is in TensorRT 10.3, 10.16 and 11.x."""
    for names in TRT_VERSIONS.values():
        for name in (
            "NetworkDefinitionCreationFlag", "STRONGLY_TYPED", "TF32", "clear_flag", "parse",
            "set_timing_cache", "get_timing_cache", "create_timing_cache", "OnnxParser",
        ):  # fmt: skip
            assert name in names, name


def test_what_tensorrt_11_removed_is_in_10_3_and_not_in_11() -> None:
    """The stand-in refuses exactly names the wheels show removed (test_trt_strongly_typed.py
    shows the refusals): present in 10.3, absent from 11.x unless 11.x keeps the name as a
    DataType member. The removal list itself is NVIDIA's "Removed Python APIs" page for 11.x."""
    sys.path.insert(0, str(ROOT / "test" / "gpu" / "emu"))
    import tensorrt_emu

    for name in tensorrt_emu.REMOVED_IN_TRT11:
        assert registered(name, TRT_VERSIONS["10.16"]), name  # the last 10.x has them all
        if name != "FP4":  # new in 10.8 as a flag, removed again in 11
            assert registered(name, TRT_NAMES), name
        if name not in STILL_DATA_TYPES:
            assert not registered(name, TRT_11_NAMES), f"{name} is still in TensorRT 11"


def test_extension_names_reads_identifiers_that_end_c_strings() -> None:
    blob = b"\x00execute_async_v3\x00_ZN8nvinfer1\x00two words.\x00context::pop\x00tail"
    assert extension_names(blob) == {"execute_async_v3", "pop"}
    blob = b"\x00get_num_errors\x00"
    assert registered("num_errors", frozenset(extension_names(blob)))


@pytest.mark.parametrize("version", TRT_VERSIONS)
@pytest.mark.parametrize("source", GPU_SOURCES)
def test_module_rooted_names_exist_in_each_tensorrt_and_pycuda(source: str, version: str) -> None:
    tree = ast.parse((ROOT / source).read_text())
    trt_names = TRT_VERSIONS[version]
    missing_trt = sorted(
        n for n in api_uses(tree, TRT_ROOTS, "tensorrt") if not registered(n, trt_names)
    )
    missing_cuda = sorted(
        n for n in api_uses(tree, PYCUDA_ROOTS, "pycuda") if not registered(n, PYCUDA_NAMES)
    )
    assert not missing_trt, f"{source}: not in TensorRT {version}: {missing_trt}"
    assert not missing_cuda, f"{source}: not in pycuda: {missing_cuda}"


@pytest.mark.parametrize("source", RTX_SOURCES)
def test_names_the_rtx_backend_reaches_exist_in_tensorrt_for_rtx(source: str) -> None:
    """The TensorRT for RTX backend runs trt.py's frame path and trt_build.py's builder with the
    tensorrt_rtx module: every module-rooted name there, and every attribute of rtx.py that is
    not ours or Python's, is one TensorRT for RTX has."""
    tree = ast.parse((ROOT / source).read_text())
    missing = sorted(n for n in api_uses(tree, TRT_ROOTS, "tensorrt") if n not in rtx_names())
    assert not missing, f"{source}: not in TensorRT for RTX: {missing}"
    if source.endswith("rtx.py"):
        ours, python = known_names()
        unknown = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr not in ours | python | rtx_names()
            and not registered(node.attr, PYCUDA_NAMES)
        }
        assert not unknown, f"{source}: attributes found in no API: {sorted(unknown)}"


def test_api_uses_follows_calls_and_ignores_other_roots() -> None:
    tree = ast.parse(
        "cuda.Device(0).retain_primary_context().push()\n"
        "torch.cuda.synchronize()\n"
        "self._trt.Logger.WARNING\n"
        "from pycuda.compiler import SourceModule\n"
    )
    assert api_uses(tree, PYCUDA_ROOTS, "pycuda") == {
        "Device", "retain_primary_context", "push", "SourceModule",
    }  # fmt: skip
    assert api_uses(tree, TRT_ROOTS, "tensorrt") == {"Logger", "WARNING"}


@functools.cache
def known_names() -> tuple[set[str], set[str]]:
    """(names this project defines, names of Python, numpy and the stdlib modules used)."""
    ours: set[str] = set()
    for path in [*(ROOT / "compactinst_ros").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        text = path.read_text()
        ours |= python_names(text) | argparse_dests(ast.parse(text))
    python = set(dir(builtins))
    for obj in (
        np, np.ndarray, np.dtype, str, bytes, dict, list, tuple, set, int, float, Path, os, json,
        hashlib, hashlib.sha256(),
        os.stat_result, time, sys, shutil, subprocess, subprocess.CompletedProcess, tempfile,
        threading, threading.Lock(), argparse,
        argparse.ArgumentParser, concurrent.futures.ThreadPoolExecutor, concurrent.futures.Future,
        collections.OrderedDict(), ctypes, ctypes.c_void_p(), ctypes.CDLL,
    ):  # fmt: skip
        python |= set(dir(obj))
    return ours, python


@pytest.mark.parametrize("version", TRT_VERSIONS)
def test_every_attribute_of_the_gpu_backend_is_ours_python_or_the_real_api(version: str) -> None:
    """Closed world: engines, contexts and parsers are not reachable from a module alias, so
    an attribute that is neither defined by this project nor by Python/numpy must be a name
    TensorRT ``version`` or pycuda registers (catches TensorRT 8 calls such as
    execute_async_v2, and the weak-typing calls TensorRT 11 removed)."""
    trt_names = TRT_VERSIONS[version]
    ours, python = known_names()
    unknown = {}
    for source in CLOSED_WORLD:
        for node in ast.walk(ast.parse((ROOT / source).read_text())):
            if not isinstance(node, ast.Attribute) or node.attr in ours or node.attr in python:
                continue
            if not (registered(node.attr, trt_names) or registered(node.attr, PYCUDA_NAMES)):
                unknown.setdefault(source, set()).add(node.attr)
    assert not unknown, f"attributes found in no API: {unknown}"


@pytest.mark.parametrize(
    ("stand_in", "names"),
    [
        ("tensorrt_emu.py", TRT_NAMES),
        ("tensorrt_emu.py", TRT_VERSIONS["10.16"]),
        ("tensorrt_emu.py", TRT_11_NAMES),
        ("pycuda_emu.py", PYCUDA_NAMES),
        ("tensorrt_rtx_emu.py", None),
    ],
    ids=["tensorrt-10.3", "tensorrt-10.16", "tensorrt-11.4", "pycuda", "tensorrt-rtx"],
)
def test_stand_ins_offer_only_real_api_names(stand_in: str, names: frozenset[str] | None) -> None:
    """The emulation tests' stand-ins (test/gpu/emu) must not invent API: every public method,
    property and class attribute they define is a name the real wheel registers, apart from the
    names TensorRT 11 removed, which the TensorRT stand-in defines only to refuse them."""
    sys.path.insert(0, str(ROOT / "test" / "gpu" / "emu"))
    import tensorrt_emu

    names = rtx_names() if names is None else names
    tree = ast.parse((ROOT / "test" / "gpu" / "emu" / stand_in).read_text())
    helpers = {"DeviceAllocation", "EmulatedModule", "KernelFunction", "PreparedFunction"}
    invented = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name not in helpers):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef):
                member = node.name
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                member = node.targets[0].id
            else:
                continue
            if member in tensorrt_emu.REMOVED_IN_TRT11:
                continue
            if not member.startswith("_") and not registered(member, names):
                invented.add(f"{cls.name}.{member}")
    assert not invented, f"{stand_in} offers names the real API lacks: {sorted(invented)}"
