"""Oriented boxes from the inliers' covariance (spatial/boxes.py): a car's points turned on the
ground give a box turned with it, its sides the car's, in a body frame (z up) and in the camera's
optical frame (y down) alike."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.spatial.boxes import BODY_UP, OPTICAL_UP, oriented_boxes
from compactinst_ros.spatial.lift import LiftOptions, lift_points


def car(yaw: float, rng: np.random.Generator) -> np.ndarray:
    """Points filling a 4.0 x 1.8 x 1.5 m box 10 m ahead, turned by ``yaw`` about z (body)."""
    local = rng.uniform([-2.0, -0.9, 0.0], [2.0, 0.9, 1.5], (20000, 3))
    c, s = np.cos(yaw), np.sin(yaw)
    turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return local @ turn.T + [10.0, 0.0, 0.0]


@pytest.mark.parametrize("yaw", [0.0, 0.5, -1.2, 1.5])
def test_a_turned_car_gets_a_box_turned_with_it_and_its_sides(yaw):
    rng = np.random.default_rng(0)
    points = car(yaw, rng)
    cov = np.cov(points.T, bias=True)[None]
    rotations, sizes = oriented_boxes(cov, BODY_UP)
    major = rotations[0][:, 0]
    assert abs(abs(np.dot(major, [np.cos(yaw), np.sin(yaw), 0.0])) - 1) < 1e-3
    np.testing.assert_allclose(rotations[0][:, 2], [0, 0, 1])
    assert np.linalg.det(rotations[0]) == pytest.approx(1.0)
    np.testing.assert_allclose(sizes[0], [4.0, 1.8, 1.5], rtol=0.02)

    # the same car seen by a level camera (optical: x right, y down, z forward), lifted
    body_to_optical = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
    optical = (points @ body_to_optical.T).astype(np.float32)
    lifted = lift_points(np.ones(len(optical), np.uint16), optical, np.array([1], np.uint16),
                         LiftOptions(band_m=5.0))  # fmt: skip
    rotations, sizes = oriented_boxes(lifted.covariance, OPTICAL_UP)
    np.testing.assert_allclose(rotations[0][:, 2], OPTICAL_UP)
    np.testing.assert_allclose(sizes[0], [4.0, 1.8, 1.5], rtol=0.02)


def test_no_covariance_gives_no_box():
    rotations, sizes = oriented_boxes(np.full((2, 3, 3), np.nan), BODY_UP)
    assert np.isnan(rotations).all() and np.isnan(sizes).all()
