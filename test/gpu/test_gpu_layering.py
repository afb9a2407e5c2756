"""gpu/ sits below backends/: the kernel code never imports the TensorRT backend, and the
owner-only file helpers they share (private_files.py) import neither. Read from the sources'
syntax trees, so an import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import compactinst_ros

PACKAGE = Path(compactinst_ros.__file__).resolve().parent


def imported_modules(source: str, module: str) -> set[str]:
    """Absolute names of every module that ``source`` (the text of ``module``) imports, relative
    imports resolved, wherever in the file the import statement is."""
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def imports_into(folder: Path, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """Module -> the modules under ``forbidden`` it imports, for every .py file of ``folder``."""
    found = {}
    files = [folder] if folder.is_file() else sorted(folder.rglob("*.py"))
    for path in files:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if parts[-1] == "__init__":
            module += ".__init__"  # its package is itself
        names = imported_modules(path.read_text(), module)
        bad = sorted(n for n in names if n.startswith(forbidden))
        if bad:
            found[module] = bad
    return found


def test_gpu_does_not_import_backends() -> None:
    assert imports_into(PACKAGE / "gpu", ("compactinst_ros.backends",)) == {}


def test_private_files_sit_below_gpu_and_backends() -> None:
    below = ("compactinst_ros.backends", "compactinst_ros.gpu")
    assert imports_into(PACKAGE / "private_files.py", below) == {}


def test_a_function_level_relative_import_is_found() -> None:
    """The check can fail: the loader's former lazy import of the engine cache."""
    source = "def f():\n    from ..backends.engine_cache import read_private\n"
    names = imported_modules(source, "compactinst_ros.gpu.loader")
    assert "compactinst_ros.backends.engine_cache.read_private" in names
    names = imported_modules("from . import images\n", "compactinst_ros.gpu.__init__")
    assert "compactinst_ros.gpu.images" in names
