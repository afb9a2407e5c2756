"""Per-stage prediction heads (class, mask embedding, mask features) and the refinement head."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from .pixel_decoder import ConvNorm


class MLP(nn.Module):
    """Linear layers with ReLU between them (DETR ``MLP``; keys ``layers.{i}``)."""

    def __init__(self, cin: int, hidden: int, cout: int, num_layers: int) -> None:
        super().__init__()
        dims = [cin] + [hidden] * (num_layers - 1) + [cout]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., cin) -> (..., cout)."""
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


def attention_mask_from_logits(mask_logits: torch.Tensor, num_aux: int) -> torch.Tensor:
    """(B, Q, h, w) mask logits -> (B, Q + num_aux, h*w) bool, True = may not attend.

    Blocked where logit < 0; auxiliary queries never blocked; rows blocked everywhere are
    unblocked (otherwise softmax over an empty set gives NaN).
    """
    padded = F.pad(mask_logits.detach().flatten(2), (0, 0, 0, num_aux), value=1.0)
    return unblock_full_rows(padded < 0)


def unblock_full_rows(blocked: torch.Tensor) -> torch.Tensor:
    """Clear every row of a (B, Nt, N) boolean mask that is True everywhere."""
    return blocked & ~blocked.all(dim=-1, keepdim=True)


class PredictionHead(nn.Module):
    """One stage's heads: LayerNorm'd queries -> class logits and mask embeddings; masks are
    the dot product of the embeddings with (optionally Linear-projected) pixel features."""

    def __init__(
        self, dim: int, num_classes: int, num_queries: int, mask_features: bool = True
    ) -> None:
        super().__init__()
        self.num_queries = num_queries
        self.norm = nn.LayerNorm(dim)
        self.class_embed = MLP(dim, dim, num_classes + 1, 3)
        self.mask_embed = MLP(dim, dim, dim, 3)
        self.mask_features = nn.Linear(dim, dim) if mask_features else None

    def forward(
        self,
        queries: torch.Tensor,
        pixels: torch.Tensor,
        grid: tuple[int, int],
        with_class: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """queries (B, Nt, D), pixels (B, N, D) with N = h*w -> class logits (B, Q, K+1) (or
        None) and mask logits (B, Q, h, w); only the first Q (IA-guided) queries predict."""
        q = self.norm(queries[:, : self.num_queries])
        logits = self.class_embed(q) if with_class else None
        embed = self.mask_embed(q)
        if self.mask_features is not None:
            pixels = self.mask_features(pixels)
        masks = torch.matmul(embed, pixels.transpose(1, 2))  # b, Q, N (MatMul, not Einsum)
        return logits, masks.reshape(masks.shape[0], masks.shape[1], *grid)


class RefinementHead(nn.Module):
    """CompactInst refinement: upsample decoded tokens to the skip map's size, concat the skip
    (E3, or E2 for M 1/4), conv3x3 2D->D + GN + ReLU, conv3x3 D->D -> mask features."""

    def __init__(self, dim: int, groups: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(2 * dim, dim, 3, nn.GroupNorm(groups, dim), relu=True)
        self.conv2 = ConvNorm(dim, dim, 3, bias=True)

    def forward(
        self, tokens: torch.Tensor, grid: tuple[int, int], skip: torch.Tensor
    ) -> torch.Tensor:
        """tokens (B, h*w, D), skip (B, D, H, W) -> mask features (B, H*W, D) (token layout)."""
        b, _, d = tokens.shape
        coarse = tokens.transpose(1, 2).reshape(b, d, *grid)
        up = F.interpolate(coarse, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        out = self.conv2(self.conv1(torch.cat([up, skip], dim=1)))
        return out.flatten(2).transpose(1, 2)
