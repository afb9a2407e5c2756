"""Launch compactinst for several cameras: one batched node for all of them (batched:=true), or
one node per camera (batched:=false, the default), sharing one parameters file and engine cache.

ros2 launch compactinst_ros compactinst_multi.launch.py cameras_file:=cameras.yaml batched:=true
ros2 launch compactinst_ros compactinst_multi.launch.py \
    cameras:='[{namespace: front, image_topic: /front/image_raw},
               {namespace: rear, image_topic: /rear/image, camera_info_topic: /rear/camera_info}]'

A camera is ``namespace`` (required, unique) plus optional ``image_topic`` and
``camera_info_topic``; ``cameras_file`` holds the same list under ``cameras:``. Each camera's node
is compactinst.launch.py in that namespace, so the other arguments mean what they mean there. With
batched:=true one compactinst.launch.py starts one node, ``node_name`` in the root namespace, whose
``image_topics``/``camera_names``/``camera_info_topics`` are the camera list (a camera's name is its
namespace; a topic left out is the parameters file's ``image_topic`` in that namespace, as for a
per-camera node), written with the parameters file (less its one-camera ``image_topic`` and
``camera_info_topic``) into a generated parameters file; each camera's
outputs are then ``/<node_name>/<namespace>/...``. The nodes get one engine cache folder
(parameter ``engine_cache_dir`` and $COMPACTINST_ENGINE_CACHE); with the tensorrt backend
``compactinst build-engine`` fills it before any node starts, so each engine is built once per
model and GPU, not once per camera.
"""

import importlib.util
import os
import tempfile
from types import ModuleType

import yaml
from ament_index_python.packages import get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    GroupAction,
    IncludeLaunchDescription,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
    Shutdown,
)
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchContext, LaunchDescription

PACKAGE = "compactinst_ros"
SINGLE_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compactinst.launch.py")
CAMERA_KEYS = ("namespace", "image_topic", "camera_info_topic")
#: arguments passed unchanged to every camera's compactinst.launch.py ("" = not given)
SHARED_ARGUMENTS = (
    ("model", "", "model bundle folder (default: the parameters file's, else models/default)"),
    ("backend", "", "auto | tensorrt | onnxruntime | openvino (default: the parameters file's)"),
    (
        "precision",
        "",
        "auto | fp32 | fp16 | int8: the graphs every node runs (default: the parameters file's)",
    ),
    ("use_sim_time", "", "true | false: follow /clock (default: the parameters file's)"),
    ("node_name", "compactinst", "name of each node (inside its camera's namespace)"),
    ("lifecycle", "false", "true: lifecycle nodes, each driven to active"),
    (
        "fastdds_profile",
        "",
        "Fast DDS profile to set (under the names the distribution reads); default: keep the "
        "environment's, under either name, else the shipped shared-memory profile",
    ),
)
EXAMPLE = "[{namespace: front, image_topic: /front/image_raw}]"


