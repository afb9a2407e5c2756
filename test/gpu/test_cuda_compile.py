"""Every CUDA source compiles with nvcc for Jetson Orin (sm_87) and Hopper (sm_90), warnings as
errors; skipped where nvcc is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from compactinst_ros.gpu.constants import SIGNATURES, TABLES_DTYPE
from compactinst_ros.gpu.images import KERNEL_DIR

SOURCES = sorted(KERNEL_DIR.glob("*.cu"))
NVCC = shutil.which("nvcc")

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def test_sources_exist() -> None:
    assert {p.name for p in SOURCES} >= {"preprocess.cu", "postprocess.cu", "overlay.cu"}


#: one nvcc run builds both targets: the front end and host compile run once per source
ARCHS = ("sm_87", "sm_90")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(source: Path, tmp_path: Path) -> None:
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHS]
    cmd = [
        str(NVCC), "-c", *gencode, "-std=c++17", "-Werror", "all-warnings",
        "-Xcompiler", "-Wall,-Werror", "-I", str(KERNEL_DIR), "-o", str(tmp_path / "k.o"),
        str(source),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_nvcc_rejects_broken_source(tmp_path: Path) -> None:
    """The compile check can fail: a kernel with a type error does not pass."""
    bad = tmp_path / "bad.cu"
    bad.write_text('#include "common.cuh"\nextern "C" __global__ void k(int* p) { p = 1.5f; }\n')
    out = str(tmp_path / "b.o")
    cmd = [str(NVCC), "-c", "-arch=sm_87", "-I", str(KERNEL_DIR), "-o", out, str(bad)]
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode != 0


def test_tables_layout_matches_host_dtype(tmp_path: Path) -> None:
    """sizeof/offsetof of PPTables (compiled by nvcc, run on the CPU) equal TABLES_DTYPE's."""
    fields = TABLES_DTYPE.names
    prints = "\n".join(f'  std::printf("{f} %zu\\n", offsetof(PPTables, {f}));' for f in fields)
    prog = tmp_path / "layout.cu"
    prog.write_text(
        '#include <cstddef>\n#include <cstdio>\n#include "postprocess.cu"\n'
        "int main() {\n"
        '  std::printf("sizeof %zu\\n", sizeof(PPTables));\n'
        f"{prints}\n  return 0;\n}}\n"
    )
    exe = tmp_path / "layout"
    cmd = [str(NVCC), "-arch=sm_87", "-I", str(KERNEL_DIR), "-o", str(exe), str(prog)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout
    got = dict(line.split() for line in out.strip().splitlines())
    assert int(got["sizeof"]) == TABLES_DTYPE.itemsize
    for f in fields:
        assert int(got[f]) == TABLES_DTYPE.fields[f][1], f


def _c_signature(params: str) -> str:
    """pycuda prepare string of a C parameter list (pointers P, int i, float f, double d)."""
    out = []
    for param in params.split(","):
        decl = " ".join(param.replace("__restrict__", "").split())
        if "*" in decl:
            out.append("P")
        elif decl.startswith("int "):
            out.append("i")
        elif decl.startswith("float "):
            out.append("f")
        elif decl.startswith("double "):
            out.append("d")
        else:
            raise AssertionError(f"unexpected kernel parameter '{decl}'")
    return "".join(out)


#: an ``extern "C"`` kernel's definition (its launch bounds, where it has them, skipped): name and
#: parameter list
KERNEL = r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(([^)]*)\)'


def test_prepared_signatures_match_kernels() -> None:
    """The host's prepare() strings equal the parameter lists of the extern "C" kernels."""
    import re

    found = {}
    for source in SOURCES:
        text = source.read_text()
        for m in re.finditer(KERNEL, text):
            found[m.group(1)] = _c_signature(m.group(2))
    assert found == SIGNATURES
