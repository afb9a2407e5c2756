"""Test-only helpers of the model tests: FastInst's official key names and the token stride."""

from __future__ import annotations

import re

import torch

from compactinst_ros.model.configs import ModelConfig
from compactinst_ros.model.convert_fastinst import _HEAD_PARTS, _LAYER_BLOCKS

_BACKBONE_INVERSE = (
    (r"backbone\.conv1\.weight", "backbone.stem.conv1.weight"),
    (r"backbone\.bn1\.(\w+)", "backbone.stem.conv1.norm.{0}"),
    (r"backbone\.layer(\d)\.(\d+)\.downsample\.0\.weight", "backbone.res{s}.{1}.shortcut.weight"),
    (r"backbone\.layer(\d)\.(\d+)\.downsample\.1\.(\w+)", "backbone.res{s}.{1}.shortcut.norm.{2}"),
    (r"backbone\.layer(\d)\.(\d+)\.conv(\d)\.weight", "backbone.res{s}.{1}.conv{2}.weight"),
    (r"backbone\.layer(\d)\.(\d+)\.bn(\d)\.(\w+)", "backbone.res{s}.{1}.conv{2}.norm.{3}"),
)


def token_stride(cfg: ModelConfig) -> int:
    """Stride of the decoder's pixel tokens: 8 (FastInst), 16 (PF 1/16) or 32 (PF 1/32)."""
    return 8 * cfg.pool_factor


def to_official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of the import mapping: our FastInst state dict under the official key names."""
    return {_official_key(key): value for key, value in state.items()}


def _official_key(key: str) -> str:
    for pattern, template in _BACKBONE_INVERSE:
        m = re.fullmatch(pattern, key)
        if m:
            groups = m.groups()
            stage = int(groups[0]) + 1 if "layer" in pattern else 0
            return template.format(*groups, s=stage)
    if key.startswith("pixel_decoder."):
        return "sem_seg_head." + key
    if key.startswith("decoder."):
        return _official_predictor_key(key[len("decoder.") :])
    raise KeyError(f"no official FastInst name for '{key}' (a CompactInst-only tensor?)")


def _official_predictor_key(rest: str) -> str:
    m = re.fullmatch(r"layers\.(\d+)\.(\w+)\.(.+)", rest)
    if m:
        block = {v: k for k, v in _LAYER_BLOCKS.items()}[m[2]]
        attn = "self_attn" if m[2] == "query_self_attn" else "multihead_attn"
        tail = re.sub(r"^attn\.", f"{attn}.", m[3])
        return f"sem_seg_head.predictor.{block}.{m[1]}.{tail}"
    m = re.fullmatch(r"heads\.(\d+)\.(\w+)\.(.+)", rest)
    if m:
        part = {v: k for k, v in _HEAD_PARTS.items()}[m[2]]
        return f"sem_seg_head.predictor.{part}.{m[1]}.{m[3]}"
    m = re.fullmatch(r"query_proposal\.(conv|conv_cls)\.(weight|bias)", rest)
    if m:
        idx = 0 if m[1] == "conv" else 2
        return f"sem_seg_head.predictor.query_proposal.conv_proposal_cls_logits.{idx}.{m[2]}"
    return f"sem_seg_head.predictor.{rest}"
