#!/usr/bin/env python3
"""Names a ROS 2 Python package or message package defines on one branch or tag, as a fixture.

The vehicle runs Humble, Jazzy or Lyrical; CI runs the Kilted wheels.
test/ros/test_ros_distributions.py checks every rclpy, launch, launch_ros and vision_msgs name
our code uses against what those distributions' own sources define, read here from a git
checkout (no network needed):

    python scripts/ros_api_names.py python RCLPY_GIT humble rclpy/rclpy rclpy \\
        > test/fixtures/ros_api/rclpy-humble.txt
    python scripts/ros_api_names.py msg VISION_MSGS_GIT 4.0.0 msg vision_msgs \\
        > test/fixtures/ros_api/vision_msgs-4.0.0.txt

Lyrical's rclpy comes from its release repository (ros2-gbp/rclpy-release), whose tags hold the
released package at the root:

    python scripts/ros_api_names.py python RCLPY_RELEASE_GIT release/lyrical/rclpy/10.0.10-1 \\
        rclpy rclpy --origin ros2-gbp/rclpy-release > test/fixtures/ros_api/rclpy-lyrical.txt

Each line is ``kind name [target]``: ``module``, ``class``, ``name`` (a function, method, class
or module attribute, or a message constant), ``alias`` (a name a module imports from its own
package or assigns, e.g. ``rclpy.lifecycle.Node`` -> ``rclpy.lifecycle.node.LifecycleNode``:
importable from there) and ``field`` (a message field; a nested message field carries its type,
so ``det.bbox.center.position.x`` can be followed). A class lists its inherited members.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from api_names import dotted

PRIMITIVES = {
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
    "uint32", "int64", "uint64", "string", "wstring",
}  # fmt: skip


def git(repo: str, *args: str) -> str:
    """Output of ``git -C repo args`` (a bare mirror works: no work tree is read)."""
    return subprocess.run(
        ["git", "-C", repo, *args], check=True, capture_output=True, text=True
    ).stdout


def tree_files(repo: str, ref: str, folder: str, suffix: str) -> dict[str, str]:
    """Path relative to ``folder`` -> text, of every ``suffix`` file under ``folder`` at ``ref``."""
    listing = git(repo, "ls-tree", "-r", "--name-only", ref, "--", folder).splitlines()
    return {
        str(PurePosixPath(path).relative_to(folder)): git(repo, "show", f"{ref}:{path}")
        for path in listing
        if path.endswith(suffix)
    }


@dataclass
class ClassInfo:
    """A class: its own members and its bases as qualified names."""

    members: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)


@dataclass
class ModuleInfo:
    """A module: names it defines, names it imports (alias -> qualified), classes it defines."""

    defined: set[str] = field(default_factory=set)
    imported: dict[str, str] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    star: list[str] = field(default_factory=list)


def module_name(package: str, relative: str) -> str:
    """``rclpy`` + ``lifecycle/node.py`` -> ``rclpy.lifecycle.node``."""
    parts = [package, *PurePosixPath(relative).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, relative levels resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    keep = len(base) - node.level + (1 if is_package else 0)
    return ".".join([*base[:keep], *([node.module] if node.module else [])])


def class_members(cls: ast.ClassDef) -> set[str]:
    """Methods, properties, nested classes, class attributes and ``self.x`` assignments."""
    members: set[str] = set()
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(item.name)
        elif isinstance(item, ast.Assign):
            members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            members.add(node.attr)
    return members


def read_module(module: str, is_package: bool, source: str) -> ModuleInfo:
    """Top-level definitions, imports and classes of one module's source."""
    info = ModuleInfo()
    tree = ast.parse(source)
    for node in tree.body:
        for stmt in [node, *(ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    info.imported[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(stmt, ast.ImportFrom):
                origin = absolute(module, is_package, stmt)
                for alias in stmt.names:
                    if alias.name == "*":
                        info.star.append(origin)
                    else:
                        info.imported[alias.asname or alias.name] = f"{origin}.{alias.name}"
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.defined.add(stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                info.defined.add(stmt.name)
                info.classes[stmt.name] = ClassInfo(class_members(stmt))
            elif isinstance(stmt, ast.Assign):
                info.defined |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                info.defined.add(stmt.target.id)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            # a generic base (``BasePublisher[MsgT]``) passes on the members of its class
            bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]
            info.classes[node.name].bases = [
                qualified(module, info, base) for base in bases if dotted(base)
            ]
        elif isinstance(node, ast.Assign) and dotted(node.value) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):  # ``Node = LifecycleNode``: an alias
                info.imported[target.id] = qualified(module, info, node.value)
    return info


def qualified(module: str, info: ModuleInfo, expr: ast.expr) -> str:
    """The qualified name of a base-class or alias expression inside ``module``."""
    text = dotted(expr) or ""
    root, _, rest = text.partition(".")
    if root in info.imported:
        return ".".join(filter(None, (info.imported[root], rest)))
    return f"{module}.{text}"


def python_names(repo: str, ref: str, folder: str, package: str) -> list[str]:
    """Fixture lines of a Python package: modules, classes (members flattened), names."""
    files = tree_files(repo, ref, folder, ".py")
    modules = {
        module_name(package, rel): read_module(
            module_name(package, rel), rel.endswith("__init__.py"), text
        )
        for rel, text in files.items()
    }
    for info in modules.values():
        for origin in info.star:  # ``from rclpy.event_handler import *``: its public names
            source = modules.get(origin, ModuleInfo())
            for name in source.defined - set(info.imported):
                info.imported[name] = f"{origin}.{name}"

    def resolve(name: str, seen: frozenset[str] = frozenset()) -> str:
        """Follow re-exports to where a name is defined."""
        module, _, attr = name.rpartition(".")
        info = modules.get(module)
        if info is None or name in seen or attr in info.classes or attr not in info.imported:
            return name
        return resolve(info.imported[attr], seen | {name})

    def members(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """Own and inherited members of the class ``name`` (bases outside the package: none)."""
        module, _, attr = resolve(name).rpartition(".")
        cls = modules.get(module, ModuleInfo()).classes.get(attr)
        if cls is None or name in seen:
            return set()
        inherited = (members(base, seen | {name}) for base in cls.bases)
        return cls.members.union(*inherited)

    lines: list[str] = []
    for module, info in sorted(modules.items()):
        if private(module):
            continue
        lines.append(f"module {module}")
        inside = {n for n, q in info.imported.items() if q.split(".")[0] == package}
        for name in sorted(n for n in info.defined | inside if not private(n)):
            target = resolve(f"{module}.{name}")
            owner, _, attr = target.rpartition(".")
            if target != f"{module}.{name}":
                lines.append(f"alias {module}.{name} {target}")
            elif attr in modules.get(owner, ModuleInfo()).classes:
                lines.append(f"class {target}")
                public_members = sorted(m for m in members(target) if not private(m))
                lines += [f"name {target}.{m}" for m in public_members]
            else:
                lines.append(f"name {target}")
    return lines


def private(dotted_name: str) -> bool:
    """A name with a ``_`` component (``_rclpy``, ``Node._parameters``): not public API."""
    return any(part.startswith("_") for part in dotted_name.split("."))


def msg_fields(text: str, package: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, nested message type or None) of each field and constant of a .msg file."""
    out: list[tuple[str, str, str | None]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, name = line.split()[:2]
        if "=" in name or "=" in line.split(None, 2)[-1][:1]:
            out.append(("name", name.split("=")[0], None))
            continue
        base = kind.split("[")[0].split("<=")[0]  # float64[<=3], string<=10
        nested = None
        if "[" not in kind and base not in PRIMITIVES:
            pkg, _, msg = base.rpartition("/")
            nested = f"{pkg or package}.msg.{msg}"
        out.append(("field", name, nested))
    return out


def msg_names(repo: str, ref: str, folder: str, package: str) -> list[str]:
    """Fixture lines of a message package: its msg module, message classes and their fields."""
    lines = [f"module {package}", f"module {package}.msg"]
    for rel, text in sorted(tree_files(repo, ref, folder, ".msg").items()):
        cls = f"{package}.msg.{PurePosixPath(rel).stem}"
        lines.append(f"class {cls}")
        for kind, name, nested in msg_fields(text, package):
            lines.append(" ".join(filter(None, (kind, f"{cls}.{name}", nested))))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print a provenance header and the sorted fixture lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("python", "msg"))
    parser.add_argument("repo", help="git directory of the upstream repository")
    parser.add_argument("ref", help="branch or tag, e.g. humble or 4.0.0")
    parser.add_argument("folder", help="package folder in the repository, e.g. rclpy/rclpy")
    parser.add_argument("package", help="import name, e.g. rclpy")
    parser.add_argument("--origin", default="", help="repository name for the header")
    args = parser.parse_args(argv)
    read = python_names if args.kind == "python" else msg_names
    lines = sorted(set(read(args.repo, args.ref, args.folder.rstrip("/"), args.package)))
    commit = git(args.repo, "rev-parse", f"{args.ref}^{{commit}}").strip()
    origin = args.origin or args.package
    sys.stdout.write(f"# {origin} {args.ref} {commit} {args.folder}: {len(lines)} names\n")
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