def parse_cameras(text: str, source: str) -> list[dict[str, str]]:
    """The camera list in YAML ``text`` (a list, or a mapping with ``cameras:``); ValueError names
    the problem and ``source``."""
    data = yaml.safe_load(text)
    if isinstance(data, dict) and "cameras" in data:
        data = data["cameras"]
    if not isinstance(data, list) or not data:
        raise ValueError(f"{source}: expected a non-empty list of cameras, e.g. {EXAMPLE}")
    cameras: list[dict[str, str]] = []
    for index, entry in enumerate(data):
        where = f"{source}: camera {index}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is {entry!r}; each camera is a mapping, e.g. {EXAMPLE}")
        unknown = sorted(set(entry) - set(CAMERA_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; use {', '.join(CAMERA_KEYS)}")
        camera = {key: str(entry.get(key) or "") for key in CAMERA_KEYS}
        camera["namespace"] = camera["namespace"].strip("/")
        if not camera["namespace"]:
            raise ValueError(f"{where} has no namespace; every camera needs its own")
        if any(c["namespace"] == camera["namespace"] for c in cameras):
            raise ValueError(f"{where}: namespace '{camera['namespace']}' is used twice")
        cameras.append(camera)
    return cameras


def file_parameter(params_file: str, name: str) -> str:
    """Parameter ``name`` under ``/**`` in the parameters file, "" where it is not set there."""
    with open(params_file) as handle:
        data = yaml.safe_load(handle) or {}
    value = data.get("/**", {}).get("ros__parameters", {}).get(name)
    return "" if value is None else str(value)


def _cameras(context: LaunchContext) -> list[dict[str, str]]:
    inline = LaunchConfiguration("cameras").perform(context)
    path = LaunchConfiguration("cameras_file").perform(context)
    if bool(inline) == bool(path):
        raise ValueError(f"give exactly one of cameras:='{EXAMPLE}' or cameras_file:=<yaml>")
    if inline:
        return parse_cameras(inline, "launch argument cameras")
    with open(path) as handle:
        return parse_cameras(handle.read(), path)


def _engine_cache_dir(context: LaunchContext, params_file: str) -> str:
    """The argument, else the parameters file's value, else the backends' default folder."""
    from compactinst_ros.private_files import default_cache_dir

    given = LaunchConfiguration("engine_cache_dir").perform(context)
    return given or file_parameter(params_file, "engine_cache_dir") or str(default_cache_dir())


def _prebuild_command(context: LaunchContext, params_file: str, cache_dir: str) -> list[str]:
    """``compactinst build-engine`` for the nodes' model and GPU, or [] without TensorRT."""
    from compactinst_ros.backends import resolve_backend_name

    def setting(name: str) -> str:
        return LaunchConfiguration(name).perform(context) or file_parameter(params_file, name)

    if resolve_backend_name(setting("backend") or "auto") != "tensorrt":
        return []
    share = get_package_share_directory(PACKAGE)
    model = setting("model") or os.path.join(share, "models", "default")
    device = file_parameter(params_file, "gpu_device") or "0"
    command = ["compactinst", "build-engine", model, "--cache-dir", cache_dir, "--device", device]
    precision = setting("precision")
    # the nodes' engines: build-engine's default is the backend's (auto)
    return command + (["--precision", precision] if precision not in ("", "auto") else [])


def single_launch_module() -> ModuleType:
    """compactinst.launch.py as a module, for its helpers (``parse_bool``)."""
    spec = importlib.util.spec_from_file_location("compactinst_launch", SINGLE_LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_namespace(topic: str, namespace: str) -> str:
    """``topic`` as a node in ``namespace`` resolves it: absolute stays, relative goes below."""
    return topic if topic.startswith("/") else f"/{namespace}/{topic}"


def batched_parameters(cameras: list[dict[str, str]], params_file: str) -> dict[str, list[str]]:
    """The batched node's camera parameters: ``image_topics``, ``camera_names`` (the cameras'
    namespaces) and, where any camera has one, ``camera_info_topics`` ("" for the others)."""
    image_default = file_parameter(params_file, "image_topic") or "image"
    params = {
        "image_topics": [
            in_namespace(c["image_topic"] or image_default, c["namespace"]) for c in cameras
        ],
        "camera_names": [c["namespace"] for c in cameras],
    }
    if any(c["camera_info_topic"] for c in cameras):
        params["camera_info_topics"] = [
            in_namespace(c["camera_info_topic"], c["namespace"]) if c["camera_info_topic"] else ""
            for c in cameras
        ]
    return params


def batched_params_file(params_file: str, camera_params: dict[str, list[str]]) -> str:
    """A parameters file: ``params_file`` with ``camera_params`` set for every node (``/**``) in
    place of its one camera's ``image_topic`` and ``camera_info_topic``; written to the temporary
    folder, as the launch passes parameters by file."""
    with open(params_file) as handle:
        data = yaml.safe_load(handle) or {}
    params = data.setdefault("/**", {}).setdefault("ros__parameters", {})
    for single in ("image_topic", "camera_info_topic"):
        params.pop(single, None)
    params.update(camera_params)
    handle, path = tempfile.mkstemp(prefix="compactinst_cameras_", suffix=".yaml")
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(data, out)
    return path


def _single_launch(arguments: dict) -> IncludeLaunchDescription:
    return IncludeLaunchDescription(
        PythonLaunchDescriptionSource(SINGLE_LAUNCH),
        launch_arguments={**arguments, "rviz": "false"}.items(),
    )


def camera_actions(context: LaunchContext) -> list:
    """One compactinst.launch.py per camera, or one for the batched node (batched:=true), after
    the engine build where there is one."""
    params_file = LaunchConfiguration("params_file").perform(context)
    cache_dir = _engine_cache_dir(context, params_file)
    shared = {name: LaunchConfiguration(name) for name, _, _ in SHARED_ARGUMENTS}
    common = {**shared, "params_file": params_file, "engine_cache_dir": cache_dir}
    cameras = _cameras(context)
    batched = LaunchConfiguration("batched").perform(context)
    if single_launch_module().parse_bool(batched, "batched"):
        generated = batched_params_file(params_file, batched_parameters(cameras, params_file))
        nodes = [GroupAction([_single_launch({**common, "params_file": generated})], scoped=True)]
    else:
        nodes = [
            GroupAction([_single_launch({**common, **camera})], scoped=True) for camera in cameras
        ]
    cache_env = SetEnvironmentVariable("COMPACTINST_ENGINE_CACHE", cache_dir)
    prebuild = _prebuild_command(context, params_file, cache_dir)
    if not prebuild:
        return [cache_env, *nodes]
    build = ExecuteProcess(cmd=prebuild, output="screen", name="build_engines")

    def after_build(event: object, _context: LaunchContext) -> list:
        if event.returncode != 0:
            return [Shutdown(reason=f"'{' '.join(prebuild)}' failed (exit {event.returncode})")]
        return [LogInfo(msg=f"engines ready in {cache_dir}; starting the cameras"), *nodes]

    return [
        cache_env,
        RegisterEventHandler(OnProcessExit(target_action=build, on_exit=after_build)),
        build,
    ]


def generate_launch_description() -> LaunchDescription:
    """The camera list, the arguments every camera shares, and the per-camera launches."""
    share = get_package_share_directory(PACKAGE)
    arguments = (
        ("cameras", "", f"inline YAML list of cameras, e.g. {EXAMPLE}"),
        ("cameras_file", "", "YAML file with 'cameras:' and that list"),
        (
            "batched",
            "false",
            "true: one batched node for every camera (image_topics/camera_names); false: one "
            "node per camera",
        ),
        ("params_file", os.path.join(share, "config", "compactinst.yaml"), "node parameters"),
        (
            "engine_cache_dir",
            "",
            "engine cache shared by the nodes (default: the parameters "
            "file's, else the backends' default)",
        ),
        *SHARED_ARGUMENTS,
    )
    return LaunchDescription(
        [
            *(DeclareLaunchArgument(n, default_value=d, description=h) for n, d, h in arguments),
            OpaqueFunction(function=camera_actions),
        ]
    )
