"""``compactinst ros``: drive a running node over rclpy where no ``ros2`` command line exists.

Set and read a parameter (``rcl_interfaces/srv/SetParameters``, ``GetParameters``), drive the
lifecycle node (``lifecycle_msgs/srv/ChangeState``, ``GetState``), read ``~/instance_table`` or
``~/panoptic_segments`` (PointCloud2 decoded with numpy from its own fields), read the
``~/latency/frame`` record, and list the graph's topics. docs/ros.md shows each next to its
``ros2`` equivalent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, NodeError

#: lifecycle transitions by the label rcl_lifecycle gives them in every state they start from,
#: and ``get`` (the state)
LIFECYCLE_ACTIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown", "get")
#: the last name of a topic that ``table`` reads as given; any other name is a node's
TABLE_TOPICS = ("instance_table", "panoptic_segments")
LATENCY_TOPIC = "latency/frame"
#: seconds between a service's discovery and a request that must not be sent twice: one sent
#: before the reply reader has matched loses its reply (FastDDS)
REPLY_MATCH_S = 0.5
#: seconds to wait for the reply of a request that may be sent again
RETRY_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The operations and their arguments."""
    parser.add_argument(
        "--domain-id",
        type=int,
        default=None,
        help="ROS_DOMAIN_ID to use (default: the environment's, else 0)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the node and for each answer; a configure that builds a "
        "TensorRT engine takes minutes (default: %(default)s)",
    )
    sub = parser.add_subparsers(dest="operation", metavar="OPERATION", required=True)
    p = sub.add_parser("param-set", help="set a node parameter (ros2 param set)")
    p.add_argument("node", help="node name, e.g. /compactinst")
    p.add_argument("name", help="parameter name, e.g. score_threshold")
    p.add_argument("value", help="value as YAML (0.5, true, [a, b]); converted to the type")
    p = sub.add_parser("param-get", help="print a node parameter (ros2 param get)")
    p.add_argument("node", help="node name, e.g. /compactinst")
    p.add_argument("name", help="parameter name")
    p = sub.add_parser("lifecycle", help="drive or ask a lifecycle node (ros2 lifecycle set/get)")
    p.add_argument("node", help="node name, e.g. /compactinst")
    p.add_argument("action", choices=LIFECYCLE_ACTIONS, help="a transition, or get the state")
    for name, what in (("table", "an instance or segment table"), ("latency", "latency records")):
        p = sub.add_parser(name, help=f"print {what} as they arrive (ros2 topic echo)")
        p.add_argument(
            "target",
            help=f"node name (reads its ~/{TABLE_TOPICS[0] if name == 'table' else LATENCY_TOPIC})"
            + (f" or a topic ending in {' or '.join(TABLE_TOPICS)}" if name == "table" else "")
            + (" or a JointState latency topic" if name == "latency" else ""),
        )
        p.add_argument(
            "--count", type=int, default=1, help="messages to print (default: %(default)s)"
        )
        p.add_argument("--json", action="store_true", help="one JSON object per message")
    p = sub.add_parser(
        "diagnostics", help="print /diagnostics as it arrives (ros2 topic echo /diagnostics)"
    )
    p.add_argument(
        "node", nargs="?", default=None, help="only this node's statuses (default: every status)"
    )
    p.add_argument("--count", type=int, default=1, help="reports to print (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object per status")
    p = sub.add_parser(
        "build-interfaces",
        help="build vision_msgs and tf2_msgs (no wheel exists) into this environment, for the "
        "3-D outputs of a ROS installed from pip (needs the ros-build extra, cmake, a compiler)",
    )
    p.add_argument(
        "--prefix", type=Path, default=None,
        help="install prefix (default: this environment's, where the ROS wheels are)",
    )  # fmt: skip
    p = sub.add_parser("topics", help="topics and types in the graph (ros2 topic list -t)")
    p.add_argument("node", nargs="?", default=None, help="only this node's (default: every topic)")


