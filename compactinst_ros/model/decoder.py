"""Dual-path Transformer decoder (FastInst) with CompactInst's pooled tokens and refinement.

All tensors are batch-first: queries (B, Nt, D), pixel tokens (B, N, D). Attention masks are
(B, Nt, N) bool, True = may not attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .configs import ModelConfig
from .heads import PredictionHead, RefinementHead, attention_mask_from_logits, unblock_full_rows
from .query_proposal import QueryProposal

Matcher = Callable[[dict, list], list]


class MaskedScores(nn.Module):
    """The masked attention's score product per head, ``q kᵀ + bias``, with one -inf bias per
    frame broadcast over the heads: q (B, heads, Lq, d), k (B, heads, Lk, d), bias (B, 1, Lq, Lk)
    -> (B, heads, Lq, Lk).

    PyTorch's own MHA (and FastInst's code, through it) repeats the bias for every head and adds
    it with ``baddbmm``: a (B·heads, Lq, Lk) tensor written and read per masked layer, which
    TensorRT's fused attention then reads too (80 MB a frame in CompactInst-R18's decoder at
    1024x2048, 297 MB in FastInst-D3's; docs/gpu.md). Adding 0 or -inf is exact either way, so
    the outputs are the same. A module of its own so that the MAC count can leave it out by name
    (``flops.UNCOUNTED_MODULES``): the papers' FLOP figures come from fvcore on the ``baddbmm``
    form, for which fvcore has no handle."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Scores of every head, the bias added."""
        return torch.matmul(q, k.transpose(-1, -2)) + bias


