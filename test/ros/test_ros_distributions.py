"""Every rclpy, launch, launch_ros and vision_msgs name the package uses exists on each ROS
distribution it claims, or is guarded there; package.xml lists every ROS package the code uses.

CI runs the Kilted and the Jazzy wheels, the vehicle Humble, Jazzy or Lyrical. The fixtures in
test/fixtures/ros_api were written by scripts/ros_api_names.py from the upstream git sources
named on their first line. A use is found in the AST of compactinst_ros/, launch/ and scripts/
(test/ runs only on CI):

* imports (``from rclpy.lifecycle import Node``) and attribute chains on them (``rclpy.init``,
  ``ReliabilityPolicy.BEST_EFFORT``);
* attributes of objects whose type is known: a parameter annotated with an upstream class
  (``node: Node``), ``self.x`` assigned from one, ``self`` in a subclass (our own members
  excepted), a message built as ``x = vision_msgs.Detection2D()`` (fields are followed through
  nested messages), and a parameter named ``vision_msgs`` (the optional ``vision_msgs.msg``
  module is handed around under that name). A chain is followed while it names modules,
  classes and message fields; what a function returns is not known, so it stops there.

A use need not exist on a distribution where it is guarded:

* inside ``try:`` whose ``except`` catches ImportError, ModuleNotFoundError or AttributeError; the
  ``except`` body is the fallback and must exist wherever something of the ``try`` body is
  missing;
* inside ``if hasattr(x, "n"):``, or after ``if not hasattr(x, "n"): ... return`` (also
  ``raise``/``continue``/``break``) in the same block: guards ``x.n``;
* inside a function whose every call site is guarded for that name.
"""

from __future__ import annotations

import ast
import functools
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "test" / "fixtures" / "ros_api"
sys.path.insert(0, str(ROOT / "scripts"))

from ros_api_names import class_members, dotted, msg_fields  # noqa: E402