def run(args: argparse.Namespace) -> int:
    """Run one operation; NodeError (exit 1) names a node that does not answer or a refusal,
    ConfigError (exit 2) a parameter name or value that cannot work."""
    operations: dict[str, Callable[[Session, argparse.Namespace], None]] = {
        "param-set": _param_set,
        "param-get": _param_get,
        "lifecycle": _lifecycle,
        "table": _table,
        "latency": _latency,
        "topics": _topics,
        "diagnostics": _diagnostics,
    }
    if args.operation == "build-interfaces":  # builds here: no ROS graph involved
        return _build_interfaces(args)
    with session(args.domain_id, args.timeout) as ros:
        operations[args.operation](ros, args)
    return 0


def _build_interfaces(args: argparse.Namespace) -> int:
    """Build and install vision_msgs and tf2_msgs; NodeError (exit 1) naming the missing tool
    or the failed step."""
    from .interfaces import BuildError, build_three_d_interfaces

    try:
        installed = build_three_d_interfaces(args.prefix)
    except BuildError as exc:
        raise NodeError(str(exc)) from None
    for name, folder in installed:
        print(f"{name}: {folder}")
    print("the node's 3-D outputs (~/detections_3d, ~/markers_3d, ~/cloud_labelled) can now "
          "start; restart the node")  # fmt: skip
    return 0


class Session:
    """One rclpy context and node on a domain, spun from the calling thread while waiting."""

    def __init__(self, domain_id: int | None, timeout: float) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.rclpy = rclpy
        self.timeout = timeout
        self.domain_id = (
            int(os.environ.get("ROS_DOMAIN_ID", "0") or 0) if domain_id is None else domain_id
        )
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=self.domain_id)
        self.node = rclpy.create_node(f"compactinst_cli_{os.getpid()}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def spin_until(self, done: Callable[[], Any], timeout: float | None = None) -> Any:
        """Spin until ``done()`` is truthy (returns it) or ``timeout`` passes (returns None)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            value = done()
            if value or time.monotonic() >= deadline:
                return value or None
            self.executor.spin_once(timeout_sec=0.05)

    def call(
        self, srv_type: type, name: str, request: Any, what: str, idempotent: bool = True
    ) -> Any:
        """The response of service ``name``; ConfigError when no node offers it or none comes.

        A reply can be lost while the reply reader is still matching (FastDDS): an
        ``idempotent`` request is sent again after ``RETRY_S``, any other one only after
        ``REPLY_MATCH_S``."""
        client = self.node.create_client(srv_type, name)
        if not self.spin_until(client.service_is_ready):
            raise NodeError(
                f"no node answers {name} on ROS_DOMAIN_ID {self.domain_id} within "
                f"{self.timeout:g} s; check the node name ('compactinst ros topics' lists the "
                "graph), the domain (--domain-id) and that the node runs"
            )
        if not idempotent:
            self.spin_until(lambda: False, REPLY_MATCH_S)
        deadline = time.monotonic() + self.timeout
        while True:
            future = client.call_async(request)
            wait = deadline - time.monotonic()
            if self.spin_until(future.done, min(RETRY_S, wait) if idempotent else wait):
                return future.result()
            if time.monotonic() >= deadline:
                raise NodeError(f"{what}: no answer within {self.timeout:g} s; raise --timeout")

    def close(self) -> None:
        """Destroy the node and shut the context down."""
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)


@contextmanager
def session(domain_id: int | None, timeout: float) -> Iterator[Session]:
    """A ``Session``, closed on exit."""
    ros = Session(domain_id, timeout)
    try:
        yield ros
    finally:
        ros.close()


def _absolute(name: str) -> str:
    """``name`` with a leading slash (``compactinst`` -> ``/compactinst``)."""
    return name if name.startswith("/") else f"/{name}"


def _get_value(ros: Session, node: str, name: str) -> Any:
    """The ``rcl_interfaces/msg/ParameterValue`` of ``node``'s ``name``; ConfigError if unset."""
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters

    response = ros.call(
        GetParameters,
        f"{node}/get_parameters",
        GetParameters.Request(names=[name]),
        f"get {name} of {node}",
    )
    value = response.values[0] if response.values else None
    if value is None or value.type == ParameterType.PARAMETER_NOT_SET:
        raise ConfigError(
            f"{node} has no parameter '{name}'; see the parameter table of docs/ros.md "
            "(or run the node with --help)"
        )
    return value


def _python_value(value: Any) -> Any:
    """A ParameterValue message as a Python value."""
    from rclpy.parameter import parameter_value_to_python

    return parameter_value_to_python(value)


def typed_value(text: str, type_id: int) -> Any:
    """``text`` (YAML) as a value of parameter type ``type_id``: an integer for a double becomes
    a float, anything for a string stays the text; ConfigError names a value that does not fit."""
    from rclpy.parameter import Parameter

    kind = Parameter.Type(type_id)
    if kind == Parameter.Type.STRING:
        return text
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = text
    if kind == Parameter.Type.DOUBLE and isinstance(parsed, int) and not isinstance(parsed, bool):
        return float(parsed)
    if kind == Parameter.Type.STRING_ARRAY and isinstance(parsed, list):
        return [str(v) for v in parsed]
    if kind == Parameter.Type.DOUBLE_ARRAY and isinstance(parsed, list):
        parsed = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in parsed]
    if not kind.check(parsed):
        raise ConfigError(
            f"value '{text}' is not a {kind.name.lower()}, the parameter's type; e.g. "
            f"{_EXAMPLES.get(kind.name, '...')}"
        )
    return parsed


