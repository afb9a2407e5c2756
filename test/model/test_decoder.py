"""Decoder pieces against independent references: attention, query proposal, mask rules."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compactinst_ros.model.decoder import MultiheadAttention
from compactinst_ros.model.heads import attention_mask_from_logits
from compactinst_ros.model.query_proposal import QueryProposal


def test_attention_matches_torch_multihead_attention() -> None:
    torch.manual_seed(0)
    ours, ref = MultiheadAttention(32, 4), nn.MultiheadAttention(32, 4)
    ours.load_state_dict(ref.state_dict())  # identical parameter layout
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.rand(2, 5, 7) > 0.5
    mask[..., 0] = False
    for m in (None, mask):
        got = ours(q, kv, kv, m)
        ref_mask = None if m is None else m.repeat_interleave(4, dim=0)
        want = ref(q.transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1), attn_mask=ref_mask)[
            0
        ].transpose(0, 1)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _reference_topk(probs_all: torch.Tensor, k: int) -> torch.Tensor:
    """FastInst's selection as written upstream: one_hot, 8 zero-padded neighbour tests."""
    num_fg = probs_all.shape[1] - 1
    one_hot = F.one_hot(probs_all[:, :-1].max(1)[1], num_classes=num_fg + 1).permute(0, 3, 1, 2)
    x = probs_all * one_hot
    p = F.pad(x, (1, 1, 1, 1))
    peak = (
        (x >= p[:, :, :-2, 1:-1])
        & (x >= p[:, :, 2:, 1:-1])
        & (x >= p[:, :, 1:-1, :-2])
        & (x >= p[:, :, 1:-1, 2:])
        & (x >= p[:, :, :-2, :-2])
        & (x >= p[:, :, :-2, 2:])
        & (x >= p[:, :, 2:, :-2])
        & (x >= p[:, :, 2:, 2:])
        & (x >= 1e-6)
    )
    x = x + peak.to(x)
    return torch.topk(x[:, :-1].flatten(2).max(1)[0], k, dim=1)[1]


def test_query_proposal_selects_the_reference_pixels() -> None:
    torch.manual_seed(0)
    prop = QueryProposal(16, num_queries=20, num_classes=5)
    x = torch.randn(2, 16, 9, 11)
    pos = torch.randn(1, 16, 9, 11)
    feats, qpos, logits, idx = prop(x, pos)
    want = _reference_topk(logits.softmax(1), 20)
    assert torch.equal(idx, want)
    flat = x.flatten(2).transpose(1, 2)
    torch.testing.assert_close(feats, torch.stack([flat[b, idx[b]] for b in range(2)]))
    torch.testing.assert_close(qpos[1], pos.flatten(2).transpose(1, 2)[0, idx[1]])
    loc = QueryProposal.locations(idx, 9, 11)
    assert torch.allclose(loc[..., 0] * 10, (idx % 11).float())
    assert torch.allclose(loc[..., 1] * 8, (idx // 11).float())


def test_attention_mask_rules() -> None:
    logits = torch.full((1, 3, 2, 2), 1.0)
    logits[0, 0] = -1.0  # blocked everywhere -> must be unblocked
    logits[0, 1, 0, 0] = -1.0  # one blocked pixel
    mask = attention_mask_from_logits(logits, num_aux=2)
    assert mask.shape == (1, 5, 4) and mask.dtype == torch.bool
    assert not mask[0, 0].any()
    assert mask[0, 1].tolist() == [True, False, False, False]
    assert not mask[0, 2:].any()  # query 2 sees all; the two aux rows are never masked


class _PerHeadBias(MultiheadAttention):
    """The form PyTorch's MHA and FastInst's code use: the -inf bias repeated for every head and
    added with ``baddbmm`` (what ``MaskedScores`` replaced)."""

    def forward(self, query, key, value, mask=None):
        b, lq, d = query.shape
        wq, wk, wv = self.in_proj_weight.chunk(3)
        bq, bk, bv = self.in_proj_bias.chunk(3)
        q = self._split(F.linear(query, wq, bq)) * (d // self.heads) ** -0.5
        k, v = self._split(F.linear(key, wk, bk)), self._split(F.linear(value, wv, bv))
        bias = torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
        bias = bias.unsqueeze(1).expand(-1, self.heads, -1, -1).reshape(-1, *mask.shape[1:])
        out = torch.bmm(torch.baddbmm(bias, q, k.transpose(1, 2)).softmax(-1), v)
        out = out.reshape(b, self.heads, lq, d // self.heads).transpose(1, 2).reshape(b, lq, d)
        return self.out_proj(out)


def test_a_bias_broadcast_over_the_heads_gives_the_per_head_bias_bits(tmp_path) -> None:
    """The masked attention adds one bias per frame to every head's scores instead of a copy
    per head: in PyTorch and in the exported graph run as written on ONNX Runtime the outputs are
    the same bits, and the exported graph no longer expands the bias over the heads. ONNX
    Runtime's optimiser folded the per-head form's query scaling into its score product
    (FusedMatMul), which moved its outputs by an ulp; the broadcast form it runs as written."""
    import numpy as np
    import onnx

    from compactinst_ros.backends.ort import create_session

    torch.manual_seed(0)
    ours = MultiheadAttention(64, 8).eval()
    per_head = _PerHeadBias(64, 8).eval()
    per_head.load_state_dict(ours.state_dict())
    q, kv = torch.randn(2, 30, 64), torch.randn(2, 96, 64)
    mask = torch.rand(2, 30, 96) > 0.4
    mask[..., 0] = False
    with torch.no_grad():
        assert torch.equal(ours(q, kv, kv, mask), per_head(q, kv, kv, mask))
    outputs, expands = [], []
    for module in (ours, per_head):
        path = tmp_path / f"{type(module).__name__}.onnx"
        torch.onnx.export(module, (q, kv, kv, mask), str(path), dynamo=False, opset_version=17,
                          input_names=["q", "k", "v", "mask"], output_names=["out"])  # fmt: skip
        expands.append(sum(n.op_type == "Expand" for n in onnx.load(str(path)).graph.node))
        feed = {"q": q.numpy(), "k": kv.numpy(), "v": kv.numpy(), "mask": mask.numpy()}
        for optimize in (False, True):
            outputs.append(create_session(path, optimize=optimize).run(["out"], feed)[0])
    ours_as_written, ours_optimised, theirs_as_written, _ = outputs
    np.testing.assert_array_equal(ours_as_written, theirs_as_written)
    np.testing.assert_array_equal(ours_as_written, ours_optimised)
    assert expands[0] == 0 < expands[1]
