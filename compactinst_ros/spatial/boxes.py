"""Oriented 3-D boxes of lifted instances, from their inliers' covariance.

A box stands on the ground: one axis is the frame's up, the other two are the principal axes of
the inliers' spread on the ground plane (PCA of the 2x2 horizontal block of the covariance), so
a car seen at an angle gets a box turned with it, not one aligned with the camera. Each side is
``sqrt(12) x`` the inliers' standard deviation along its axis: the width of a uniform spread with
that variance (a board of width w has variance w^2 / 12), robust to the few outliers that would
stretch a min/max box. Up is the frame's z for ROS body and world frames (REP 103: base_link,
map) and -y for a camera's optical frame (y down).
"""

from __future__ import annotations

import numpy as np

#: a uniform spread of width w has standard deviation w / sqrt(12)
WIDTH_PER_SIGMA = float(np.sqrt(12.0))
#: the up direction of the camera's optical frame (x right, y down, z forward) and of REP 103
OPTICAL_UP = np.array([0.0, -1.0, 0.0])
BODY_UP = np.array([0.0, 0.0, 1.0])


def oriented_boxes(covariance: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rotations (N, 3, 3), sizes (N, 3)) of the boxes of instances with ``covariance``
    (N, 3, 3) in a frame whose up is the unit vector ``up``: each rotation's columns are the box
    axes in the frame (the major and minor ground axes, then up; right-handed), each size the
    box's extent along them. NaN rows for NaN covariances."""
    n = len(covariance)
    up = np.asarray(up, np.float64) / np.linalg.norm(up)
    # two ground axes of the frame: any unit vector across up, and up x it
    seed = np.array([1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
    g1 = seed - up * (seed @ up)
    g1 /= np.linalg.norm(g1)
    g2 = np.cross(up, g1)
    ground = np.stack([g1, g2], 1)  # (3, 2)
    cov = covariance.astype(np.float64)
    valid = np.isfinite(cov).all(axis=(1, 2))
    rotations = np.full((n, 3, 3), np.nan)
    sizes = np.full((n, 3), np.nan)
    if not valid.any():
        return rotations, sizes
    flat = ground.T @ cov[valid] @ ground  # (k, 2, 2) spread on the ground plane
    _, vectors = np.linalg.eigh(flat)  # ascending eigenvalues: column 1 is the major axis
    major = vectors[:, :, 1] @ ground.T  # (k, 3)
    minor = np.cross(up, major)  # right-handed with up
    axes = np.stack([major, minor, np.broadcast_to(up, major.shape)], 2)  # columns
    rotations[valid] = axes
    variance = np.einsum("kai,kab,kbi->ki", axes, cov[valid], axes)
    sizes[valid] = WIDTH_PER_SIGMA * np.sqrt(np.maximum(variance, 0.0))
    return rotations, sizes
