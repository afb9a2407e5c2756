"""Instance-activation-guided query proposal (FastInst ``QueryProposal``), export-friendly.

The one-hot of the foreground arg-max is an equality test against ``arange`` (no ``one_hot``),
the local-maximum test a 3x3 max-pool, and the selection a ``topk`` with a fixed k.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class QueryProposal(nn.Module):
    """Auxiliary classifier on E4; its top-k peak pixels become the initial queries."""

    def __init__(self, dim: int, num_queries: int, num_classes: int) -> None:
        super().__init__()
        self.topk = num_queries
        self.num_classes = num_classes
        self.conv = nn.Conv2d(dim, dim, 3, padding=1)
        self.conv_cls = nn.Conv2d(dim, num_classes + 1, 1)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """E4 (B, D, h, w), pos (1, D, h, w) -> query features (B, Q, D), query pos (B, Q, D),
        ``proposal_cls_logits`` (B, K+1, h, w) and top-k flat indices (B, Q)."""
        logits = self.conv_cls(F.relu(self.conv(x)))
        probs = logits.softmax(dim=1)[:, : self.num_classes]  # b, K, h, w (background dropped)
        best = probs.argmax(dim=1, keepdim=True)  # b, 1, h, w
        classes = torch.arange(self.num_classes, device=x.device).view(1, -1, 1, 1)
        probs = probs * (classes == best).to(probs.dtype)  # only the arg-max channel survives
        # A pixel is a peak of its channel if >= its 8 neighbours (values >= 0, so the -inf
        # padding of max_pool2d equals the reference's zero padding) and >= 1e-6.
        peak = (probs >= F.max_pool2d(probs, 3, stride=1, padding=1)) & (probs >= 1e-6)
        score = (probs + peak.to(probs.dtype)).flatten(2).max(dim=1).values  # b, h*w
        indices = torch.topk(score, self.topk, dim=1).indices  # b, Q
        gather = indices.unsqueeze(-1).expand(-1, -1, x.shape[1])
        feats = torch.gather(x.flatten(2).transpose(1, 2), 1, gather)
        pos = pos.flatten(2).transpose(1, 2).expand(x.shape[0], -1, -1)
        query_pos = torch.gather(pos, 1, gather)
        return feats, query_pos, logits, indices

    @staticmethod
    def locations(indices: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Normalised (x, y) in [0, 1] of flat grid indices (B, Q) -> (B, Q, 2) (training)."""
        xs = (indices % w).to(torch.float32) / max(w - 1, 1)
        ys = torch.div(indices, w, rounding_mode="floor").to(torch.float32) / max(h - 1, 1)
        return torch.stack([xs, ys], dim=-1)
