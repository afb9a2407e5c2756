"""Launch one compactinst node (plain or lifecycle) with its parameters file, and rviz2 on request.

ros2 launch compactinst_ros compactinst.launch.py image_topic:=/camera/image_raw rviz:=true
ros2 launch compactinst_ros compactinst.launch.py namespace:=front lifecycle:=true

The parameters file is the base; an argument left out leaves the file's value alone, so a
``params_file`` of your own wins unless the command line says otherwise. FastDDS is pointed at
the shipped shared-memory profile (the vehicle profile, config/fastdds_shm.xml) only when the
environment names no profile, or when ``fastdds_profile`` is given. The profile is set under the
variable names the distribution reads (compactinst_ros.dds_env: FASTDDS_DEFAULT_PROFILES_FILE
always, FASTRTPS_DEFAULT_PROFILES_FILE too on Humble and Jazzy, whose Fast DDS 2.x reads only
that), and a site's profile under either name is kept.

rviz2 gets a view generated from rviz/compactinst.rviz for this node: its namespace and name,
its input topic and the camera's ``frame_id`` as the fixed frame.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
)
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

from launch import LaunchContext, LaunchDescription

PACKAGE = "compactinst_ros"
#: node parameters a launch argument of the same name overrides when given, and their types
PARAMETER_ARGUMENTS = {
    "model": str,
    "image_topic": str,
    "backend": str,
    "precision": str,
    "engine_cache_dir": str,
    "use_sim_time": bool,
    "camera_info_topic": str,
}


def rviz_actions(context: LaunchContext) -> list:
    """rviz2 on the view of the launched node (rviz:=true), else nothing."""
    if not parse_bool(LaunchConfiguration("rviz").perform(context), "rviz"):
        return []
    from compactinst_ros.ros.rviz_config import params_file_value, write_rviz_config

    given = context.launch_configurations
    share = get_package_share_directory(PACKAGE)
    image_topic = given.get("image_topic", "") or params_file_value(
        LaunchConfiguration("params_file").perform(context), "image_topic", "image"
    )
    config = write_rviz_config(
        os.path.join(share, "rviz", "compactinst.rviz"),
        namespace=given.get("namespace", "") or "/",
        node_name=given.get("node_name", "") or "compactinst",
        image_topic=image_topic,
        frame_id=LaunchConfiguration("frame_id").perform(context),
    )
    return [Node(package="rviz2", executable="rviz2", name="rviz2", arguments=["-d", str(config)])]


def declared_arguments(share: str) -> list:
    """Every launch argument; a default of "" means "not given": the parameters file decides."""
    params_file = os.path.join(share, "config", "compactinst.yaml")
    return [
        DeclareLaunchArgument(name, default_value=default, description=description)
        for name, default, description in (
            (
                "model",
                "",
                "model bundle folder (default: the parameters file's, else models/default)",
            ),
            ("image_topic", "", "input sensor_msgs/Image topic (default: the parameters file's)"),
            (
                "backend",
                "",
                "auto | tensorrt | onnxruntime | openvino (default: the parameters file's)",
            ),
            (
                "precision",
                "",
                "auto | fp32 | fp16 | int8: the graphs the backend runs "
                "(default: the parameters file's)",
            ),
            (
                "engine_cache_dir",
                "",
                "TensorRT engine cache folder (default: the parameters file's)",
            ),
            ("use_sim_time", "", "true | false: follow /clock (default: the parameters file's)"),
            (
                "camera_info_topic",
                "",
                "the camera's sensor_msgs/CameraInfo topic: re-published per frame on "
                "~/camera_info (default: the parameters file's)",
            ),
            ("namespace", "", "ROS namespace of the node"),
            ("node_name", "compactinst", "name of the node"),
            ("lifecycle", "false", "true: start compactinst_lifecycle_node and drive it to active"),
            ("params_file", params_file, "node parameters (YAML)"),
            (
                "fastdds_profile",
                "",
                "Fast DDS profile to set (under the names the distribution reads); default: "
                "keep the environment's, under either name, else the shipped 32 MB "
                "shared-memory profile (large best-effort images)",
            ),
            ("rviz", "false", "start rviz2 on a view of this node made from rviz/compactinst.rviz"),
            ("frame_id", "camera", "rviz2 fixed frame: the camera images' header frame_id"),
        )
    ]


def parse_bool(text: str, argument: str) -> bool:
    """``true``/``false`` (or 1/0, any case) of launch argument ``argument``, else ValueError."""
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise ValueError(f"launch argument {argument}:={text!r} is not a boolean; use true or false")


def fastdds_action(context: LaunchContext, share: str) -> list:
    """Set the Fast DDS profile (the variable names the distribution reads) when asked; else keep
    a site's, under either name, and use the shipped vehicle profile only where there is none."""
    from compactinst_ros.dds_env import kept_profile_settings, profile_settings

    asked = LaunchConfiguration("fastdds_profile").perform(context)
    shipped = os.path.join(share, "config", "fastdds_shm.xml")
    settings = (
        profile_settings(context.environment, asked)
        if asked
        else kept_profile_settings(context.environment, shipped)
    )
    return [SetEnvironmentVariable(name, value) for name, value in settings.items()]


def node_actions(context: LaunchContext) -> list:
    """The node (plain, or lifecycle plus its configure/activate events) and the FastDDS setting."""
    share = get_package_share_directory(PACKAGE)

    def given(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    if given("use_sim_time"):
        parse_bool(given("use_sim_time"), "use_sim_time")
    overrides = {
        name: ParameterValue(LaunchConfiguration(name), value_type=kind)
        for name, kind in PARAMETER_ARGUMENTS.items()
        if given(name)
    }
    node_args = dict(
        package=PACKAGE,
        name=given("node_name"),
        namespace=given("namespace"),
        output="screen",
        parameters=[LaunchConfiguration("params_file"), overrides],
    )
    actions = fastdds_action(context, share)
    if not parse_bool(given("lifecycle"), "lifecycle"):
        return [*actions, Node(executable="compactinst_node", **node_args)]
    node = LifecycleNode(executable="compactinst_lifecycle_node", **node_args)
    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(node),
            transition_id=Transition.TRANSITION_CONFIGURE,
        )
    )
    activate_when_inactive = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",
            goal_state="inactive",
            entities=[
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=matches_action(node),
                        transition_id=Transition.TRANSITION_ACTIVATE,
                    )
                )
            ],
        )
    )
    return [*actions, activate_when_inactive, node, configure]


def generate_launch_description() -> LaunchDescription:
    """The arguments, the node (built once they are known) and an optional rviz2."""
    share = get_package_share_directory(PACKAGE)
    return LaunchDescription(
        [
            *declared_arguments(share),
            OpaqueFunction(function=node_actions),
            OpaqueFunction(function=rviz_actions),
        ]
    )
