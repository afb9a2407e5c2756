"""Instances in 3-D: each instance mask lifted with a registered depth image or a LiDAR cloud.

numpy (OpenCV for the mask erosion, numba for the cloud's pass over its points where the
``fast`` extra is installed); no ROS. ``lift`` holds the per-instance robust
depth, centroid and extent; ``cloud`` turns PointCloud2 fields into points and projects them.
"""

from .lift import (
    Instances3D,
    Intrinsics,
    LiftOptions,
    erode_labels,
    interior,
    labels_on_grid,
    lift_cloud,
    lift_depth,
    lift_points,
    prepare_cloud_lifting,
)

__all__ = [
    "Instances3D",
    "Intrinsics",
    "LiftOptions",
    "erode_labels",
    "interior",
    "labels_on_grid",
    "lift_cloud",
    "lift_depth",
    "lift_points",
    "prepare_cloud_lifting",
]
