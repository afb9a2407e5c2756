"""The node's parameters: schema, descriptors, declaration and validation into typed options.

Post-processing and overlay parameters take their defaults and ranges from
``PostprocessOptions`` (one range per parameter); backend parameters become one
``BackendOptions``. ``RUN_TIME`` names the parameters a running node applies to the next frame;
``ParameterGate`` refuses the others (and every invalid value) with the start-up error message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    InvalidTopicNameException,
)
from rclpy.expand_topic_name import expand_topic_name
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import ReliabilityPolicy
from rclpy.validate_full_topic_name import validate_full_topic_name

from ..backends import BackendOptions, usable_cores
from ..bundle import PRECISIONS, default_bundle_path
from ..errors import ConfigError
from ..structures import PostprocessOptions
from .health import HealthLimits
from .qos import RELIABILITY_CHOICES, parse_reliability

#: every output name accepted by the ``outputs`` parameter
OUTPUTS = (
    "instance_mask",
    "panoptic",
    "semantic",
    "overlay",
    "detections",
    "instance_table",
    "panoptic_segments",
    "latency",
    "panoptic_color",
    "semantic_color",
)
BACKEND_CHOICES = ("auto", "tensorrt", "tensorrt_rtx", "onnxruntime", "openvino")
#: ``precision`` values; auto = the backend's default (onnxruntime fp32, tensorrt fp16)
PRECISION_CHOICES = ("auto", *PRECISIONS)
TRANSPORT_CHOICES = ("raw", "compressed", "both", "ffmpeg", "foxglove")
#: ``depth_transport`` values: the depth Image, or image_transport's compressedDepth of it
DEPTH_TRANSPORT_CHOICES = ("raw", "compressedDepth")
#: ``input_transport`` value -> the input kinds subscribed
INPUT_KINDS = {
    "raw": ("raw",),
    "compressed": ("compressed",),
    "both": ("raw", "compressed"),
    "ffmpeg": ("ffmpeg",),  # ffmpeg_image_transport's FFMPEGPacket (H.264 / H.265)
    "foxglove": ("foxglove",),  # foxglove_msgs/CompressedVideo (H.264 / H.265)
}


@dataclass(frozen=True)
class ParamSpec:
    """Default, description and constraints of one node parameter."""

    default: Any
    description: str
    choices: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None
    #: the ``ParameterType`` of a list parameter (an empty default says nothing of its items)
    array_type: int = ParameterType.PARAMETER_STRING_ARRAY
    #: a value to show in a type error where the default says little (an empty list)
    example: str = ""


def _option(name: str, description: str) -> ParamSpec:
    """A parameter that is a ``PostprocessOptions`` field: default and range come from there."""
    low, high, _ = PostprocessOptions.BOUNDS[name]
    return ParamSpec(getattr(PostprocessOptions(), name), description, bounds=(low, high))


#: The node's parameters; those in ``RUN_TIME`` can change while it runs, the rest need a restart.
PARAMETERS: dict[str, ParamSpec] = {
    "model": ParamSpec("", "model bundle folder; empty = the installed models/default"),
    "backend": ParamSpec("auto", "inference backend", choices=BACKEND_CHOICES),
    "precision": ParamSpec(
        "auto",
        "stage graph precision the backend runs; auto = the backend's default",
        choices=PRECISION_CHOICES,
    ),
    "engine_cache_dir": ParamSpec("", "TensorRT engine cache folder; empty = backend default"),
    "allow_engine_build": ParamSpec(
        True, "tensorrt: build a missing or stale engine at start (minutes) instead of failing"
    ),
    "gpu_device": ParamSpec(0, "tensorrt: CUDA device index", None, (0, 15)),
    "ort_threads": ParamSpec(
        0,
        "onnxruntime, openvino: threads; 0 = runtime default (half the cores with 2 stage_threads)",
        None,
        (0, 64),
    ),
    "score_threshold": _option("score_threshold", "minimum instance score"),
    "mask_threshold": _option("mask_threshold", "mask probability threshold"),
    "object_mask_threshold": _option("object_mask_threshold", "panoptic: minimum query score"),
    "overlap_threshold": _option("overlap_threshold", "panoptic: minimum visible fraction"),
    "max_instances": _option("max_instances", "most instances per frame"),
    "min_area": _option(
        "min_area", "instances and panoptic things of fewer camera pixels are removed; 0 = none"
    ),
    "outputs": ParamSpec(list(OUTPUTS), f"outputs to offer, any of {list(OUTPUTS)}"),
    "overlay_alpha": _option("overlay_alpha", "overlay colour weight"),
    "image_topic": ParamSpec("image", "input sensor_msgs/Image topic"),
    "image_topics": ParamSpec(
        [],
        "one input Image topic per camera, batched in one node; empty = image_topic alone",
        example="[/front/image_raw,/rear/image_raw]",
    ),
    "camera_names": ParamSpec(
        [],
        "one name per image_topics entry: its outputs are under ~/<name>/ (2+ cameras)",
        example="[front,rear]",
    ),
    "camera_info_topics": ParamSpec(
        [],
        "one CameraInfo topic per image_topics entry ('' = none for it); empty = none",
        example="[/front/camera_info,/rear/camera_info]",
    ),
    "batch_window_ms": ParamSpec(
        10.0, "ms a batch waits after its first frame for the other cameras'", None, (0.0, 1000.0)
    ),
    "stage_threads": ParamSpec(
        0,
        "worker threads of a round's two halves (2: the next round encodes while this one is "
        "decoded and published; on tensorrt also on two CUDA streams); 0 = 2 with several "
        "cameras, 1 with one",
        None,
        (0, 2),
    ),
    "batch_sizes": ParamSpec(
        [],
        "batch sizes the backend runs, a round at the smallest >= its frames; empty = default",
        array_type=ParameterType.PARAMETER_INTEGER_ARRAY,
        example="[1,2,4]",
    ),
    "input_transport": ParamSpec(
        "raw",
        "raw Image, <image_topic>/compressed, or both; video: <image_topic>/ffmpeg "
        "(FFMPEGPacket) or <image_topic>/foxglove (CompressedVideo)",
        choices=TRANSPORT_CHOICES,
    ),
    "input_reliability": ParamSpec(
        "auto",
        "input QoS reliability; auto follows the publishers",
        choices=tuple(RELIABILITY_CHOICES),
    ),
    "output_reliability": ParamSpec(
        "reliable",
        "output QoS reliability",
        choices=tuple(c for c in RELIABILITY_CHOICES if c != "auto"),
    ),
    "input_timeout": ParamSpec(
        2.0, "seconds without frames before /diagnostics warns", None, (0.1, 3600.0)
    ),
    "diagnostics_period": ParamSpec(1.0, "seconds between /diagnostics reports", None, (0.1, 60.0)),
    "tracking": ParamSpec(
        True, "instance ids persist across frames (track ids); false: 1..N in score order"
    ),
    "camera_info_topic": ParamSpec(
        "", "camera's CameraInfo topic, republished as ~/camera_info per frame; empty = off"
    ),
    "camera_info_tolerance_ms": ParamSpec(
        1.0, "largest stamp difference of a matching camera_info, ms", None, (0.0, 1000.0)
    ),
    "depth_topic": ParamSpec(
        "",
        "registered depth Image (16UC1 mm, 32FC1 m) for ~/detections_3d; needs "
        "camera_info_topic; empty = off",
    ),
    "depth_topics": ParamSpec(
        [],
        "one depth Image topic per image_topics entry ('' = none for it); empty = none",
        example="[/front/depth/image_raw,/rear/depth/image_raw]",
    ),
    "depth_transport": ParamSpec(
        "raw",
        "raw: the depth Image itself; compressedDepth: image_transport's PNG or RVL "
        "CompressedImage on <depth topic>/compressedDepth (what a recording usually holds)",
        choices=DEPTH_TRANSPORT_CHOICES,
    ),
    "depth_tolerance_ms": ParamSpec(
        20.0, "largest stamp difference of a depth image paired with a frame, ms", None, (0.0, 1e3)
    ),
    "cloud_topic": ParamSpec(
        "",
        "LiDAR PointCloud2 (float x, y, z) for ~/detections_3d, placed in the camera by the "
        "transforms of /tf and /tf_static at the cloud's stamp; needs camera_info_topic; "
        "empty = off",
    ),
    "cloud_topics": ParamSpec(
        [],
        "one PointCloud2 topic per image_topics entry ('' = none for it); empty = none",
        example="[/lidar/points,'']",
    ),
    "cloud_tolerance_ms": ParamSpec(
        50.0, "largest stamp difference of a cloud paired with a frame, ms", None, (0.0, 1e3)
    ),
    "fixed_frame": ParamSpec(
        "",
        "a frame that does not move while the vehicle does (odom, map): each cloud is moved "
        "from its stamp to the frame's through it (ego-motion); empty = the cloud is placed "
        "at its own stamp, uncompensated",
    ),
    "output_frame": ParamSpec(
        "",
        "the frame ~/detections_3d and ~/markers_3d are published in (base_link, map), placed "
        "through /tf and /tf_static at each frame's stamp; empty = the camera's optical frame",
    ),
    "overlay_jpeg_quality": ParamSpec(80, "JPEG quality of ~/overlay/compressed", None, (1, 100)),
    "expected_rate": ParamSpec(
        0.0, "expected output rate, Hz; 0 = the measured input rate", None, (0.0, 1000.0)
    ),
    "rate_tolerance": ParamSpec(
        0.1, "/diagnostics warns outside expected_rate x (1 -+ this)", None, (0.0, 1.0)
    ),
    "rate_window": ParamSpec(
        5, "diagnostics reports per rate window (no output in one = ERROR)", None, (1, 100)
    ),
    "latency_budget_ms": ParamSpec(
        500.0, "/diagnostics warns when stamp age or pipeline latency exceed it", None, (1.0, 1e6)
    ),
}

#: Parameters a running node applies to the next frame (thresholds, overlay weight, /diagnostics
#: timing): cheap to swap. The others build the model, the publishers or the subscriptions.
RUN_TIME = frozenset(
    {*PostprocessOptions.BOUNDS, "input_timeout", "diagnostics_period", "batch_window_ms"}
)
RUN_TIME_NOTE = "can change at run time: applies to the next frame"
RESTART_NOTE = "needs a restart (lifecycle node: cleanup, set it, configure)"


def ros_param_text(value: Any) -> str:
    """``value`` as typed on a command line (``-p name:=value``): 1.0 for a double, [a,b] lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(ros_param_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value) or "''"


