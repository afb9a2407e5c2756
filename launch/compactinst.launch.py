"""Launch compactinst_node with the shipped FastDDS shared-memory profile (and rviz2 on request).

ros2 launch compactinst_ros compactinst.launch.py image_topic:=/camera/image_raw rviz:=true

rviz2 gets a view generated from rviz/compactinst.rviz for this node: its namespace and name,
its input topic and the camera's ``frame_id`` as the fixed frame.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchContext, LaunchDescription


def rviz_actions(context: LaunchContext) -> list:
    """rviz2 on the view of the launched node (rviz:=true), else nothing."""
    if LaunchConfiguration("rviz").perform(context).strip().lower() not in ("true", "1"):
        return []
    from compactinst_ros.ros.rviz_config import params_file_value, write_rviz_config

    given = context.launch_configurations
    share = get_package_share_directory("compactinst_ros")
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


def generate_launch_description():
    """Node, its parameters file, the FastDDS profile and an optional rviz2."""
    share = get_package_share_directory("compactinst_ros")
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "model", default_value="", description="model bundle folder ('' = models/default)"
            ),
            DeclareLaunchArgument(
                "image_topic", default_value="image", description="input sensor_msgs/Image topic"
            ),
            DeclareLaunchArgument(
                "backend",
                default_value="auto",
                description="inference backend: auto | tensorrt | onnxruntime",
            ),
            DeclareLaunchArgument(
                "params_file",
                default_value=os.path.join(share, "config", "compactinst.yaml"),
                description="node parameters (YAML)",
            ),
            DeclareLaunchArgument(
                "fastdds_profile",
                default_value=os.path.join(share, "config", "fastdds_shm.xml"),
                description="FastDDS profile (32 MB shared memory: large best-effort images)",
            ),
            DeclareLaunchArgument(
                "rviz",
                default_value="false",
                description="start rviz2 on a view of this node made from rviz/compactinst.rviz",
            ),
            DeclareLaunchArgument(
                "frame_id",
                default_value="camera",
                description="rviz2 fixed frame: the camera images' header frame_id",
            ),
            SetEnvironmentVariable(
                "FASTDDS_DEFAULT_PROFILES_FILE", LaunchConfiguration("fastdds_profile")
            ),
            Node(
                package="compactinst_ros",
                executable="compactinst_node",
                name="compactinst",
                output="screen",
                parameters=[
                    LaunchConfiguration("params_file"),
                    {
                        "model": LaunchConfiguration("model"),
                        "image_topic": LaunchConfiguration("image_topic"),
                        "backend": LaunchConfiguration("backend"),
                    },
                ],
            ),
            OpaqueFunction(function=rviz_actions),
        ]
    )
