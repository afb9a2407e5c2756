"""FastInst's set criterion (architecture.md 7.2-7.4): class CE, point-sampled mask BCE and dice,
the proposal loss, deep supervision and the GT-mask-guided stream.

Total = sum over supervised output sets of [2 CE + 5 BCE + 5 dice] + 20 proposal CE. Mask losses
are normalised by the number of ground-truth objects per process (averaged over the
distributed world, as FastInst does).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .matcher import HungarianMatcher, Indices, TermWeights, point_sample


def uncertain_point_coords(
    logits: torch.Tensor, num_points: int, oversample_ratio: float, importance_ratio: float
) -> torch.Tensor:
    """PointRend importance sampling on (N, 1, h, w) logits -> (N, num_points, 2) in [0, 1].

    Oversample ``oversample_ratio`` x random points, keep the ``importance_ratio`` share with the
    smallest |logit|, fill the rest with uniform random points.
    """
    n = logits.shape[0]
    sampled = int(num_points * oversample_ratio)
    coords = torch.rand(n, sampled, 2, device=logits.device)
    uncertainty = -point_sample(logits, coords)[:, 0].abs()  # (N, S)
    n_uncertain = int(importance_ratio * num_points)
    idx = uncertainty.topk(n_uncertain, dim=1).indices
    picked = torch.gather(coords, 1, idx[..., None].expand(-1, -1, 2))
    rest = torch.rand(n, num_points - n_uncertain, 2, device=logits.device)
    return torch.cat([picked, rest], dim=1)


class SetCriterion(nn.Module):
    """Losses for a model's training-mode outputs (see docs/CONTRACTS.md)."""

    def __init__(
        self,
        num_classes: int,
        matcher: HungarianMatcher | None = None,
        weights: TermWeights | None = None,
        proposal_weight: float = 20.0,
        no_object_weight: float = 0.1,
        num_points: int = 12544,
        oversample_ratio: float = 3.0,
        importance_sample_ratio: float = 0.75,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.weights = weights or TermWeights()
        self.matcher = matcher or HungarianMatcher(self.weights, num_points=num_points)
        self.proposal_weight = proposal_weight
        self.num_points = num_points
        self.oversample_ratio = oversample_ratio
        self.importance_sample_ratio = importance_sample_ratio
        empty = torch.ones(num_classes + 1)
        empty[-1] = no_object_weight
        self.register_buffer("empty_weight", empty)

    @staticmethod
    def _src_idx(indices: Indices) -> tuple[torch.Tensor, torch.Tensor]:
        batch = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        return batch, torch.cat([src for src, _ in indices])

    def loss_labels(self, outputs: dict, targets: list[dict], indices: Indices) -> torch.Tensor:
        """Cross-entropy over K+1 classes; unmatched queries are no-object (weight 0.1)."""
        logits = outputs["pred_logits"].float()
        target_classes = torch.full(
            logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device
        )
        batch, src = self._src_idx(indices)
        matched = [t["labels"][j] for t, (_, j) in zip(targets, indices, strict=True)]
        target_classes[batch, src] = torch.cat(matched).to(logits.device)
        return F.cross_entropy(logits.transpose(1, 2), target_classes, self.empty_weight)

    def loss_masks(
        self, outputs: dict, targets: list[dict], indices: Indices, num_masks: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Point-sampled sigmoid BCE and dice over matched masks, divided by ``num_masks``."""
        pred = outputs["pred_masks"]
        batch, src = self._src_idx(indices)
        src_masks = pred[batch, src].float()[:, None]  # (M, 1, h, w)
        if src_masks.shape[0] == 0:
            zero = pred.sum() * 0.0
            return zero, zero
        tgt_masks = torch.cat(
            [t["masks"][j] for t, (_, j) in zip(targets, indices, strict=True)]
        ).to(src_masks)[:, None]  # (M, 1, H, W)
        with torch.no_grad():
            coords = uncertain_point_coords(
                src_masks, self.num_points, self.oversample_ratio, self.importance_sample_ratio
            )
            labels = point_sample(tgt_masks, coords)[:, 0]
        logits = point_sample(src_masks, coords)[:, 0]  # (M, P)
        bce = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(1)
        probs = logits.sigmoid()
        dice = 1 - (2 * (probs * labels).sum(-1) + 1) / (probs.sum(-1) + labels.sum(-1) + 1)
        return bce.sum() / num_masks, dice.sum() / num_masks

    def loss_proposals(self, proposal_logits: torch.Tensor, targets: list[dict]) -> torch.Tensor:
        """Plain CE on the 1/16 proposal grid: each object's matched pixel gets its class."""
        indices = self.matcher.match_proposals(proposal_logits, targets)
        logits = proposal_logits.float().flatten(2)  # (B, K+1, hw)
        target_classes = torch.full(
            (logits.shape[0], logits.shape[2]),
            self.num_classes,
            dtype=torch.int64,
            device=logits.device,
        )
        batch, src = self._src_idx(indices)
        matched = [t["labels"][j] for t, (_, j) in zip(targets, indices, strict=True)]
        target_classes[batch, src] = torch.cat(matched).to(logits.device)
        return F.cross_entropy(logits, target_classes)

    def _num_masks(self, targets: list[dict], device: torch.device) -> float:
        count = torch.tensor([float(sum(len(t["labels"]) for t in targets))], device=device)
        world = 1
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(count)
            world = dist.get_world_size()
        return max(count.item() / world, 1.0)

    def _set_losses(
        self, outputs: dict, targets: list[dict], indices: Indices, num_masks: float
    ) -> dict[str, torch.Tensor]:
        bce, dice = self.loss_masks(outputs, targets, indices, num_masks)
        return {"ce": self.loss_labels(outputs, targets, indices), "mask": bce, "dice": dice}

    def forward(self, outputs: dict, targets: list[dict]) -> dict[str, torch.Tensor]:
        """Weighted loss terms by name plus ``loss`` (their sum) for one batch.

        Output sets: the main one, each of ``aux_outputs`` (matched independently unless it
        carries ``pred_matching_indices``, as the GT-guided sets do), ``guided_outputs`` (matched
        with the main output's indices) and the proposal logits.
        """
        targets = [{"labels": t["labels"], "masks": t["masks"]} for t in targets]
        device = outputs["pred_logits"].device
        num_masks = self._num_masks(targets, device)
        main_indices = (
            outputs.get("pred_matching_indices")
            or outputs.get("final_matching_indices")
            or self.matcher(outputs, targets)
        )
        sets: list[tuple[str, dict, Indices]] = [("", outputs, main_indices)]
        for i, aux in enumerate(outputs.get("aux_outputs", [])):
            aux = {"query_locations": outputs.get("query_locations"), **aux}
            idx = aux.get("pred_matching_indices") or self.matcher(aux, targets)
            sets.append((f"_{i}", aux, idx))
        for i, guided in enumerate(outputs.get("guided_outputs", [])):
            sets.append(
                (f"_guided{i}", guided, guided.get("pred_matching_indices") or main_indices)
            )
        losses: dict[str, torch.Tensor] = {}
        for suffix, out, idx in sets:
            for name, value in self._set_losses(out, targets, idx, num_masks).items():
                losses[f"loss_{name}{suffix}"] = getattr(self.weights, name) * value
        if outputs.get("proposal_cls_logits") is not None:
            losses["loss_proposal"] = self.proposal_weight * self.loss_proposals(
                outputs["proposal_cls_logits"], targets
            )
        losses["loss"] = torch.stack(list(losses.values())).sum()
        return losses