def descriptor(name: str, spec: ParamSpec) -> ParameterDescriptor:
    """Descriptor of parameter ``name``: description, choices, range and whether it is run-time.

    Not ``read_only``: rclpy would then refuse even an unchanged value and a lifecycle node's
    unconfigured re-set, with a reason that gives no fix; ``ParameterGate`` refuses instead.
    """
    desc = spec.description
    if spec.choices:
        desc += f" ({' | '.join(spec.choices)})"
    note = RUN_TIME_NOTE if name in RUN_TIME else RESTART_NOTE
    d = ParameterDescriptor(name=name, description=desc, additional_constraints=note)
    is_int = isinstance(spec.default, int) and not isinstance(spec.default, bool)
    if spec.bounds is not None and is_int:
        low, high = (int(b) for b in spec.bounds)
        d.integer_range = [IntegerRange(from_value=low, to_value=high, step=1)]
    elif spec.bounds is not None:
        low, high = (float(b) for b in spec.bounds)
        d.floating_point_range = [FloatingPointRange(from_value=low, to_value=high, step=0.0)]
    if isinstance(spec.default, list):
        d.type = spec.array_type
    return d


def declare_parameters(
    node: Node, running: Callable[[], bool], apply: Callable[[NodeConfig], None]
) -> None:
    """Declare every parameter on ``node`` (ConfigError names a mistyped or out-of-range one),
    then guard later changes with a ``ParameterGate`` that hands accepted ones to ``apply``.

    rclpy infers a parameter's type from its default and takes ``[]`` for a byte array, so a list
    with an empty default is declared by type; unset (or ``[]`` in a YAML file, which rcl reads
    as no value) it is then set to ``[]`` of that type."""
    for name, spec in PARAMETERS.items():
        desc = descriptor(name, spec)
        typed = isinstance(spec.default, list) and not spec.default
        try:
            node.declare_parameter(name, Parameter.Type(desc.type) if typed else spec.default, desc)
            if typed and node.get_parameter_or(name).type_ == Parameter.Type.NOT_SET:
                node.set_parameters([Parameter(name, Parameter.Type(desc.type), [])])
        except InvalidParameterTypeException as exc:
            raise ConfigError(
                f"parameter {name}: {exc}; give it the default's type, e.g. "
                f"{name}:={spec.example or ros_param_text(spec.default)} "
                "(see config/compactinst.yaml)"
            ) from None
        except InvalidParameterValueException as exc:
            raise ConfigError(_value_refused(name, spec, exc)) from None
    node.add_on_set_parameters_callback(ParameterGate(node, running, apply))


