"""Hungarian matching of query predictions to ground-truth objects (architecture.md 7.1, 7.3).

Cost per (query, object) = 2 * (-p(class)) + 5 * point-sampled BCE + 5 * point-sampled dice
+ 1000 * (-[the query's seed pixel lies inside the object]); the proposal matcher uses only the
class and location terms on the 1/16 proposal grid. Costs are computed in fp32 without gradient
and solved with ``scipy.optimize.linear_sum_assignment``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment

Indices = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class TermWeights:
    """Weights of the class, mask-BCE and dice terms: FastInst uses the same three as matching
    costs and as loss weights, so the matcher and the criterion share one record."""

    ce: float = 2.0
    mask: float = 5.0
    dice: float = 5.0


def point_sample(inputs: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """Bilinear samples of (N, C, H, W) maps at (N, P, 2) normalised (x, y) in [0, 1] -> (N, C, P).

    align_corners=False and zero padding outside, as detectron2's ``point_sample``.
    """
    grid = (2.0 * coords - 1.0).unsqueeze(2)  # (N, P, 1, 2)
    return F.grid_sample(inputs, grid, mode="bilinear", align_corners=False).squeeze(3)


def batch_dice_cost(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Dice cost (Q, P) x (G, P) -> (Q, G), +1 smoothing in numerator and denominator."""
    probs = logits.sigmoid()
    numerator = 2 * probs @ targets.T
    denominator = probs.sum(-1)[:, None] + targets.sum(-1)[None, :]
    return 1 - (numerator + 1) / (denominator + 1)


def batch_bce_cost(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean sigmoid BCE over points for every pair: (Q, P) x (G, P) -> (Q, G)."""
    pos = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits), reduction="none")
    neg = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits), reduction="none")
    return (pos @ targets.T + neg @ (1 - targets).T) / logits.shape[1]


class HungarianMatcher:
    """One-to-one assignment of queries to objects per image (FastInst's matcher)."""

    def __init__(
        self,
        weights: TermWeights | None = None,
        cost_location: float = 1000.0,
        num_points: int = 12544,
    ) -> None:
        self.weights = weights or TermWeights()
        self.cost_location = cost_location
        self.num_points = num_points

    @torch.no_grad()
    def cost_matrix(self, outputs: dict, targets: list[dict], b: int) -> torch.Tensor:
        """The (Q, G) cost matrix of image ``b`` (fp32, on the outputs' device)."""
        logits = outputs["pred_logits"][b].float()
        pred = outputs["pred_masks"][b].float()  # (Q, h, w)
        tgt = targets[b]["masks"].to(pred)  # (G, H, W)
        labels = targets[b]["labels"]
        q, g = logits.shape[0], tgt.shape[0]
        if g == 0:
            return torch.zeros(q, 0, device=pred.device)
        cost = -self.weights.ce * logits.softmax(-1)[:, labels]
        coords = torch.rand(1, self.num_points, 2, device=pred.device)
        tgt_pts = point_sample(tgt[None], coords)[0]  # (G, P)
        pred_pts = point_sample(pred[None], coords)[0]  # (Q, P)
        cost = cost + self.weights.mask * batch_bce_cost(pred_pts, tgt_pts)
        cost = cost + self.weights.dice * batch_dice_cost(pred_pts, tgt_pts)
        locations = outputs.get("query_locations")
        if locations is not None and self.cost_location:
            inside = point_sample(tgt[None], locations[b].float()[None])[0] > 0  # (G, Q)
            cost = cost - self.cost_location * inside.T.float()
        return cost

    @torch.no_grad()
    def __call__(self, outputs: dict, targets: list[dict]) -> Indices:
        """Per image: (query indices, object indices), object-count long."""
        indices = []
        for b in range(outputs["pred_logits"].shape[0]):
            cost = self.cost_matrix(outputs, targets, b).cpu()
            rows, cols = linear_sum_assignment(cost.numpy())
            indices.append(
                (torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64))
            )
        return indices

    @torch.no_grad()
    def match_proposals(self, proposal_logits: torch.Tensor, targets: list[dict]) -> Indices:
        """Each object claims one 1/16 proposal pixel: class cost + location cost (7.3)."""
        _, _, h, w = proposal_logits.shape
        indices = []
        for b, target in enumerate(targets):
            probs = proposal_logits[b].float().flatten(1).T.softmax(-1)  # (hw, K+1)
            tgt = target["masks"].to(probs)
            if tgt.shape[0] == 0:
                empty = torch.zeros(0, dtype=torch.int64)
                indices.append((empty, empty))
                continue
            inside = (F.adaptive_avg_pool2d(tgt[None], (h, w))[0] > 0).flatten(1).T.float()
            cost = -self.weights.ce * probs[:, target["labels"]] - self.cost_location * inside
            rows, cols = linear_sum_assignment(cost.cpu().numpy())
            indices.append(
                (torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64))
            )
        return indices
