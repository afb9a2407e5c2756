"""Matching and losses on constructed cases with a known answer."""

from __future__ import annotations

import torch

from compactinst_ros.train.criterion import SetCriterion
from compactinst_ros.train.matcher import HungarianMatcher


def _case():
    """3 queries, 2 objects: query 2 predicts object 0 (left, class 1), query 0 predicts
    object 1 (right, class 0); query 1 predicts nothing."""
    masks = torch.zeros(2, 32, 32, dtype=torch.bool)
    masks[0, :, :12] = True
    masks[1, :, 20:] = True
    targets = [{"labels": torch.tensor([1, 0]), "masks": masks}]
    pred = torch.full((1, 3, 8, 8), -8.0)
    pred[0, 2, :, :3] = 8.0
    pred[0, 0, :, 5:] = 8.0
    logits = torch.full((1, 3, 3), -4.0)
    logits[0, 2, 1] = 4.0
    logits[0, 0, 0] = 4.0
    logits[0, 1, 2] = 4.0
    return {"pred_logits": logits, "pred_masks": pred}, targets


def test_known_assignment():
    outputs, targets = _case()
    ((rows, cols),) = HungarianMatcher(num_points=2000)(outputs, targets)
    assert dict(zip(rows.tolist(), cols.tolist(), strict=True)) == {0: 1, 2: 0}


def test_location_cost_dominates():
    outputs, targets = _case()
    # Swap the seeds: query 0's seed lies in object 0, query 2's in object 1; the 1000-weight
    # location cost overrides the (perfect) mask and class evidence.
    outputs["query_locations"] = torch.tensor([[[0.2, 0.5], [0.5, 0.5], [0.8, 0.5]]])
    ((rows, cols),) = HungarianMatcher(num_points=2000)(outputs, targets)
    assert dict(zip(rows.tolist(), cols.tolist(), strict=True)) == {0: 0, 2: 1}


def test_proposal_matching_picks_pixels_inside():
    targets = _case()[1]
    logits = torch.zeros(1, 3, 4, 4)
    ((rows, cols),) = HungarianMatcher().match_proposals(logits, targets)
    for pixel, obj in zip(rows.tolist(), cols.tolist(), strict=True):
        x = pixel % 4
        assert (x < 2) == (obj == 0)  # 1/16 grid: object 0 covers columns 0..1.5


def test_perfect_prediction_has_lower_loss():
    outputs, targets = _case()
    criterion = SetCriterion(2, num_points=1000)
    good = criterion(outputs, targets)
    bad = criterion(
        {"pred_logits": -outputs["pred_logits"], "pred_masks": -outputs["pred_masks"]}, targets
    )
    assert good["loss"] < 0.2 * bad["loss"]
    assert set(good) == {"loss_ce", "loss_mask", "loss_dice", "loss"}