def _value_refused(name: str, spec: ParamSpec, exc: InvalidParameterValueException) -> str:
    """The start-up error of a value rclpy's descriptor check refused (out of range): the
    parameter, the value, the valid range and a value to pass."""
    given = re.match(r"Invalid parameter value \((.*?)\) for parameter", str(exc))
    shown = f"{name}:={given.group(1)}" if given else name
    example = f"e.g. {name}:={ros_param_text(spec.default)} (the default)"
    if spec.bounds is None:
        return f"parameter {shown} is refused ({exc}); pass {example}, see config/compactinst.yaml"
    low, high = spec.bounds
    return (
        f"parameter {shown} is out of range: {name} ({spec.description}) takes "
        f"{ros_param_text(low)} to {ros_param_text(high)}; pass a value in that range, {example}, "
        "see config/compactinst.yaml"
    )


@dataclass(frozen=True)
class CameraConfig:
    """One camera of the node: its input topics and where its outputs go."""

    #: ``camera_names`` entry ("" for a lone camera without one)
    name: str
    image_topic: str
    #: "" = no camera_info for this camera
    camera_info_topic: str
    #: prefix of its output topics: ``~/`` for a lone camera, ``~/<name>/`` for several
    prefix: str = "~/"
    #: the parameter its topics come from, for error messages
    parameter: str = "image_topic"
    #: registered depth Image topic ("" = none)
    depth_topic: str = ""
    #: LiDAR PointCloud2 topic ("" = none); its static transform to the camera comes from tf
    cloud_topic: str = ""

    def topic(self, kind: str) -> str:
        """The input topic of transport ``kind`` (``raw``: the image topic, else image_transport's
        ``<image_topic>/<kind>``: compressed, ffmpeg, foxglove)."""
        base = self.image_topic
        return base if kind == "raw" else f"{base.rstrip('/')}/{kind}"


