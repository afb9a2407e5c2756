"""No modules of eval/, bench/, backends/, gpu/, train/ or bundle/resources import each other
around a circle, lazily or for type checking: each concept lives in one of them (an import
inside a function still ties the two)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "compactinst_ros"
#: where the package is kept free of mutual imports
CHECKED = (
    "compactinst_ros.eval.", "compactinst_ros.bench.", "compactinst_ros.backends.",
    "compactinst_ros.gpu.", "compactinst_ros.train.",
)  # fmt: skip
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


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of two or more
    modules (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph[name]):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_modules_import_each_other_around_a_circle() -> None:
    files = module_files()
    graph = {name: imported(name, path, set(files)) for name, path in files.items()}
    assert "compactinst_ros.eval.replay" in graph["compactinst_ros.eval.fleet"]  # the walk works

    def checked(name: str) -> bool:
        return name.startswith(CHECKED) or name in CHECKED_MODULES

    assert [c for c in circles(graph) if any(checked(m) for m in c)] == []


def test_circles_finds_a_circle_of_three_and_not_a_chain() -> None:
    chain = {"a": {"b"}, "b": {"c"}, "c": set()}
    assert circles(chain) == []
    assert circles({**chain, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