class MultiheadAttention(nn.Module):
    """Multi-head attention with ``nn.MultiheadAttention``'s parameter layout (``in_proj_weight``,
    ``in_proj_bias``, ``out_proj``), batch-first, built from MatMul/Softmax only for export.

    A mask becomes an additive -inf bias, one per frame for all heads (``MaskedScores``).
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        self.masked_scores = MaskedScores()
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape  # (B, n, D) -> (B*heads, n, D/heads)
        return (
            x.reshape(b, n, self.heads, d // self.heads)
            .transpose(1, 2)
            .reshape(b * self.heads, n, d // self.heads)
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query (B, Lq, D), key/value (B, Lk, D), mask (B, Lq, Lk) bool -> (B, Lq, D)."""
        b, lq, d = query.shape
        wq, wk, wv = self.in_proj_weight.chunk(3)
        bq, bk, bv = self.in_proj_bias.chunk(3)
        q = self._split(F.linear(query, wq, bq)) * (d // self.heads) ** -0.5
        k = self._split(F.linear(key, wk, bk))
        v = self._split(F.linear(value, wv, bv))
        if mask is None:
            out = torch.bmm(torch.bmm(q, k.transpose(1, 2)).softmax(dim=-1), v)
        else:
            bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(mask, float("-inf")).unsqueeze(1)  # (B, 1, Lq, Lk)
            per_head = (b, self.heads, -1, d // self.heads)
            scores = self.masked_scores(q.reshape(per_head), k.reshape(per_head), bias)
            out = torch.matmul(scores.softmax(dim=-1), v.reshape(per_head))
        # (B*heads or B x heads, Lq, D/heads) -> (B, Lq, D)
        out = out.reshape(b, self.heads, lq, d // self.heads).transpose(1, 2).reshape(b, lq, d)
        return self.out_proj(out)


class AttentionBlock(nn.Module):
    """Post-norm residual attention: ``x = LN(x + Attn(x + pos_x, mem + pos_m, mem))``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = MultiheadAttention(dim, heads)
        self.norm = nn.LayerNorm(dim)

    def forward(
        self,
        x: torch.Tensor,
        x_pos: torch.Tensor,
        mem: torch.Tensor,
        mem_pos: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, Lq, D) attends to mem (B, Lk, D); positions are added to queries and keys."""
        return self.norm(x + self.attn(x + x_pos, mem + mem_pos, mem, mask))


class FFNBlock(nn.Module):
    """Post-norm residual MLP: ``x = LN(x + W2 relu(W1 x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(dim, hidden)
        self.linear2 = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)
        nn.init.xavier_uniform_(self.linear1.weight)
        nn.init.xavier_uniform_(self.linear2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, L, D)."""
        return self.norm(x + self.linear2(F.relu(self.linear1(x))))


class DualPathLayer(nn.Module):
    """One FastInst layer: pixels attend to queries (+FFN), then queries attend to pixels under
    the mask, self-attend, FFN."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.pixel_cross_attn = AttentionBlock(dim, heads)
        self.pixel_ffn = FFNBlock(dim, ffn)
        self.query_cross_attn = AttentionBlock(dim, heads)
        self.query_self_attn = AttentionBlock(dim, heads)
        self.query_ffn = FFNBlock(dim, ffn)

    def forward(
        self,
        q: torch.Tensor,
        q_pos: torch.Tensor,
        x: torch.Tensor,
        x_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """queries (B, Nt, D), pixels (B, N, D), mask (B, Nt, N) -> updated (queries, pixels)."""
        x = self.pixel_ffn(self.pixel_cross_attn(x, x_pos, q, q_pos))
        q = self.query_cross_attn(q, q_pos, x, x_pos, mask)
        q = self.query_ffn(self.query_self_attn(q, q_pos, q, q_pos))
        return q, x


def sine_position_grid(dim: int, size: int) -> torch.Tensor:
    """Deterministic (1, dim, size, size) 2-D sine/cosine embedding (init of meta_pos_embed)."""
    quarter = dim // 4
    freq = 1.0 / (100.0 ** (torch.arange(quarter, dtype=torch.float32) / max(quarter, 1)))
    coords = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 * math.pi
    ang = coords[:, None] * freq[None]  # size, quarter
    y = torch.cat([ang.sin(), ang.cos()], dim=1)[:, None, :].expand(size, size, 2 * quarter)
    x = torch.cat([ang.sin(), ang.cos()], dim=1)[None, :, :].expand(size, size, 2 * quarter)
    emb = torch.cat([y, x], dim=-1)
    emb = F.pad(emb, (0, dim - emb.shape[-1]))
    return emb.permute(2, 0, 1).unsqueeze(0).contiguous()


class DualPathDecoder(nn.Module):
    """Everything after the pixel decoder: token pooling (CompactInst), query proposal, L
    dual-path layers, L+1 prediction heads and the refinement head (CompactInst)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.hidden_dim
        self.cfg = cfg
        self.num_queries = cfg.num_queries
        self.num_aux = cfg.num_aux_queries
        side = round(math.sqrt(cfg.num_queries))
        self.meta_pos_embed = nn.Parameter(sine_position_grid(d, side))
        self.empty_query_features = nn.Embedding(cfg.num_aux_queries, d)
        self.empty_query_pos_embed = nn.Embedding(cfg.num_aux_queries, d)
        self.query_proposal = QueryProposal(d, cfg.num_queries, cfg.num_classes)
        self.token_pool = nn.MaxPool2d(cfg.pool_factor, cfg.pool_factor) if cfg.refine else None
        self.layers = nn.ModuleList(
            DualPathLayer(d, cfg.nheads, cfg.dim_feedforward) for _ in range(cfg.dec_layers)
        )
        self.heads = nn.ModuleList(
            PredictionHead(
                d,
                cfg.num_classes,
                cfg.num_queries,
                mask_features=not (cfg.refine and i == cfg.dec_layers),
            )
            for i in range(cfg.dec_layers + 1)
        )
        self.refinement = RefinementHead(d, cfg.gn_groups) if cfg.refine else None

    def _predict(
        self,
        stage: int,
        q: torch.Tensor,
        x: torch.Tensor,
        grid: tuple[int, int],
        skip: torch.Tensor,
        with_class: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Head ``stage``; the last CompactInst head reads the refinement head's features."""
        if self.refinement is not None and stage == len(self.layers):
            x = self.refinement(x, grid, skip)
            grid = (int(skip.shape[-2]), int(skip.shape[-1]))
        return self.heads[stage](q, x, grid, with_class)

    def forward(
        self,
        features: dict[str, torch.Tensor],
        targets: list[dict] | None = None,
        matcher: Matcher | None = None,
    ) -> dict:
        """Pixel-decoder maps -> predictions; see ``CompactInst.decode`` for the contract."""
        e3, e4 = features["e3"], features["e4"]
        skip = features["e2"] if self.cfg.mask_stride == 4 else e3
        tokens = self.token_pool(e3) if self.token_pool is not None else e3
        b, _, h, w = tokens.shape
        grid = (int(h), int(w))
        x_pos = (
            F.interpolate(self.meta_pos_embed, size=grid, mode="bilinear", align_corners=False)
            .flatten(2)
            .transpose(1, 2)
        )  # 1, N, D
        p_pos = F.interpolate(
            self.meta_pos_embed, size=e4.shape[-2:], mode="bilinear", align_corners=False
        )
        x = tokens.flatten(2).transpose(1, 2)  # B, N, D
        q, q_pos, proposal_logits, indices = self.query_proposal(e4, p_pos)
        q = torch.cat([q, self.empty_query_features.weight.unsqueeze(0).expand(b, -1, -1)], 1)
        q_pos = torch.cat(
            [q_pos, self.empty_query_pos_embed.weight.unsqueeze(0).expand(b, -1, -1)], 1
        )

        train = self.training
        last = len(self.layers)
        logits, masks = self._predict(0, q, x, grid, skip, with_class=train)
        predictions = [(logits, masks)]
        memory = []
        for i, layer in enumerate(self.layers):
            q, x = layer(q, q_pos, x, x_pos, attention_mask_from_logits(masks, self.num_aux))
            memory.append((q, x))
            logits, masks = self._predict(i + 1, q, x, grid, skip, train or i + 1 == last)
            predictions.append((logits, masks))

        out = {"pred_logits": predictions[-1][0], "pred_masks": predictions[-1][1]}
        if not train:
            return out
        state = (q_pos, x_pos, grid, skip, tokens)
        return self._training_outputs(
            out,
            predictions,
            memory,
            state,
            proposal_logits,
            indices,
            e4.shape[-2:],
            targets,
            matcher,
        )

    def _training_outputs(
        self,
        out: dict,
        predictions: list,
        memory: list,
        state: tuple,
        proposal_logits: torch.Tensor,
        indices: torch.Tensor,
        proposal_grid: torch.Size,
        targets: list[dict] | None,
        matcher: Matcher | None,
    ) -> dict:
        """Training-only outputs: deep supervision, proposal logits, seed locations and, with
        targets, the GT-mask-guided re-application of every layer (FastInst's order)."""
        q_pos, x_pos, grid, skip, tokens = state
        locations = QueryProposal.locations(indices, int(proposal_grid[0]), int(proposal_grid[1]))
        aux = [
            {
                "pred_logits": lg,
                "pred_masks": m,
                "query_locations": locations,
                "pred_matching_indices": None,
            }
            for lg, m in predictions[:-1]
        ]
        guided = []
        matching = None
        if targets is not None:
            if matcher is None:
                raise ConfigError(
                    "decode(targets=...) needs matcher=callable(outputs, targets) "
                    "to match the final predictions for the GT-guided stream"
                )
            matching = matcher({**out, "query_locations": locations}, targets)
            gt_mask = self._gt_attention_mask(targets, matching, tokens.shape[0], grid, tokens)
            for i, layer in enumerate(self.layers):
                gq, gx = layer(memory[i][0], q_pos, memory[i][1], x_pos, gt_mask)
                lg, m = self._predict(i + 1, gq, gx, grid, skip, with_class=True)
                guided.append(
                    {
                        "pred_logits": lg,
                        "pred_masks": m,
                        "query_locations": locations,
                        "pred_matching_indices": matching,
                    }
                )
        out.update(
            aux_outputs=guided + aux,
            proposal_cls_logits=proposal_logits,
            query_locations=locations,
            pred_matching_indices=None,
            final_matching_indices=matching,
        )
        return out

    def _gt_attention_mask(
        self,
        targets: list[dict],
        matching: list,
        batch: int,
        grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor:
        """(B, Nt, N) mask: matched queries see only their GT mask (nearest-resized to the token
        grid); unmatched and auxiliary queries see everything."""
        nt = self.num_queries + self.num_aux
        blocked = torch.zeros(batch, nt, grid[0] * grid[1], dtype=torch.bool, device=like.device)
        for bi, (target, (src, tgt)) in enumerate(zip(targets, matching, strict=True)):
            gt = target["masks"]
            if gt.shape[0] == 0 or len(src) == 0:
                continue
            small = F.interpolate(gt[None].to(like.dtype), size=grid, mode="nearest")[0] > 0.5
            blocked[bi, src.to(like.device)] = ~small[tgt.to(like.device)].flatten(1)
        return unblock_full_rows(blocked)
