"""No two modules of eval/, bench/ or bundle/resources import each other, lazily or for type
checking: each concept lives in one of them (an import inside a function still ties the two)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "compactinst_ros"
#: where the package is kept free of mutual imports
CHECKED = ("compactinst_ros.eval.", "compactinst_ros.bench.")
CHECKED_MODULES = {"compactinst_ros.bundle", "compactinst_ros.resources"}


def module_files() -> dict[str, Path]:
    """{dotted module name: file} of every module of the package."""
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports anywhere in its file (top level, in functions,
    under TYPE_CHECKING)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return (found & known) - {name}


def test_no_two_modules_import_each_other() -> None:
    files = module_files()
    graph = {name: imported(name, path, set(files)) for name, path in files.items()}
    assert "compactinst_ros.eval.replay" in graph["compactinst_ros.eval.fleet"]  # the walk works

    def checked(name: str) -> bool:
        return name.startswith(CHECKED) or name in CHECKED_MODULES

    circles = sorted(
        {tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]}
    )
    assert [c for c in circles if checked(c[0]) or checked(c[1])] == []