_EXAMPLES = {
    "DOUBLE": "0.5",
    "INTEGER": "3",
    "BOOL": "true",
    "STRING_ARRAY": "'[instance_mask, overlay]'",
    "INTEGER_ARRAY": "'[1, 2]'",
    "DOUBLE_ARRAY": "'[0.5, 1.0]'",
}


def _param_set(ros: Session, args: argparse.Namespace) -> None:
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    node = _absolute(args.node)
    old = _get_value(ros, node, args.name)
    value = typed_value(args.value, old.type)
    parameter = Parameter(args.name, Parameter.Type(old.type), value)
    response = ros.call(
        SetParameters,
        f"{node}/set_parameters",
        SetParameters.Request(parameters=[parameter.to_parameter_msg()]),
        f"set {args.name} on {node}",
    )
    result = response.results[0]
    if not result.successful:
        raise NodeError(f"{node} refused {args.name}:={args.value}: {result.reason}")
    print(f"{node}: {args.name} {_python_value(old)!r} -> {value!r}")
    _warn_namesakes(ros, node)


def _warn_namesakes(ros: Session, node: str) -> None:
    """Warn when several nodes answer to ``node``: a request reaches only one of them."""
    from ..cli import warn
    from .diagnostics import namesake_warning

    message = namesake_warning(ros.node, node)
    if message is not None:
        warn("ros", message)


def _param_get(ros: Session, args: argparse.Namespace) -> None:
    node = _absolute(args.node)
    print(f"{node}: {args.name} = {_python_value(_get_value(ros, node, args.name))!r}")
    _warn_namesakes(ros, node)


def _state(ros: Session, node: str) -> str:
    from lifecycle_msgs.srv import GetState

    try:
        response = ros.call(GetState, f"{node}/get_state", GetState.Request(), f"state of {node}")
    except NodeError as exc:
        raise NodeError(
            f"{exc}; a plain compactinst_node has no lifecycle: start compactinst_lifecycle_node"
        ) from None
    return str(response.current_state.label)


