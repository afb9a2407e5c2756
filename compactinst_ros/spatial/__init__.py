"""Instances in 3-D: each instance mask lifted with a registered depth image or a LiDAR cloud.

numpy (OpenCV for the mask erosion; numba, where the ``fast`` extra is installed, compiles the
passes over the depth window and over a cloud's points); no ROS. ``lift`` holds the
per-instance robust depth, centroid and extent; ``cloud`` turns PointCloud2 fields into points
and projects them.
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
    prepare_lifting,
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
    "prepare_lifting",
]
