#!/usr/bin/env python3
"""Names a binary Python wheel exposes (TensorRT bindings, pycuda), written as a test fixture.

TensorRT runs nowhere in CI and pycuda needs a CUDA driver, so test/gpu/test_api_names.py checks
every attribute our GPU code uses against the names the real wheels register: identifier-shaped
strings in their extension modules (pybind11 / Boost.Python register names as C strings) plus
the names their Python files define.

    python scripts/api_names.py tensorrt_cu12_bindings-10.3.0-cp311-none-manylinux_2_17_x86_64.whl \
        > test/fixtures/api/tensorrt-10.3.0.txt

Get the wheel with ``pip download --no-deps tensorrt-cu12-bindings==10.3.0`` (1.1 MB). The
TensorRT 11 fixture comes the same way from ``tensorrt-cu12-bindings==11.4.0.106`` (1.3 MB,
``..._manylinux_2_28_x86_64.whl``), the newest 11.x on PyPI when it was written, and the
TensorRT 10.16 one (JetPack 7.2's release, built for CUDA 13) from
``tensorrt-cu13-bindings==10.16.1.11`` (1.3 MB, ``..._manylinux_2_28_x86_64.whl``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
import zipfile
from pathlib import Path

IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{1,}")
C_STRING = re.compile(rb"[\x20-\x7e]{2,}(?=\x00)")
TRAILING_IDENTIFIER = re.compile(rb"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*$")


def extension_names(blob: bytes) -> set[str]:
    """Identifiers that end a NUL-terminated string of a shared object (not C++ mangled): the
    linker may store a registered name such as ``pop`` as the tail of ``context::pop``."""
    names = set()
    for match in C_STRING.finditer(blob):
        text = match.group()
        if text.startswith(b"_Z"):
            continue
        tail = TRAILING_IDENTIFIER.search(text)
        if tail is not None and IDENTIFIER.fullmatch(tail.group()):
            names.add(tail.group().decode())
    return names


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of plain attributes on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def python_names(source: str) -> set[str]:
    """Functions, classes, arguments and assigned names of a Python module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def wheel_names(wheel: Path) -> set[str]:
    """Every name the wheel's extension modules register and its Python files define."""
    names: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith(".so") or ".so." in member:
                names |= extension_names(archive.read(member))
            elif member.endswith(".py"):
                names |= python_names(archive.read(member).decode("utf-8", "replace"))
    return names


def main(argv: list[str] | None = None) -> int:
    """Print the sorted names of a wheel after a provenance header."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    args = parser.parse_args(argv)
    digest = hashlib.sha256(args.wheel.read_bytes()).hexdigest()
    names = sorted(wheel_names(args.wheel))
    sys.stdout.write(f"# {args.wheel.name} sha256 {digest}: {len(names)} names\n")
    sys.stdout.write("".join(f"{name}\n" for name in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