def _lifecycle(ros: Session, args: argparse.Namespace) -> None:
    from lifecycle_msgs.srv import ChangeState

    node = _absolute(args.node)
    before = _state(ros, node)
    if args.action == "get":
        print(f"{node}: {before}")
        return
    request = ChangeState.Request()
    request.transition.label = args.action
    what = f"{args.action} {node}"
    logged = _errors_logged(ros, node)
    response = ros.call(ChangeState, f"{node}/change_state", request, what, idempotent=False)
    after = _state(ros, node)
    if not response.success:
        ros.spin_until(lambda: bool(logged), min(2.0, ros.timeout))
        why = logged[-1] if logged else _last_error(ros, node)
        raise NodeError(
            f"{node}: {args.action} from '{before}' failed, the node is '{after}' (a transition "
            "that does not start from this state fails too); "
            + (f"the node reports: {why}" if why else "the node's log says why")
        )
    print(f"{node}: {args.action}: {before} -> {after}")
    _warn_namesakes(ros, node)


def _statuses(msg: Any, node: str | None) -> list[Any]:
    """The DiagnosticStatus entries of ``msg`` of ``node`` (its ``status_name``s: the node's
    and each of its cameras'), or all of them without ``node``."""
    if node is None:
        return list(msg.status)
    return [s for s in msg.status if s.name.startswith((f"{node}: ", f"{node}/"))]