#: the packages whose names the fixtures record
CHECKED = ("rclpy", "launch", "launch_ros", "vision_msgs")
#: distribution -> fixture files; a package without a fixture there is not checked there
DISTRIBUTIONS = {
    "humble": ("rclpy-humble", "launch-humble", "launch_ros-humble", "vision_msgs-4.1.1"),
    "humble before Feb 2023 (vision_msgs 4.0.0)": (
        "rclpy-humble", "launch-humble", "launch_ros-humble", "vision_msgs-4.0.0",
    ),
    "jazzy": ("rclpy-jazzy", "vision_msgs-4.1.1"),
    "lyrical": ("rclpy-lyrical",),  # vision_msgs is not released into Lyrical yet
}  # fmt: skip
#: parameters that hold an optional module, by name
PARAMETER_MODULES = {"vision_msgs": "vision_msgs.msg"}
GUARD_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "AttributeError"}
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def sources(*words: str) -> list[Path]:
    """The package, its launch files and scripts (code that runs on the vehicle) that mention
    one of ``words`` (parsing only those keeps the test fast)."""
    paths = [*(ROOT / "compactinst_ros").rglob("*.py"), *(ROOT / "launch").glob("*.py")]
    paths += [*(ROOT / "scripts").glob("*.py")]
    return sorted(p for p in paths if any(w in p.read_text() for w in words))


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The AST of a source file, parsed once per run."""
    return ast.parse(path.read_text())


@dataclass(frozen=True)
class Api:
    """One fixture: kind of every name (module, class, name, alias, field); alias targets and
    nested field types."""

    kinds: dict[str, str]
    types: dict[str, str]

    @classmethod
    def load(cls, *names: str) -> Api:
        """The union of fixture files (first line: provenance)."""
        kinds: dict[str, str] = {}
        types: dict[str, str] = {}
        for name in names:
            lines = (FIXTURES / f"{name}.txt").read_text().splitlines()
            assert lines[0].startswith("# ") and "names" in lines[0], name
            for line in lines[1:]:
                kind, qualified, *nested = line.split()
                kinds[qualified] = kind
                if nested:
                    types[qualified] = nested[0]
        return cls(kinds, types)

    def missing(self, name: str) -> str | None:
        """The first part of ``name`` this API lacks, None when it exists or cannot be followed
        (a package it does not record, a function's result)."""
        parts = name.split(".")
        current = parts[0]
        if self.kinds.get(current) != "module":
            return None
        for part in parts[1:]:
            kind = self.kinds[current]
            if kind == "field" and current in self.types:
                current = self.types[current]
                if current.split(".")[0] not in CHECKED:
                    return None
            elif kind not in ("module", "class"):
                return None
            current = f"{current}.{part}"
            if current not in self.kinds:
                return current
            while self.kinds.get(current) == "alias":
                current = self.types[current]
            if current not in self.kinds:
                return None  # an alias of what the sources do not define (C extension)
        return None


@dataclass(frozen=True)
class Use:
    """A qualified upstream name used at ``where``; ``guards``: names that may be missing there
    (``*``: all); ``fallback_of``: used only where one of those is missing."""

    name: str
    where: str
    guards: frozenset[str] = frozenset()
    fallback_of: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()

    def required(self, api: Api) -> bool:
        """Whether this distribution must have the name."""
        if self.fallback_of and all(api.missing(n) is None for n in self.fallback_of):
            return False
        return "*" not in self.guards and not any(
            self.name == g or self.name.startswith(f"{g}.") for g in self.guards
        )


@dataclass
class Context:
    """What is guarded where the walk is."""

    guards: frozenset[str] = frozenset()
    fallback_of: tuple[str, ...] = ()

    def guarded(self, *names: str) -> Context:
        """This context with ``names`` guarded too."""
        return Context(self.guards | set(names), self.fallback_of)


@dataclass
class Scope:
    """Names with a known upstream type: modules and classes (``env``), instances."""

    instances: dict[str, str] = field(default_factory=dict)
    self_type: str | None = None
    self_attrs: dict[str, str] = field(default_factory=dict)
    own: set[str] = field(default_factory=set)


class Walker:
    """Collects the upstream names one module uses, each with the guards around it."""

    def __init__(self, path: Path, tree: ast.Module):
        self.where = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name)
        self.tree = tree
        self.env: dict[str, str] = {}
        self.local_classes: dict[str, ast.ClassDef] = {}
        self._index(tree)
        self.uses: list[Use] = []
        self.calls: list[tuple[str, frozenset[str]]] = []
        self.functions: tuple[str, ...] = ()

    def _index(self, tree: ast.Module) -> None:
        """Imports anywhere in the module (``env``) and the classes it defines."""
        env = self.env
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.local_classes[node.name] = node
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        env[alias.asname] = alias.name
                    else:
                        env[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    env[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def walk(self) -> Walker:
        """Visit the module; fills ``uses`` and ``calls``."""
        self.block(self.tree.body, Context(), Scope())
        return self

    def block(self, stmts: list[ast.stmt], ctx: Context, scope: Scope) -> None:
        """Statements in order; ``if not hasattr(...): return`` guards the rest of the block."""
        for stmt in stmts:
            guard = self.hasattr_guard(stmt.test, scope) if isinstance(stmt, ast.If) else None
            if isinstance(stmt, ast.If) and guard is not None:
                names, negated = guard
                self.expr(stmt.test, ctx, scope)
                self.block(stmt.body, ctx if negated else ctx.guarded(*names), scope)
                self.block(stmt.orelse, ctx.guarded(*names) if negated else ctx, scope)
                if negated and stmt.body and isinstance(stmt.body[-1], EXITS):
                    ctx = ctx.guarded(*names)
            else:
                self.stmt(stmt, ctx, scope)

    def stmt(self, stmt: ast.stmt, ctx: Context, scope: Scope) -> None:
        """One statement: imports, definitions, try blocks, then its expressions."""
        if isinstance(stmt, ast.Try):
            catches = any(self.catches_guard(h.type) for h in stmt.handlers)
            if not catches:
                self.block(stmt.body, ctx, scope)
                for handler in stmt.handlers:
                    self.block(handler.body, ctx, scope)
            else:
                start = len(self.uses)
                self.block(stmt.body, ctx.guarded("*"), scope)
                tried = tuple(u.name for u in self.uses[start:])
                for handler in stmt.handlers:
                    self.block(handler.body, Context(ctx.guards, ctx.fallback_of + tried), scope)
            self.block(stmt.orelse, ctx, scope)
            self.block(stmt.finalbody, ctx, scope)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(stmt, ctx, scope)
        elif isinstance(stmt, ast.ClassDef):
            self.klass(stmt, ctx)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                self.use(alias.name, stmt, ctx)
        elif isinstance(stmt, ast.ImportFrom):
            if not stmt.level and stmt.module:
                for alias in stmt.names:
                    self.use(f"{stmt.module}.{alias.name}", stmt, ctx)
        else:
            self.assignment(stmt, scope)
            for _field, value in ast.iter_fields(stmt):
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    self.block(value, ctx, scope)
                elif isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.expr(item, ctx, scope)
                elif isinstance(value, ast.AST):
                    self.expr(value, ctx, scope)

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: Context, outer: Scope):
        """A function body in a new scope: annotated parameters are typed."""
        scope = Scope(dict(outer.instances), outer.self_type, outer.self_attrs, outer.own)
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        for arg in args:
            typed = self.resolve(arg.annotation, outer) if arg.annotation is not None else None
            typed = PARAMETER_MODULES.get(arg.arg, typed)
            if typed is not None:
                scope.instances[arg.arg] = typed
        for default in [*fn.args.defaults, *fn.decorator_list]:
            self.expr(default, ctx, outer)
        self.functions += (fn.name,)
        self.block(fn.body, ctx, scope)
        self.functions = self.functions[:-1]

    def klass(self, cls: ast.ClassDef, ctx: Context) -> None:
        """A class body; ``self`` is typed by an upstream base, our own members excepted."""
        scope = Scope()
        own = set(class_members(cls))
        for base in cls.bases:
            typed = self.resolve(base, scope)
            if typed is not None and typed.split(".")[0] in CHECKED:
                scope.self_type = typed
            self.expr(base, ctx, scope)
            local = self.local_classes.get(dotted(base) or "")
            if local is not None:
                own |= class_members(local)
        scope.own = own
        self.block(cls.body, ctx, scope)

    def assignment(self, stmt: ast.stmt, scope: Scope) -> None:
        """``x = Message()`` types ``x``; ``self.x = typed`` types ``self.x``."""
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            return
        target, value = stmt.targets[0], stmt.value
        typed = None
        if isinstance(value, ast.Call):
            typed = self.resolve(value.func, scope)
        elif isinstance(value, ast.Name):
            typed = scope.instances.get(value.id)
        if typed is None:
            return
        if isinstance(target, ast.Name):
            scope.instances[target.id] = typed
        elif dotted(target) and dotted(target).startswith("self.") and target.attr:
            scope.self_attrs[target.attr] = typed

    def resolve(self, expr: ast.expr | None, scope: Scope) -> str | None:
        """The upstream qualified name an expression stands for, None when unknown."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            expr = ast.parse(expr.value, mode="eval").body
        text = dotted(expr) if expr is not None else None
        if text is None:
            return None
        root, *rest = text.split(".")
        if root == "self" and rest and rest[0] in scope.self_attrs:
            base, rest = scope.self_attrs[rest[0]], rest[1:]
        elif root == "self" and scope.self_type and rest and rest[0] not in scope.own:
            base = scope.self_type
        elif root in scope.instances:
            base = scope.instances[root]
        elif root in self.env:
            base = self.env[root]
        else:
            return None
        return ".".join([base, *rest])

    def hasattr_guard(self, test: ast.expr, scope: Scope) -> tuple[list[str], bool] | None:
        """(guarded names, negated) of ``hasattr(x, "n")``, ``not hasattr(x, "n")``, an ``and``
        of the first or an ``or`` of the second."""
        if isinstance(test, ast.BoolOp):
            parts = [self.hasattr_guard(value, scope) for value in test.values]
            wanted = isinstance(test.op, ast.Or)  # or: all negated; and: none negated
            if all(p is not None and p[1] == wanted for p in parts):
                return [n for p in parts for n in p[0]], wanted  # type: ignore[index]
            return None
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        call = test.operand if negated else test
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "hasattr"
            and len(call.args) == 2
            and isinstance(call.args[1], ast.Constant)
        ):
            return None
        owner = self.resolve(call.args[0], scope)
        return ([f"{owner}.{call.args[1].value}"], negated) if owner else None

    @staticmethod
    def catches_guard(handler_type: ast.expr | None) -> bool:
        """Whether an ``except`` clause catches one of GUARD_EXCEPTIONS by name."""
        names = handler_type.elts if isinstance(handler_type, ast.Tuple) else [handler_type]
        return any(isinstance(n, ast.Name) and n.id in GUARD_EXCEPTIONS for n in names)

    def expr(self, node: ast.AST, ctx: Context, scope: Scope) -> None:
        """Attribute chains (the longest of each) and call sites inside an expression."""
        inner = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and id(sub) not in inner:
                name = self.resolve(sub, scope)
                if name is not None:
                    self.use(name, sub, ctx)
            if isinstance(sub, ast.Call):
                callee = sub.func.attr if isinstance(sub.func, ast.Attribute) else None
                callee = sub.func.id if isinstance(sub.func, ast.Name) else callee
                if callee:
                    self.calls.append((callee, ctx.guards))

    def use(self, name: str, node: ast.AST, ctx: Context) -> None:
        """Record ``name`` if it belongs to a checked package."""
        if name.split(".")[0] in CHECKED:
            where = f"{self.where}:{node.lineno}"
            self.uses.append(Use(name, where, ctx.guards, ctx.fallback_of, self.functions))


def walk_sources(paths: list[Path]) -> list[Use]:
    """Every use in ``paths``; a function called only where a name is guarded guards it too."""
    walkers = [Walker(path, parsed(path)).walk() for path in paths]
    sites: dict[str, list[frozenset[str]]] = {}
    for walker in walkers:
        for callee, guards in walker.calls:
            sites.setdefault(callee, []).append(guards)
    function_guards = {callee: frozenset.intersection(*g) for callee, g in sites.items()}
    return [
        Use(
            use.name,
            use.where,
            use.guards.union(*(function_guards.get(f, frozenset()) for f in use.functions)),
            use.fallback_of,
        )
        for walker in walkers
        for use in walker.uses
    ]


def unguarded_missing(uses: list[Use], api: Api) -> list[str]:
    """``where: name (lacks part)`` of each required use this API lacks."""
    found = []
    for use in uses:
        lack = api.missing(use.name)
        if lack is not None and use.required(api):
            found.append(f"{use.where}: {use.name} (no {lack})")
    return sorted(found)


@pytest.fixture(scope="module")
def uses() -> list[Use]:
    """Every checked name the vehicle's code uses."""
    return walk_sources(sources(*CHECKED))


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_every_used_name_exists_on_the_distribution_or_is_guarded(uses, distribution) -> None:
    api = Api.load(*DISTRIBUTIONS[distribution])
    missing = unguarded_missing(uses, api)
    assert not missing, f"names {distribution} lacks, unguarded:\n" + "\n".join(missing)


def test_the_walk_sees_the_names_that_differ_between_distributions(uses) -> None:
    """Without these uses the check would pass vacuously: the node's event callbacks (moved
    from qos_event to event_handler after Humble), the lifecycle node, launch_ros's Node and
    LabelInfo (not in vision_msgs 4.0) with its fields."""
    names = {u.name for u in uses}
    for expected in (
        "rclpy.event_handler.SubscriptionEventCallbacks",
        "rclpy.qos_event.SubscriptionEventCallbacks",
        "rclpy.lifecycle.Node",
        "rclpy.node.Node.create_publisher",
        "launch_ros.actions.Node",
        "launch.LaunchContext.launch_configurations",
        "vision_msgs.msg.LabelInfo",
        "vision_msgs.msg.Detection2D.bbox.center.position.x",
    ):
        assert expected in names, expected


def test_fixtures_know_what_differs_between_distributions() -> None:
    humble, jazzy = Api.load("rclpy-humble"), Api.load("rclpy-jazzy")
    assert humble.missing("rclpy.event_handler.SubscriptionEventCallbacks") == (
        "rclpy.event_handler"
    )
    assert jazzy.missing("rclpy.event_handler.SubscriptionEventCallbacks.incompatible_qos") is None
    assert humble.missing("rclpy.lifecycle.Node.trigger_configure") is None
    lyrical = Api.load("rclpy-lyrical")  # rclpy 10: the async node, members of generic bases
    assert lyrical.missing("rclpy.experimental.AsyncNode.create_subscription") is None
    assert jazzy.missing("rclpy.experimental.AsyncNode") is not None
    assert lyrical.missing("rclpy.publisher.Publisher.publish") is None  # BasePublisher[MsgT]'s
    old, new = Api.load("vision_msgs-4.0.0"), Api.load("vision_msgs-4.1.1")
    assert old.missing("vision_msgs.msg.LabelInfo") == "vision_msgs.msg.LabelInfo"
    assert new.missing("vision_msgs.msg.LabelInfo.class_map") is None
    assert old.missing("vision_msgs.msg.Detection2D.bbox.center.position.x") is None
    assert old.missing("vision_msgs.msg.Detection2D.bbox.center.x") == (
        "vision_msgs.msg.Pose2D.x"
    )


def test_msg_fields_reads_fields_constants_and_nested_message_types() -> None:
    text = (
        "# a comment\nstd_msgs/Header header\nBoundingBox2D bbox  # the box\n"
        "ObjectHypothesisWithPose[] results\nuint8 FOO=1\nint8 BAR = -1\n"
        'string id "x"\nfloat64[<=3] values\n'
    )
    assert msg_fields(text, "vision_msgs") == [
        ("field", "header", "std_msgs.msg.Header"),
        ("field", "bbox", "vision_msgs.msg.BoundingBox2D"),
        ("field", "results", None),
        ("name", "FOO", None),
        ("name", "BAR", None),
        ("field", "id", None),
        ("field", "values", None),
    ]


GUARDED = '''
import rclpy
try:
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:
    from rclpy.qos_event import SubscriptionEventCallbacks


def publish(node, vision_msgs):
    if not hasattr(vision_msgs, "LabelInfo"):
        return
    label_info(vision_msgs)


def label_info(vision_msgs):
    return vision_msgs.LabelInfo()


def unguarded(vision_msgs):
    vision_msgs.LabelInfo()
    rclpy.event_handler.QoSEventHandler
'''


def test_guards_are_recognised_and_an_unguarded_use_is_not(tmp_path) -> None:
    source = tmp_path / "guarded.py"
    source.write_text(GUARDED)
    uses = walk_sources([source])
    for use in uses:
        object.__setattr__(use, "where", use.where.rsplit("/", 1)[-1])
    humble = Api.load("rclpy-humble", "vision_msgs-4.0.0")
    assert unguarded_missing(uses, humble) == [
        "guarded.py:20: vision_msgs.msg.LabelInfo (no vision_msgs.msg.LabelInfo)",
        "guarded.py:21: rclpy.event_handler.QoSEventHandler (no rclpy.event_handler)",
    ]
    jazzy = Api.load("rclpy-jazzy", "vision_msgs-4.1.1")
    assert unguarded_missing(uses, jazzy) == []


def ros_imports(paths: list[Path]) -> Iterator[tuple[str, str]]:
    """(ROS package, where) of every absolute import of one, and every package a launch file
    starts (``Node(package="rviz2")``)."""
    for path in paths:
        tree = parsed(path)
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Call) and dotted(node.func) in ("Node", "LifecycleNode"):
                modules = [
                    k.value.value
                    for k in node.keywords
                    if k.arg == "package" and isinstance(k.value, ast.Constant)
                ]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if is_ros_package(top):
                    yield MODULE_PACKAGES.get(top, top), f"{where}:{node.lineno}"


