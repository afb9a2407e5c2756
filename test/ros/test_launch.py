"""The launch files, run for real: ``launch.LaunchService`` starts the colcon-installed package.

Needs the Humble ``launch``/``launch_ros`` wheels and the ``composition_interfaces`` source from
the folder of prebuilt launch wheels next to the checkout (or $COMPACTINST_LAUNCH_WHEELS); where
that folder is absent the tests skip, naming it. Each launch runs in its own process on its own
ROS domain, as ``ros2 launch`` would, and must end cleanly on SIGINT.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from interface_build import COMPOSITION_INTERFACES, ROS_LAUNCH_DIR, built_for_test
from ros_domains import next_domain
from ros_harness import REPO, Client
from ros_messages import raster_from_image
from test_ros_node import image_msg, scene

from compactinst_ros import dds_env

pytest.importorskip("rclpy")
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image

#: a cold run builds composition_interfaces (about 50 s) and the package with colcon (about 20 s)
pytestmark = pytest.mark.slow

RUNNER = Path(__file__).with_name("launch_runner.py")
INSTALL_HINT = f"pip install --no-deps {ROS_LAUNCH_DIR}/*.whl osrf-pycommon (or: make venv)"


@pytest.fixture(scope="session")
def launch_install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(environment for launch processes, install prefix of compactinst_ros) after colcon build."""
    if not ROS_LAUNCH_DIR.is_dir():
        pytest.skip(
            f"the prebuilt launch wheels folder {ROS_LAUNCH_DIR} is absent "
            "(set COMPACTINST_LAUNCH_WHEELS to its path where it lives elsewhere)"
        )
    for module in ("launch", "launch_ros", "osrf_pycommon"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"Python module '{module}' is not installed; {INSTALL_HINT}")
    colcon = Path(sys.executable).with_name("colcon")
    if not colcon.exists():
        pytest.skip("colcon is not installed in this environment (pip install -e '.[dev]')")
    interfaces = built_for_test(COMPOSITION_INTERFACES, request)
    work = tmp_path_factory.mktemp("launch_colcon")
    build = subprocess.run(
        [
            str(colcon),
            "--log-base",
            str(work / "log"),
            "build",
            "--paths",
            str(REPO),
            "--build-base",
            str(work / "build"),
            "--install-base",
            str(work / "install"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=work,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    prefix = work / "install" / "compactinst_ros"
    site = next(prefix.glob("lib/python3*/site-packages"))
    env = interfaces.environment(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join((str(site), env["PYTHONPATH"]))
    env["AMENT_PREFIX_PATH"] = os.pathsep.join((str(prefix), env["AMENT_PREFIX_PATH"]))
    with interfaces.activated(), pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMENT_PREFIX_PATH", str(prefix), prepend=os.pathsep)
        yield env, prefix


def profiles(env: dict[str, str]) -> set[str]:
    """The profiles a node's environment names; the 3.x variable (read here) must be one."""
    assert dds_env.PROFILE_VARIABLES[0] in env, "Fast DDS 3.x reads FASTDDS_DEFAULT_PROFILES_FILE"
    return {env[name] for name in dds_env.PROFILE_VARIABLES if name in env}


def load_launch_module(prefix: Path, name: str) -> ModuleType:
    """The installed launch file ``name`` as a module (to call its functions in this process)."""
    path = prefix / "share" / "compactinst_ros" / "launch" / name
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LaunchProcess:
    """``launch_runner.py`` on a launch file in its own process and ROS domain; log in a file."""

    def __init__(self, env: dict[str, str], domain: int, launch_file: Path, log: Path, **args: Any):
        self.log_path = log
        self.launch_file = launch_file
        env = {**env, "ROS_DOMAIN_ID": str(domain), "PYTHONUNBUFFERED": "1"}
        cmd = [
            sys.executable,
            str(RUNNER),
            str(launch_file),
            *(f"{k}:={v}" for k, v in args.items()),
        ]
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log(self) -> str:
        """Everything the launch and its nodes printed so far."""
        return self.log_path.read_text()

    def node_pids(self, count: int, timeout: float = 60.0) -> list[int]:
        """Process ids of the first ``count`` processes the launch started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [int(p) for p in re.findall(r"process started with pid \[(\d+)\]", self.log())]
            if len(pids) >= count:
                return pids[:count]
            assert self.proc.poll() is None, f"launch ended early:\n{self.log()}"
            time.sleep(0.1)
        raise AssertionError(f"{count} processes did not start within {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> int:
        """Ctrl-C: SIGINT to the launch and its nodes (one process group, as in a terminal).

        A launch that does not end fails the test.
        """
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"launch did not end {timeout} s after SIGINT:\n{self.log()}"
            ) from None


def environ_of(pid: int) -> dict[str, str]:
    """The environment process ``pid`` started with."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def node_parameters(client: Client, node: str, names: list[str]) -> dict[str, Any]:
    """Values of ``names`` on ``node``, through its get_parameters service."""
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python

    service = client.node.create_client(GetParameters, f"{node}/get_parameters")
    assert service.wait_for_service(timeout_sec=60), f"{node}/get_parameters never appeared"
    request = GetParameters.Request(names=names)
    values = call_answered(service, request, 20, f"{node}/get_parameters").values
    return {n: parameter_value_to_python(v) for n, v in zip(names, values, strict=True)}


def call_answered(service: Any, request: Any, timeout: float, what: str) -> Any:
    """The response to an idempotent ``request``, sent again every 2 s until one comes (within
    ``timeout``): the server's reply to a request sent before it has matched our reply reader
    is lost (Fast DDS; once in two runs of Jazzy's Fast DDS 2.14 on a loaded host), as
    compactinst_ros.ros.tool's Session.call knows too."""
    deadline = time.monotonic() + timeout
    while True:
        future = service.call_async(request)
        until_answered(future.done, min(2.0, max(0.0, deadline - time.monotonic())))
        if future.done():
            return future.result()
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for a {what} reply")


def subscribed_topics(client: Client, node: str) -> list[str]:
    """Topics ``node`` (fully qualified) subscribes to."""
    namespace, _, name = node.rpartition("/")
    found = client.node.get_subscriber_names_and_types_by_node(name, namespace or "/")
    return [topic for topic, _ in found]


def until_answered(answered: Callable[[], Any], resend_s: float) -> None:
    """Wait up to ``resend_s`` (the interval of a resend) for ``answered()``, looking often so an
    answer ends the wait at once."""
    end = time.monotonic() + resend_s
    while time.monotonic() < end and not answered():
        time.sleep(0.02)


def mask_for_frame(
    client: Client, image_topic: str, mask_topic: str, height: int, width: int, sec: int
) -> Image:
    """Publish one frame on ``image_topic`` (again until answered); the mask stamped ``sec``."""
    client.subscribe(
        Image, mask_topic, QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    )
    publisher = client.publisher(Image, image_topic)
    client.wait_for(
        lambda: publisher.get_subscription_count() > 0, 60, f"a reader of {image_topic}"
    )
    client.wait_for(lambda: client.matched(mask_topic), 60, f"the publisher of {mask_topic}")
    msg = image_msg(scene(height, width, sec), "bgr8")
    msg.header.stamp.sec = sec

    def answered() -> Image | None:
        return client.stamped(mask_topic, sec)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not answered():
        publisher.publish(msg)
        until_answered(answered, 0.5)
    mask = answered()
    assert mask is not None, f"no {mask_topic} for the frame on {image_topic}"
    return mask


def relayed_camera_info(
    client: Client, infos: Any, image_topic: str, node: str, sec: int
) -> CameraInfo:
    """Publish a 160x120 CameraInfo and a frame stamped ``sec`` (again until answered); the
    node's ``~/camera_info`` for that frame."""
    client.wait_for(infos.get_subscription_count, 60, f"the node's reader of {infos.topic_name}")
    info = CameraInfo(width=160, height=120, k=[float(v) for v in range(1, 10)])
    info.header.stamp.sec = sec
    frame = image_msg(scene(120, 160, sec), "bgr8", sec=sec)
    images = client.publisher(Image, image_topic)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and client.stamped(f"{node}/camera_info", sec) is None:
        infos.publish(info)
        images.publish(frame)
        until_answered(lambda: client.stamped(f"{node}/camera_info", sec), 0.5)
    relayed = client.stamped(f"{node}/camera_info", sec)
    assert relayed is not None, f"no {node}/camera_info for the frame stamped {sec}"
    return relayed


def write_params(path: Path, **values: Any) -> Path:
    """The shipped parameters file with ``values`` changed."""
    data = yaml.safe_load((REPO / "config" / "compactinst.yaml").read_text())
    data["/**"]["ros__parameters"].update(values)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def running(launch_install, tmp_path) -> Iterator[Any]:
    """Factory: start a launch file with arguments; every launch is SIGINTed and must exit 0."""
    launches: list[LaunchProcess] = []

    def start(name: str, domain: int, env: dict[str, str] | None = None, **args: Any):
        base, prefix = launch_install
        launch_file = prefix / "share" / "compactinst_ros" / "launch" / name
        log = tmp_path / f"launch_{len(launches)}.log"
        launch = LaunchProcess(env if env is not None else base, domain, launch_file, log, **args)
        launches.append(launch)
        return launch

    yield start
    for launch in launches:
        code = launch.stop()
        log = launch.log()
        assert code == 0, f"launch exited with {code} after SIGINT:\n{log}"
        started = len(re.findall(r"process started with pid", log))
        assert len(re.findall(r"process has finished cleanly", log)) == started, log
        assert "escalating to" not in log, f"a node ignored SIGINT:\n{log}"


def write_two_cameras(tmp_path: Path, cam_b: dict) -> tuple[Path, Path]:
    """The parameters file (ONNX Runtime, instance masks only) and a cameras file of cam_a on
    /drivers/a/image and cam_b with ``cam_b``'s entries, for the multi-camera launches."""
    params = write_params(
        tmp_path / "mine.yaml", backend="onnxruntime", ort_threads=1, outputs=["instance_mask"]
    )
    cameras = tmp_path / "cameras.yaml"
    entries = [
        {"namespace": "cam_a", "image_topic": "/drivers/a/image"},
        {"namespace": "cam_b", **cam_b},
    ]
    cameras.write_text(yaml.safe_dump({"cameras": entries}))
    return params, cameras


def assert_each_camera_answers_its_frame(client: Client, mask_topic: str, first_sec: int) -> None:
    """Cameras cam_a (on /drivers/a/image) and cam_b each get one frame of their own size and
    stamp; each answers on ``mask_topic`` (formatted with the camera) with that frame only."""
    frames = {
        "cam_a": ("/drivers/a/image", 120, 160, first_sec),
        "cam_b": ("/cam_b/image", 96, 128, first_sec + 1),
    }
    for camera, (topic, height, width, sec) in frames.items():
        mask = mask_for_frame(client, topic, mask_topic.format(camera), height, width, sec)
        assert raster_from_image(mask).shape == (height, width)
    for camera, (_, _, _, sec) in frames.items():
        stamps = {m.header.stamp.sec for m in client.received(mask_topic.format(camera))}
        assert stamps == {sec}, f"{camera} answered frames of another camera: {stamps}"


def test_single_launch_yaml_wins_unless_given_namespace_name_and_site_profile(
    launch_install, running, random_bundle, tmp_path
):
    env, _ = launch_install
    site_profile = tmp_path / "site_fastdds.xml"
    shutil.copy(REPO / "config" / "fastdds_loopback.xml", site_profile)
    env = {k: v for k, v in env.items() if k not in dds_env.PROFILE_VARIABLES}
    env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(site_profile)  # a Humble site's, kept for 3.x too
    params = write_params(
        tmp_path / "mine.yaml",
        image_topic="cam/yaml_image",
        backend="onnxruntime",
        ort_threads=1,
        score_threshold=0.0,
        outputs=["instance_mask"],
    )
    domain = next_domain()
    launch = running(
        "compactinst.launch.py",
        domain,
        env,
        params_file=params,
        model=random_bundle,
        namespace="veh",
        node_name="seg",
        camera_info_topic="/veh/cam/info",
    )
    (pid,) = launch.node_pids(1)
    assert profiles(environ_of(pid)) == {str(site_profile)}, "the site's, read by every Fast DDS"
    client = Client(domain)
    try:
        names = ["image_topic", "backend", "model", "ort_threads", "use_sim_time"]
        assert node_parameters(client, "/veh/seg", [*names, "camera_info_topic"]) == {
            "image_topic": "cam/yaml_image",
            "backend": "onnxruntime",
            "model": str(random_bundle),
            "ort_threads": 1,
            "use_sim_time": False,
            "camera_info_topic": "/veh/cam/info",
        }
        client.subscribe(CameraInfo, "/veh/seg/camera_info")
        infos = client.publisher(CameraInfo, "/veh/cam/info")
        mask = mask_for_frame(client, "/veh/cam/yaml_image", "/veh/seg/instance_mask", 120, 160, 7)
        assert raster_from_image(mask).shape == (120, 160)
        assert "/veh/cam/yaml_image" in subscribed_topics(client, "/veh/seg")
        relayed = relayed_camera_info(client, infos, "/veh/cam/yaml_image", "/veh/seg", 8)
        assert list(relayed.k) == list(range(1, 10)) and relayed.header.frame_id == "camera_bgr8"
    finally:
        client.close()


def test_lifecycle_launch_reaches_active_and_arguments_override_the_yaml(
    launch_install, running, random_bundle, tmp_path
):
    from lifecycle_msgs.msg import State
    from lifecycle_msgs.srv import GetState

    explicit_profile = tmp_path / "explicit_fastdds.xml"
    shutil.copy(REPO / "config" / "fastdds_loopback.xml", explicit_profile)
    params = write_params(
        tmp_path / "mine.yaml",
        image_topic="/yaml/image",
        backend="tensorrt",
        precision="int8",
        ort_threads=1,
        outputs=["instance_mask"],
    )
    domain = next_domain()
    launch = running(
        "compactinst.launch.py",
        domain,
        params_file=params,
        model=random_bundle,
        image_topic="/cli/image",
        backend="onnxruntime",
        precision="fp32",
        use_sim_time="true",
        lifecycle="true",
        fastdds_profile=explicit_profile,
    )
    (pid,) = launch.node_pids(1)
    assert profiles(environ_of(pid)) == {str(explicit_profile)}
    client = Client(domain)
    try:
        get_state = client.node.create_client(GetState, "/compactinst/get_state")
        assert get_state.wait_for_service(timeout_sec=60), launch.log()

        def active() -> bool:
            reply = call_answered(get_state, GetState.Request(), 10, "get_state")
            return reply.current_state.id == State.PRIMARY_STATE_ACTIVE

        client.wait_for(active, 90, f"the lifecycle node to become active:\n{launch.log()}")
        names = ["image_topic", "backend", "precision", "use_sim_time"]
        assert node_parameters(client, "/compactinst", names) == {
            "image_topic": "/cli/image",
            "backend": "onnxruntime",
            "precision": "fp32",
            "use_sim_time": True,
        }
        mask = mask_for_frame(client, "/cli/image", "/compactinst/instance_mask", 96, 128, 5)
        assert raster_from_image(mask).shape == (96, 128)
    finally:
        client.close()


def test_multi_camera_launch_keeps_outputs_apart_and_shares_the_engine_cache(
    launch_install, running, random_bundle, tmp_path
):
    env, prefix = launch_install
    env = {k: v for k, v in env.items() if k not in dds_env.PROFILE_VARIABLES}
    params, cameras = write_two_cameras(tmp_path, {"camera_info_topic": "/drivers/b/info"})
    cache = tmp_path / "engines"
    domain = next_domain()
    launch = running(
        "compactinst_multi.launch.py",
        domain,
        env,
        cameras_file=cameras,
        params_file=params,
        model=random_bundle,
        engine_cache_dir=cache,
    )
    pids = launch.node_pids(2)
    shipped = prefix / "share" / "compactinst_ros" / "config" / "fastdds_shm.xml"
    for pid in pids:
        node_env = environ_of(pid)
        assert profiles(node_env) == {str(shipped)}, "no profile: the shipped vehicle profile"
        assert node_env["COMPACTINST_ENGINE_CACHE"] == str(cache)
    client = Client(domain)
    try:
        cameras_info = (("/cam_a/compactinst", ""), ("/cam_b/compactinst", "/drivers/b/info"))
        for node, info_topic in cameras_info:
            names = ["engine_cache_dir", "model", "camera_info_topic"]
            assert node_parameters(client, node, names) == {
                "engine_cache_dir": str(cache),
                "model": str(random_bundle),
                "camera_info_topic": info_topic,
            }
        assert_each_camera_answers_its_frame(client, "/{}/compactinst/instance_mask", 11)
    finally:
        client.close()


def test_batched_multi_camera_launch_serves_every_camera_from_one_node(
    launch_install, running, random_bundle, tmp_path
):
    env, _ = launch_install
    params, cameras = write_two_cameras(tmp_path, {})
    domain = next_domain()
    launch = running(
        "compactinst_multi.launch.py",
        domain,
        env,
        cameras_file=cameras,
        params_file=params,
        model=random_bundle,
        batched="true",
    )
    (pid,) = launch.node_pids(1)
    client = Client(domain)
    try:
        assert node_parameters(client, "/compactinst", ["image_topics", "camera_names"]) == {
            "image_topics": ["/drivers/a/image", "/cam_b/image"],
            "camera_names": ["cam_a", "cam_b"],
        }
        assert_each_camera_answers_its_frame(client, "/compactinst/{}/instance_mask", 31)
        started = [int(p) for p in re.findall(r"process started with pid \[(\d+)\]", launch.log())]
        assert started == [pid], f"one node process serves both cameras:\n{launch.log()}"
    finally:
        client.close()


def test_multi_camera_list_errors_name_the_problem(launch_install):
    _, prefix = launch_install
    multi = load_launch_module(prefix, "compactinst_multi.launch.py")
    good = multi.parse_cameras("[{namespace: /a/, image_topic: /x}, {namespace: b}]", "arg")
    assert good == [
        {"namespace": "a", "image_topic": "/x", "camera_info_topic": ""},
        {"namespace": "b", "image_topic": "", "camera_info_topic": ""},
    ]
    for text, problem in (
        ("[]", "non-empty list"),
        ("[{image_topic: /x}]", "has no namespace"),
        ("[{namespace: a}, {namespace: /a}]", "used twice"),
        ("[{namespace: a, topic: /x}]", "unknown keys ['topic']"),
        ("[front]", "each camera is a mapping"),
    ):
        with pytest.raises(ValueError, match=re.escape(problem)):
            multi.parse_cameras(text, "arg")
    single = load_launch_module(prefix, "compactinst.launch.py")
    assert single.parse_bool("True", "lifecycle") is True
    with pytest.raises(ValueError, match="lifecycle:='yes' is not a boolean; use true or false"):
        single.parse_bool("yes", "lifecycle")


def test_multi_camera_launch_builds_tensorrt_engines_once_before_the_nodes(
    launch_install, tmp_path
):
    from launch.actions import ExecuteProcess, GroupAction, RegisterEventHandler

    from launch import LaunchContext

    _, prefix = launch_install
    multi = load_launch_module(prefix, "compactinst_multi.launch.py")
    context = LaunchContext()
    params = write_params(tmp_path / "mine.yaml", backend="tensorrt", gpu_device=1)
    context.launch_configurations.update(
        {name: default for name, default, _ in multi.SHARED_ARGUMENTS}
        | {
            "cameras": "[{namespace: a}, {namespace: b}, {namespace: c}]",
            "cameras_file": "",
            "params_file": str(params),
            "engine_cache_dir": str(tmp_path / "engines"),
            "batched": "false",
        }
    )
    actions = multi.camera_actions(context)
    builds = [a for a in actions if isinstance(a, ExecuteProcess)]
    assert len(builds) == 1, "one engine build for all cameras"
    default_model = prefix / "share" / "compactinst_ros" / "models" / "default"
    command = " ".join("".join(s.perform(context) for s in part) for part in builds[0].cmd)
    assert command == (
        f"compactinst build-engine {default_model} --cache-dir {tmp_path / 'engines'} --device 1"
    )
    write_params(params, backend="tensorrt", gpu_device=1, precision="fp32")
    built = next(a for a in multi.camera_actions(context) if isinstance(a, ExecuteProcess))
    command = " ".join("".join(s.perform(context) for s in part) for part in built.cmd)
    assert command.endswith("--device 1 --precision fp32"), "the nodes' precision is built"
    assert not any(isinstance(a, GroupAction) for a in actions), "the nodes wait for the build"
    assert sum(isinstance(a, RegisterEventHandler) for a in actions) == 1


def test_batched_multi_camera_launch_gives_one_node_the_camera_list(launch_install, tmp_path):
    from launch.actions import GroupAction, IncludeLaunchDescription
    from launch.utilities import normalize_to_list_of_substitutions, perform_substitutions

    from launch import LaunchContext

    _, prefix = launch_install
    multi = load_launch_module(prefix, "compactinst_multi.launch.py")
    params = write_params(tmp_path / "mine.yaml", backend="onnxruntime", image_topic="img")
    context = LaunchContext()
    context.launch_configurations.update(
        {name: default for name, default, _ in multi.SHARED_ARGUMENTS}
        | {
            "cameras": "[{namespace: a, image_topic: /drv/a}, {namespace: b, "
            "camera_info_topic: info}, {namespace: c}]",
            "cameras_file": "",
            "params_file": str(params),
            "engine_cache_dir": str(tmp_path / "engines"),
            "batched": "True",
        }
    )
    groups = [a for a in multi.camera_actions(context) if isinstance(a, GroupAction)]
    assert len(groups) == 1, "one node for every camera"
    entities = groups[0].get_sub_entities()
    (include,) = [a for a in entities if isinstance(a, IncludeLaunchDescription)]
    arguments = {
        perform_substitutions(context, normalize_to_list_of_substitutions(key)): (
            perform_substitutions(context, normalize_to_list_of_substitutions(value))
        )
        for key, value in include.launch_arguments
    }
    assert "namespace" not in arguments and "image_topic" not in arguments
    generated = Path(arguments["params_file"])
    expected = yaml.safe_load(params.read_text())
    for single in ("image_topic", "camera_info_topic"):  # the lists replace them
        del expected["/**"]["ros__parameters"][single]
    expected["/**"]["ros__parameters"].update(
        image_topics=["/drv/a", "/b/img", "/c/img"],
        camera_names=["a", "b", "c"],
        camera_info_topics=["", "/b/info", ""],
    )
    assert yaml.safe_load(generated.read_text()) == expected, "the file plus the camera list"
    generated.unlink()
    context.launch_configurations["batched"] = "yes"
    with pytest.raises(ValueError, match="batched:='yes' is not a boolean"):
        multi.camera_actions(context)
