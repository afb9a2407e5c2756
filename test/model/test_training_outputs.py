"""Training-mode outputs, the GT-mask-guided stream and that gradients reach every stage."""

from __future__ import annotations

import pytest
import torch
from model_helpers import token_stride

from compactinst_ros.errors import ConfigError
from compactinst_ros.model import build_model

SIZE = (256, 320)


def diagonal_matcher(outputs: dict, targets: list[dict]) -> list:
    """Deterministic stand-in for the Hungarian matcher: GT j <-> query j."""
    assert {"pred_logits", "pred_masks", "query_locations"} <= set(outputs)
    return [(torch.arange(len(t["labels"])), torch.arange(len(t["labels"]))) for t in targets]


def _targets(h: int, w: int) -> list[dict]:
    m = torch.zeros(2, h, w, dtype=torch.bool)
    m[0, : h // 2, : w // 2] = True
    m[1, h // 2 :, w // 2 :] = True
    return [
        {"labels": torch.tensor([1, 3]), "masks": m},
        {"labels": torch.zeros(0, dtype=torch.long), "masks": torch.zeros(0, h, w)},
    ]


@pytest.mark.parametrize("name", ["compactinst_demo", "fastinst_r18_d3"])
def test_train_outputs_and_guided_stream(name: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    overrides = {} if name == "compactinst_demo" else {"num_classes": 8, "dec_layers": 1}
    model = build_model(name, **overrides).train()
    cfg = model.cfg
    image = torch.rand(2, 3, *SIZE) * 255
    out = model(image, targets=_targets(*SIZE), matcher=diagonal_matcher)
    q, k, L = cfg.num_queries, cfg.num_classes, cfg.dec_layers
    assert out["proposal_cls_logits"].shape == (2, k + 1, SIZE[0] // 16, SIZE[1] // 16)
    assert out["query_locations"].shape == (2, q, 2)
    assert len(out["aux_outputs"]) == 2 * L  # L guided, then heads 0..L-1 of the regular stream
    guided, regular = out["aux_outputs"][:L], out["aux_outputs"][L:]
    assert all(a["pred_matching_indices"] is out["final_matching_indices"] for a in guided)
    assert all(a["pred_matching_indices"] is None for a in regular)
    token = SIZE[0] // token_stride(cfg), SIZE[1] // token_stride(cfg)
    assert regular[0]["pred_masks"].shape == (2, q, *token)
    assert guided[-1]["pred_masks"].shape == out["pred_masks"].shape
    assert all(a["pred_logits"].shape == (2, q, k + 1) for a in out["aux_outputs"])
    loss = out["pred_masks"].mean() + out["proposal_cls_logits"].mean()
    loss = loss + sum(a["pred_masks"].mean() + a["pred_logits"].mean() for a in out["aux_outputs"])
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


def test_train_without_targets_has_no_guided_outputs() -> None:
    model = build_model("compactinst_demo").train()
    out = model(torch.rand(1, 3, *SIZE) * 255)
    assert len(out["aux_outputs"]) == model.cfg.dec_layers
    assert out["final_matching_indices"] is None


def test_targets_without_matcher_is_a_clear_error() -> None:
    model = build_model("compactinst_demo").train()
    with pytest.raises(ConfigError, match="matcher"):
        model(torch.rand(2, 3, *SIZE) * 255, targets=_targets(*SIZE))


def test_gt_attention_mask_follows_matched_masks() -> None:
    model = build_model("compactinst_demo")
    targets = _targets(*SIZE)
    grid = (SIZE[0] // 16, SIZE[1] // 16)
    mask = model.decoder._gt_attention_mask(
        targets,
        diagonal_matcher({"pred_logits": 0, "pred_masks": 0, "query_locations": 0}, targets),
        2,
        grid,
        torch.zeros(1),
    )
    assert mask.shape == (2, model.cfg.num_queries + model.cfg.num_aux_queries, grid[0] * grid[1])
    q0 = mask[0, 0].view(grid)
    assert not q0[: grid[0] // 2, : grid[1] // 2].any() and q0[grid[0] // 2 :].all()
    assert not mask[0, 2:].any() and not mask[1].any()  # unmatched, aux, empty image