@dataclass(frozen=True)
class NodeConfig:
    """Validated parameter values, as the typed options of the pieces that use them."""

    model: Path
    backend: str
    backend_options: BackendOptions
    options: PostprocessOptions
    outputs: frozenset[str]
    cameras: tuple[CameraConfig, ...]
    input_transport: str
    input_reliability: ReliabilityPolicy | None
    output_reliability: ReliabilityPolicy
    input_timeout: float
    diagnostics_period: float
    camera_info_tolerance_ms: float
    depth_tolerance_ms: float
    cloud_tolerance_ms: float
    overlay_jpeg_quality: int
    health: HealthLimits
    tracking: bool = True
    depth_transport: str = "raw"
    batch_window_ms: float = 10.0
    overlap_stages: bool = False
    fixed_frame: str = ""
    output_frame: str = ""


def _model_path(value: str) -> Path:
    """The ``model`` parameter as a folder; empty means the installed default bundle."""
    if value:
        return Path(value).expanduser()
    found = default_bundle_path()
    if found is None:
        raise ConfigError(
            "parameter model is empty and no models/default bundle is installed; pass "
            "model:=/path/to/bundle (export one with 'compactinst export CONFIG --out DIR')"
        )
    return found


def ort_threads(requested: int, two_halves: bool) -> int | None:
    """ONNX Runtime threads per session: ``requested``, or for 0 the runtime's default, except
    that with ``two_halves`` on two threads, which run at once, each gets half the cores (all of
    them each oversubscribed the cores: 25 against 27 frames/s, docs/benchmarks.md)."""
    if requested:
        return requested
    return max(1, usable_cores() // 2) if two_halves else None


def overlap_stages(values: dict[str, Any], cameras: int) -> bool:
    """Whether a round's halves run on two threads: ``stage_threads`` 2, or 0 with several
    cameras. One camera that keeps up answers sooner on one thread (p50 59 against 87 ms at a
    15 Hz 720p camera here), several cameras need the rate (docs/benchmarks.md)."""
    threads = int(values.get("stage_threads") or 0)
    return threads == 2 or (threads == 0 and cameras > 1)


def backend_options(values: dict[str, Any], cameras: int = 1) -> BackendOptions:
    """The backend parameters as ``BackendOptions`` (0 threads and an empty folder = defaults);
    ``cameras`` is the largest batch a round can make."""
    sizes = [int(b) for b in values.get("batch_sizes") or ()]
    if sizes and (min(sizes) < 1 or sizes != sorted(set(sizes))):
        raise ConfigError(
            f"parameter batch_sizes={ros_param_text(sizes)} must be distinct positive sizes in "
            "ascending order, e.g. batch_sizes:=[1,2,4]; leave it empty for the backend's default"
        )
    if sizes and sizes[-1] < cameras:
        raise ConfigError(
            f"parameter batch_sizes={ros_param_text(sizes)} has no size for a round of all "
            f"{cameras} cameras; add {cameras}, e.g. "
            f"batch_sizes:={ros_param_text([*sizes, cameras])}, or leave it empty for the default"
        )
    return BackendOptions(
        threads=ort_threads(int(values["ort_threads"]), overlap_stages(values, cameras)),
        device=int(values["gpu_device"]),
        engine_cache_dir=values["engine_cache_dir"] or None,
        allow_build=bool(values["allow_engine_build"]),
        precision=None if values["precision"] == "auto" else values["precision"],
        batch_sizes=tuple(sizes) or None,
        max_batch=cameras,
        settings="node",  # errors advise node parameters (precision:=fp32)
    )


#: a camera name: one ROS name token (it becomes the topic namespace ``~/<name>/``)
CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _same_length(name: str, values: list, topics: list, example: str) -> None:
    """ConfigError unless ``values`` (parameter ``name``) has one entry per image_topics entry."""
    if len(values) != len(topics):
        raise ConfigError(
            f"parameter {name} has {len(values)} entries but image_topics has {len(topics)}; "
            f"give one per camera, in the order of image_topics, e.g. {name}:={example}"
        )


def _check_single(values: dict[str, Any], name: str, plural: str, given: list[str]) -> None:
    """ConfigError when the single-camera parameter ``name`` is set besides the list ``plural``
    (``given``) and says something else (a one-element list equal to it is the same camera)."""
    value = values[name]
    if value != PARAMETERS[name].default and given != [value]:
        raise ConfigError(
            f"parameters {name}='{value}' and {plural}={ros_param_text(given)} are both set; "
            f"with image_topics give every camera's topic in {plural} and leave {name} unset"
        )


def camera_configs(values: dict[str, Any]) -> tuple[CameraConfig, ...]:
    """The cameras the topic parameters describe; ConfigError names a mismatch and its fix.

    ``image_topic`` alone, or a one-element ``image_topics``, is one camera with today's layout
    (outputs under ``~/``); two or more put each camera's outputs under ``~/<camera_name>/``."""
    topics = list(values["image_topics"])
    names = list(values["camera_names"])
    infos = list(values["camera_info_topics"])
    if not topics:
        if names or infos:
            given = "camera_names" if names else "camera_info_topics"
            raise ConfigError(
                f"parameter {given} is set but image_topics is empty; list the cameras' topics "
                "in image_topics (one per name), or use image_topic and camera_info_topic for "
                "one camera"
            )
        return (CameraConfig("", values["image_topic"], values["camera_info_topic"]),)
    _check_single(values, "image_topic", "image_topics", topics)
    if not infos and len(topics) == 1 and values["camera_info_topic"]:
        infos = [values["camera_info_topic"]]
    _check_single(values, "camera_info_topic", "camera_info_topics", infos)
    if len(topics) > 1 or names:
        _same_length("camera_names", names, topics, PARAMETERS["camera_names"].example)
    if infos:
        _same_length("camera_info_topics", infos, topics, PARAMETERS["camera_info_topics"].example)
    for name in names:
        if not CAMERA_NAME.fullmatch(name):
            raise ConfigError(
                f"parameter camera_names has '{name}', which is not a ROS name token; use a "
                "letter, then letters, digits or '_' (it becomes the topic namespace ~/<name>/), "
                "e.g. camera_names:=[front,rear]"
            )
    for label, items in (("camera_names", names), ("image_topics", topics)):
        twice = sorted({item for item in items if items.count(item) > 1})
        if twice:
            raise ConfigError(
                f"parameter {label} lists {twice} more than once; give every camera its own "
                f"{'name' if label == 'camera_names' else 'topic'}"
            )
    infos = infos or [""] * len(topics)
    if len(topics) == 1:
        return (CameraConfig(names[0] if names else "", topics[0], infos[0], "~/", "image_topics"),)
    return tuple(
        CameraConfig(name, topic, info, f"~/{name}/", "image_topics")
        for name, topic, info in zip(names, topics, infos, strict=True)
    )


def with_depth_topics(
    values: dict[str, Any], cameras: tuple[CameraConfig, ...]
) -> tuple[CameraConfig, ...]:
    """``cameras`` with their depth and cloud topics (``depth_topic``/``cloud_topic`` for one
    camera, ``depth_topics``/``cloud_topics`` one per camera); ConfigError names a mismatch and
    its fix."""
    found: dict[str, list[str]] = {}
    for kind in ("depth", "cloud"):
        single, plural = f"{kind}_topic", f"{kind}_topics"
        topics = list(values[plural])
        if not topics and values[single]:
            topics = [values[single]]
            if len(cameras) > 1:
                raise ConfigError(
                    f"parameter {single}='{values[single]}' is for one camera; with "
                    f"{len(cameras)} cameras give one per camera in {plural}, e.g. "
                    f"{plural}:={PARAMETERS[plural].example}"
                )
        _check_single(values, single, plural, topics)
        if topics:
            _same_length(plural, topics, list(cameras), PARAMETERS[plural].example)
        found[kind] = topics or [""] * len(cameras)
    for camera, depth, cloud in zip(cameras, found["depth"], found["cloud"], strict=True):
        if depth and cloud:
            raise ConfigError(
                f"camera '{camera.name or camera.image_topic}' has a depth topic '{depth}' and a "
                f"cloud topic '{cloud}'; give it one of the two"
            )
        if (depth or cloud) and not camera.camera_info_topic:
            raise ConfigError(
                f"{'depth' if depth else 'cloud'} topic '{depth or cloud}' needs the camera's "
                "camera_info (its K places the masks in 3-D); set camera_info_topic "
                "(camera_info_topics with several cameras)"
            )
    return tuple(
        replace(camera, depth_topic=depth, cloud_topic=cloud)
        for camera, depth, cloud in zip(cameras, found["depth"], found["cloud"], strict=True)
    )


def read_config(values: dict[str, Any]) -> NodeConfig:
    """Validate parameter values; ConfigError names the parameter, the value and the fix."""
    for name, spec in PARAMETERS.items():
        if spec.choices and values[name] not in spec.choices:
            raise ConfigError(
                f"parameter {name}='{values[name]}' is invalid; choose one of {list(spec.choices)}"
            )
    unknown = sorted(set(values["outputs"]) - set(OUTPUTS))
    if unknown:
        raise ConfigError(f"parameter outputs has unknown names {unknown}; known: {list(OUTPUTS)}")
    options = PostprocessOptions(
        **{name: type(PARAMETERS[name].default)(values[name]) for name in PostprocessOptions.BOUNDS}
    )
    cameras = with_depth_topics(values, camera_configs(values))
    return NodeConfig(
        model=_model_path(values["model"]),
        backend=values["backend"],
        backend_options=backend_options(values, len(cameras)),
        options=options,
        outputs=frozenset(values["outputs"]),
        cameras=cameras,
        batch_window_ms=float(values["batch_window_ms"]),
        overlap_stages=overlap_stages(values, len(cameras)),
        input_transport=values["input_transport"],
        input_reliability=parse_reliability("input_reliability", values["input_reliability"]),
        output_reliability=parse_reliability(
            "output_reliability", values["output_reliability"], allow_auto=False
        ),
        input_timeout=float(values["input_timeout"]),
        diagnostics_period=float(values["diagnostics_period"]),
        tracking=bool(values["tracking"]),
        camera_info_tolerance_ms=float(values["camera_info_tolerance_ms"]),
        depth_tolerance_ms=float(values["depth_tolerance_ms"]),
        depth_transport=str(values["depth_transport"]),
        cloud_tolerance_ms=float(values["cloud_tolerance_ms"]),
        fixed_frame=str(values["fixed_frame"]).lstrip("/"),
        output_frame=str(values["output_frame"]).lstrip("/"),
        overlay_jpeg_quality=int(values["overlay_jpeg_quality"]),
        health=HealthLimits(
            expected_rate=float(values["expected_rate"]),
            rate_tolerance=float(values["rate_tolerance"]),
            rate_window=int(values["rate_window"]),
            latency_budget_ms=float(values["latency_budget_ms"]),
        ),
    )


#: example values named by a topic parameter's error
TOPIC_EXAMPLES = {
    "image_topic": "/camera/image_raw",
    "camera_info_topic": "/camera/camera_info",
    "image_topics": PARAMETERS["image_topics"].example,
    "camera_info_topics": PARAMETERS["camera_info_topics"].example,
}


def check_topic(node: Node, name: str, parameter: str = "image_topic") -> str:
    """Fully qualified ``name`` on ``node``; ConfigError naming the parameter if invalid."""
    try:
        full = expand_topic_name(name, node.get_name(), node.get_namespace())
        validate_full_topic_name(full)
    except (InvalidTopicNameException, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(
            f"parameter {parameter}='{name}' is not a valid ROS topic name ({reason}); "
            f"pass e.g. {parameter}:={TOPIC_EXAMPLES.get(parameter, '/camera/image_raw')}"
        ) from None
    return full


def _same(a: Any, b: Any) -> bool:
    """Parameter values equal; arrays compare by items (rclpy may give a list or a tuple)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return bool(a == b)


def check_change(values: dict[str, Any], changes: dict[str, Any], running: bool) -> NodeConfig:
    """The config after ``changes``; ConfigError if a value is invalid (the start-up message) or
    if a ``running`` node would need a restart for it (an unchanged value is always accepted)."""
    if running:
        for name, value in changes.items():
            if name not in RUN_TIME and not _same(value, values[name]):
                raise ConfigError(
                    f"parameter {name} needs a restart; the running node keeps "
                    f"{name}:={ros_param_text(values[name])}. Restart it with "
                    f"{name}:={ros_param_text(value)} (lifecycle node: cleanup, set it, configure)"
                )
    return read_config(values | changes)


class ParameterGate:
    """The on-set-parameters callback: validates a request the way start-up does, refuses what
    needs a restart while the node runs, and hands an accepted config to ``apply``.

    rclpy checks each descriptor's type and range before calling it, with its own reason.
    """

    def __init__(
        self, node: Node, running: Callable[[], bool], apply: Callable[[NodeConfig], None]
    ) -> None:
        self.node = node
        self.running = running
        self.apply = apply

    def __call__(self, parameters: list[Parameter]) -> SetParametersResult:
        """Accept or refuse ``parameters`` as one change; refused ones keep their old values."""
        changes = {p.name: p.value for p in parameters if p.name in PARAMETERS}
        if not changes:
            return SetParametersResult(successful=True)  # e.g. use_sim_time: not ours to judge
        values = {name: self.node.get_parameter(name).value for name in PARAMETERS}
        changed = sorted(n for n, v in changes.items() if not _same(v, values[n]))
        running = self.running()
        try:
            config = check_change(values, changes, running)
            for camera in config.cameras:
                check_topic(self.node, camera.image_topic, camera.parameter)
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        if running and changed:
            self.apply(config)
            shown = ", ".join(f"{n}:={ros_param_text(changes[n])}" for n in changed)
            self.node.get_logger().info(f"parameters changed: {shown}; from the next frame on")
        return SetParametersResult(successful=True)