def _errors_logged(ros: Session, node: str) -> list[str]:
    """A list that fills with the ERROR lines ``node`` logs from now on (/rosout): why a
    transition failed, in the node's own words, where the user of the tool can read them."""
    from rcl_interfaces.msg import Log
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    logger = node.strip("/").replace("/", ".")
    errors: list[str] = []
    since = time.time()

    def on_log(msg: Any) -> None:
        stamp = msg.stamp.sec + msg.stamp.nanosec * 1e-9
        if msg.name == logger and msg.level >= Log.ERROR and stamp >= since - 1.0:
            errors.append(str(msg.msg).splitlines()[0])

    qos = QoSProfile(
        depth=100,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    ros.node.create_subscription(Log, "/rosout", on_log, qos)
    return errors


def _last_error(ros: Session, node: str, wait_s: float = 3.0) -> str:
    """The ``last_error`` that ``node`` reports on /diagnostics (its next report, waited for up
    to ``wait_s``): why a transition failed, where the node says so; "" when none comes."""
    from diagnostic_msgs.msg import DiagnosticArray

    errors: list[str] = []

    def on_report(msg: Any) -> None:
        for status in _statuses(msg, node):
            errors.extend(v.value for v in status.values if v.key == "last_error" and v.value)

    sub = ros.node.create_subscription(DiagnosticArray, "/diagnostics", on_report, 10)
    ros.spin_until(lambda: bool(errors), min(wait_s, ros.timeout))
    ros.node.destroy_subscription(sub)
    return errors[-1] if errors else ""


def _diagnostics(ros: Session, args: argparse.Namespace) -> None:
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    node = None if args.node is None else _absolute(args.node)
    levels = {
        DiagnosticStatus.OK: "OK",
        DiagnosticStatus.WARN: "WARN",
        DiagnosticStatus.ERROR: "ERROR",
        DiagnosticStatus.STALE: "STALE",
    }

    def show(msg: Any, _received: float) -> None:
        for status in _statuses(msg, node):
            level = levels.get(status.level, str(status.level))
            values = {kv.key: kv.value for kv in status.values}
            if args.json:
                print(json.dumps({"name": status.name, "level": level,
                                  "message": status.message, "values": values}))  # fmt: skip
                continue
            print(f"{level} {status.name}: {status.message}")
            for key, value in values.items():
                print(f"  {key}: {value}")

    keep = lambda msg: bool(_statuses(msg, node))  # noqa: E731 - one expression
    _messages(ros, DiagnosticArray, "/diagnostics", args.count, show, keep)


def _messages(
    ros: Session,
    msg_type: type,
    topic: str,
    count: int,
    show: Callable[[Any, float], None],
    keep: Callable[[Any], bool] = lambda msg: True,
) -> None:
    """Subscribe to ``topic`` and ``show`` its next ``count`` messages that ``keep`` accepts
    (with their receipt time); NodeError when they do not come within the timeout."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    got: list[tuple[Any, float]] = []
    qos = QoSProfile(depth=max(count, 1), reliability=ReliabilityPolicy.RELIABLE)
    ros.node.create_subscription(
        msg_type, topic, lambda m: keep(m) and got.append((m, time.time())), qos
    )
    shown = 0
    deadline = time.monotonic() + ros.timeout
    while shown < count:
        if not ros.spin_until(lambda n=shown: len(got) > n, deadline - time.monotonic()):
            publishers = ros.node.count_publishers(topic)
            raise NodeError(
                f"{shown} of {count} messages on {topic} within {ros.timeout:g} s "
                f"({publishers} publisher(s)); the node publishes per camera frame and only "
                "while active: check its input, or raise --timeout"
            )
        show(*got[shown])
        shown += 1


def _stamp(msg: Any) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _table(ros: Session, args: argparse.Namespace) -> None:
    from sensor_msgs.msg import PointCloud2

    from .convert import table_from_msg

    target = _absolute(args.target)
    topic = target if target.rsplit("/", 1)[-1] in TABLE_TOPICS else f"{target}/{TABLE_TOPICS[0]}"
    lifted = _detections_3d(ros, topic)
    classes = _class_names(ros, topic.rsplit("/", 1)[0])

    def show(msg: Any, _received: float) -> None:
        rows = table_from_msg(msg)
        records = [{name: row[name].item() for name in rows.dtype.names or ()} for row in rows]
        names = list(rows.dtype.names or ())
        known = classes()
        if known and "label_id" in names:  # the class name beside its id
            names.insert(names.index("label_id") + 1, "class")
            for record in records:
                record["class"] = known.get(record["label_id"], "?")
        if lifted is not None and ros.node.count_publishers(lifted.topic):
            names += list(lifted.columns)
            centroids = lifted.of(ros, _stamp(msg))
            for record in records:
                record.update(centroids.get(record["id"], dict.fromkeys(lifted.columns)))
        if args.json:
            head = {"stamp": _stamp(msg), "frame_id": msg.header.frame_id}
            print(json.dumps({**head, "rows": records}))
            return
        print(f"{topic} stamp {_stamp(msg):.9f} frame_id {msg.header.frame_id}: {len(rows)} rows")
        print("  ".join(f"{n:>11}" for n in names))
        for record in records:
            print("  ".join(_cell(record[n]) for n in names))

    _messages(ros, PointCloud2, topic, args.count, show)


#: how long the table waits once for a node's latched label table that has a publisher
LABELS_WAIT_S = 2.0


def _class_names(ros: Session, node: str) -> Callable[[], dict[int, str]]:
    """Subscribe to ``node``'s latched ``~/labels`` (the bundle's label table) now; the
    returned call gives {label id: class name} once it came (it arrives while the table is
    awaited), {} before or without it (then the table shows ids only)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from ..labels import LabelSet

    got: list[str] = []
    waited: list[bool] = []
    qos = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    topic = f"{node}/labels"
    ros.node.create_subscription(String, topic, lambda m: got.append(m.data), qos)

    def classes() -> dict[int, str]:
        if not got and not waited and ros.node.count_publishers(topic):
            # the latched table may come a moment after the first row table: wait once for it,
            # so the first table shows class names as the later ones do
            waited.append(True)
            ros.spin_until(lambda: bool(got), min(LABELS_WAIT_S, ros.timeout))
        if not got:
            return {}
        labels = LabelSet.from_json(json.loads(got[-1]))
        return dict(zip(labels.ids, labels.names, strict=True))

    return classes


def _cell(value: Any) -> str:
    if value is None:  # an instance without 3-D (no depth support)
        return f"{'-':>11}"
    return f"{value:>11.4f}" if isinstance(value, float) else f"{value:>11}"


