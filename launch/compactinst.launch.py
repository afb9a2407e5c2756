"""Launch compactinst_node with the shipped FastDDS shared-memory profile (and rviz2 on request).

ros2 launch compactinst_ros compactinst.launch.py image_topic:=/camera/image_raw rviz:=true
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription


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
                "rviz", default_value="false", description="start rviz2 with rviz/compactinst.rviz"
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
            Node(
                package="rviz2",
                executable="rviz2",
                name="rviz2",
                arguments=["-d", os.path.join(share, "rviz", "compactinst.rviz")],
                condition=IfCondition(LaunchConfiguration("rviz")),
            ),
        ]
    )