ROS_PACKAGES = ("rclpy", "launch", "launch_ros", "ament_index_python", "rviz2", "tf2_ros")
#: Python modules whose ROS package has another name (tf2_ros's Python half is tf2_ros_py)
MODULE_PACKAGES = {"tf2_ros": "tf2_ros_py"}
#: words every file that uses a ROS package contains
ROS_WORDS = (*ROS_PACKAGES, "_msgs", "_interfaces")


def is_ros_package(name: str) -> bool:
    """ROS packages among import names: the client library, launch, ament, tf2_ros and
    interfaces."""
    return name in ROS_PACKAGES or name.endswith(("_msgs", "_interfaces"))


def test_package_xml_depends_on_every_ros_package_the_installed_code_uses() -> None:
    installed = [p for p in sources(*ROS_WORDS) if not p.is_relative_to(ROOT / "scripts")]
    used: dict[str, str] = {}
    for package, where in ros_imports(installed):
        used.setdefault(package, where)
    manifest = ET.parse(ROOT / "package.xml").getroot()
    declared = {
        e.text.strip()
        for tag in ("exec_depend", "depend")
        for e in manifest.iter(tag)
        if not e.text.strip().startswith("python3-")
    }
    undeclared = {p: w for p, w in used.items() if p not in declared}
    assert not undeclared, f"package.xml lacks exec_depend on (first use): {undeclared}"
    unused = sorted(declared - set(used))
    assert not unused, f"package.xml depends on ROS packages no installed code uses: {unused}"
    assert {"rviz2", "rcl_interfaces"} <= set(used)