class _Lifted:
    """The node's ~/detections_3d beside its instance table: per frame stamp, each instance's
    centroid (camera optical frame, m) and distance, for the table's 3-D columns."""

    columns = ("x", "y", "z", "distance")

    def __init__(self, ros: Session, topic: str, vision_msgs: Any) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        self.topic = topic
        self.frames: dict[float, dict[int, dict[str, float]]] = {}
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        ros.node.create_subscription(vision_msgs.Detection3DArray, topic, self._on, qos)

    def _on(self, msg: Any) -> None:
        rows = {}
        for det in msg.detections:
            p = det.results[0].pose.pose.position
            distance = round(math.sqrt(p.x * p.x + p.y * p.y + p.z * p.z), 4)
            rows[int(det.id)] = {"x": p.x, "y": p.y, "z": p.z, "distance": distance}
        self.frames[_stamp(msg)] = rows

    def of(self, ros: Session, stamp: float) -> dict[int, dict[str, float]]:
        """The 3-D rows of the frame at ``stamp`` (waits briefly: the two topics race)."""
        ros.spin_until(lambda: stamp in self.frames, 1.0)
        return self.frames.get(stamp, {})


def _detections_3d(ros: Session, table_topic: str) -> _Lifted | None:
    """The ~/detections_3d reader beside an instance table (None: a segment table, or no
    vision_msgs here); its columns show while the node publishes it (a depth or cloud input)."""
    if not table_topic.endswith(f"/{TABLE_TOPICS[0]}"):
        return None
    try:
        import vision_msgs.msg as vision_msgs
    except ImportError:
        return None
    return _Lifted(ros, table_topic.rsplit("/", 1)[0] + "/detections_3d", vision_msgs)


def _latency(ros: Session, args: argparse.Namespace) -> None:
    from sensor_msgs.msg import JointState

    target = _absolute(args.target)
    topic = target if target.endswith(f"/{LATENCY_TOPIC}") else f"{target}/{LATENCY_TOPIC}"

    def show(msg: Any, received: float) -> None:
        record = dict(zip(msg.name, (float(v) for v in msg.position), strict=False))
        delay_ms = (received - _stamp(msg)) * 1e3
        if args.json:
            print(json.dumps({"stamp": _stamp(msg), "delay_ms": delay_ms, "ms": record}))
            return
        stages = " ".join(f"{name} {ms:.2f}" for name, ms in record.items())
        print(f"stamp {_stamp(msg):.9f}: {stages} ms; delay at receipt {delay_ms:.2f} ms")

    _messages(ros, JointState, topic, args.count, show)


def _topics(ros: Session, args: argparse.Namespace) -> None:
    if args.node is None:
        ros.spin_until(lambda: False, min(ros.timeout, 2.0))  # let discovery fill the graph
        found = ros.node.get_topic_names_and_types()
    else:
        path = _absolute(args.node)
        namespace, _, name = path.rpartition("/")
        namespace = namespace or "/"

        def known() -> bool:
            return (name, namespace) in ros.node.get_node_names_and_namespaces()

        if not ros.spin_until(known):
            raise NodeError(
                f"no node {path} on ROS_DOMAIN_ID {ros.domain_id} within {ros.timeout:g} s; "
                "'compactinst ros topics' lists every topic"
            )

        def endpoints() -> list:
            return [
                *ros.node.get_publisher_names_and_types_by_node(name, namespace),
                *ros.node.get_subscriber_names_and_types_by_node(name, namespace),
            ]

        # a node's endpoints are discovered one by one: list them once they stop changing
        deadline = time.monotonic() + ros.timeout
        found: list = []
        while True:
            ros.spin_until(lambda: False, REPLY_MATCH_S)
            now = endpoints()
            settled = bool(now) and sorted(map(str, now)) == sorted(map(str, found))
            found = now
            if settled or time.monotonic() > deadline:
                break
    for topic, types in sorted(set((t, tuple(ty)) for t, ty in found)):
        print(f"{topic} [{', '.join(types)}]")
