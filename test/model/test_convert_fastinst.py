"""FastInst checkpoint import: official detectron2 key names and shapes -> our modules."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from model_helpers import to_official

from compactinst_ros.errors import ConfigError
from compactinst_ros.model import build_model
from compactinst_ros.model.convert_fastinst import (
    convert_state_dict,
    import_fastinst,
    load_official,
)


def official_state(backbone: str, k: int, layers: int, d: int = 256) -> dict:
    """Random tensors under the official FastInst names and shapes (written from the detectron2
    ResNet and FastInst sources, independently of our mapping)."""
    g = torch.Generator().manual_seed(0)
    sd: dict[str, torch.Tensor] = {}

    def t(*shape):
        return torch.randn(*shape, generator=g) * 0.05

    def conv_norm(name, cout, cin, ks, frozen=True):
        sd[f"{name}.weight"] = t(cout, cin, ks, ks)
        names = ("weight", "bias", "running_mean", "running_var") if frozen else ("weight", "bias")
        for p in names:
            sd[f"{name}.norm.{p}"] = t(cout).abs() + (0.5 if p in ("weight", "running_var") else 0)

    conv_norm("backbone.stem.conv1", 64, 3, 7)
    cin = 64
    bottleneck = backbone == "resnet50"
    for stage, blocks in enumerate((3, 4, 6, 3) if bottleneck else (2, 2, 2, 2)):
        planes = 64 * 2**stage
        cout = planes * (4 if bottleneck else 1)
        for b in range(blocks):
            pre = f"backbone.res{stage + 2}.{b}"
            if bottleneck:
                conv_norm(f"{pre}.conv1", planes, cin, 1)
                conv_norm(f"{pre}.conv2", planes, planes, 3)
                conv_norm(f"{pre}.conv3", cout, planes, 1)
            else:
                conv_norm(f"{pre}.conv1", planes, cin, 3)
                conv_norm(f"{pre}.conv2", planes, planes, 3)
            if b == 0 and (stage > 0 or cin != cout):
                conv_norm(f"{pre}.shortcut", cout, cin, 1)
            cin = cout
    chans = (512, 1024, 2048) if bottleneck else (128, 256, 512)
    for i, c in enumerate(chans, start=1):
        conv_norm(f"sem_seg_head.pixel_decoder.adapter_{i}", d, c, 1, frozen=False)
        conv_norm(f"sem_seg_head.pixel_decoder.layer_{i}", d, d, 3, frozen=False)
    for i in range(4):
        sd[f"sem_seg_head.pixel_decoder.ppm.stages.{i}.1.weight"] = t(d // 4, d, 1, 1)
        sd[f"sem_seg_head.pixel_decoder.ppm.stages.{i}.1.bias"] = t(d // 4)
    sd["sem_seg_head.pixel_decoder.ppm.bottleneck.weight"] = t(d, 2 * d, 1, 1)
    sd["sem_seg_head.pixel_decoder.ppm.bottleneck.bias"] = t(d)
    p = "sem_seg_head.predictor."
    sd[p + "meta_pos_embed"] = t(1, d, 10, 10)
    sd[p + "empty_query_features.weight"] = t(8, d)
    sd[p + "empty_query_pos_embed.weight"] = t(8, d)
    sd[p + "query_proposal.conv_proposal_cls_logits.0.weight"] = t(d, d, 3, 3)
    sd[p + "query_proposal.conv_proposal_cls_logits.0.bias"] = t(d)
    sd[p + "query_proposal.conv_proposal_cls_logits.2.weight"] = t(k + 1, d, 1, 1)
    sd[p + "query_proposal.conv_proposal_cls_logits.2.bias"] = t(k + 1)
    for i in range(layers):
        for block, attn in (
            ("transformer_query_cross_attention_layers", "multihead_attn"),
            ("transformer_query_self_attention_layers", "self_attn"),
            ("transformer_mask_cross_attention_layers", "multihead_attn"),
        ):
            sd[f"{p}{block}.{i}.{attn}.in_proj_weight"] = t(3 * d, d)
            sd[f"{p}{block}.{i}.{attn}.in_proj_bias"] = t(3 * d)
            sd[f"{p}{block}.{i}.{attn}.out_proj.weight"] = t(d, d)
            sd[f"{p}{block}.{i}.{attn}.out_proj.bias"] = t(d)
            sd[f"{p}{block}.{i}.norm.weight"] = t(d) + 1
            sd[f"{p}{block}.{i}.norm.bias"] = t(d)
        for block in ("transformer_query_ffn_layers", "transformer_mask_ffn_layers"):
            sd[f"{p}{block}.{i}.linear1.weight"] = t(1024, d)
            sd[f"{p}{block}.{i}.linear1.bias"] = t(1024)
            sd[f"{p}{block}.{i}.linear2.weight"] = t(d, 1024)
            sd[f"{p}{block}.{i}.linear2.bias"] = t(d)
            sd[f"{p}{block}.{i}.norm.weight"] = t(d) + 1
            sd[f"{p}{block}.{i}.norm.bias"] = t(d)
    for i in range(layers + 1):
        sd[f"{p}decoder_query_norm_layers.{i}.weight"] = t(d) + 1
        sd[f"{p}decoder_query_norm_layers.{i}.bias"] = t(d)
        for j, out in enumerate((d, d, k + 1)):
            sd[f"{p}class_embed_layers.{i}.layers.{j}.weight"] = t(out, d)
            sd[f"{p}class_embed_layers.{i}.layers.{j}.bias"] = t(out)
            sd[f"{p}mask_embed_layers.{i}.layers.{j}.weight"] = t(d, d)
            sd[f"{p}mask_embed_layers.{i}.layers.{j}.bias"] = t(d)
        sd[f"{p}mask_features_layers.{i}.weight"] = t(d, d)
        sd[f"{p}mask_features_layers.{i}.bias"] = t(d)
    sd["pixel_mean"] = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    sd["pixel_std"] = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
    sd["criterion.empty_weight"] = torch.ones(k + 1)
    return sd


@pytest.fixture(scope="module")
def r18_official():
    return official_state("resnet18", 8, 3)


def test_official_names_load_without_missing_or_unexpected(r18_official):
    model = build_model("fastinst_r18_d3", num_classes=8)
    state, new, unused = convert_state_dict(r18_official, model)
    assert new == [] and unused == []
    missing, unexpected = model.load_state_dict(state, strict=True), None
    assert not missing.missing_keys and not missing.unexpected_keys and unexpected is None
    ours = build_model("fastinst_r18_d3", num_classes=8).state_dict()
    assert set(to_official(ours)) | {"pixel_mean", "pixel_std", "criterion.empty_weight"} == set(
        r18_official
    )


def test_predictor_loss_buffer_is_expected_not_unused(r18_official):
    """Official checkpoints store the loss's class weights as the predictor's
    ``criterion.empty_weight`` buffer: a training-only tensor, dropped without a report."""
    official = dict(r18_official)
    official["sem_seg_head.predictor.criterion.empty_weight"] = official.pop(
        "criterion.empty_weight"
    )
    model = build_model("fastinst_r18_d3", num_classes=8)
    _, new, unused = convert_state_dict(official, model)
    assert new == [] and unused == []
    official["sem_seg_head.predictor.criterion.other_weight"] = torch.ones(9)
    _, _, unused = convert_state_dict(official, model)
    assert unused == ["sem_seg_head.predictor.criterion.other_weight"]


def test_r50_names_and_shapes():
    official = official_state("resnet50", 80, 3)
    model = build_model("fastinst_r50_d3", num_classes=80)
    state, new, unused = convert_state_dict(official, model)
    assert new == [] and unused == []
    result = model.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys


def test_identical_outputs_after_conversion():
    torch.manual_seed(1)
    source = build_model("fastinst_r18_d3", num_classes=8).eval()
    official = to_official(source.state_dict())
    target = build_model("fastinst_r18_d3", num_classes=8).eval()
    state, new, unused = convert_state_dict(official, target)
    assert new == [] and unused == []
    target.load_state_dict(state, strict=True)
    image = torch.rand(1, 3, 160, 192) * 255
    with torch.no_grad():
        a, b = source(image), target(image)
    assert torch.equal(a["pred_logits"], b["pred_logits"])
    assert torch.equal(a["pred_masks"], b["pred_masks"])


def test_compactinst_from_fastinst(r18_official, tmp_path):
    path = tmp_path / "fastinst.pth"
    torch.save({"model": r18_official, "iteration": 5}, path)
    record, new, unused = import_fastinst(path, "compactinst_r18")
    assert new and all(k.startswith("decoder.refinement.") for k in new)
    last = "sem_seg_head.predictor.mask_features_layers.3"
    assert unused == [f"{last}.weight", f"{last}.bias"]
    model = build_model("compactinst_r18", num_classes=8)
    model.load_state_dict(record["model"], strict=True)
    conv = r18_official["sem_seg_head.pixel_decoder.layer_1.weight"]
    assert torch.equal(model.pixel_decoder.layer_1.weight, conv)
    out = tmp_path / "ci.pt"
    torch.save(record, out)
    back = torch.load(out, weights_only=True)
    assert back["config"] == "compactinst_r18" and back["num_classes"] == 8


def test_pkl_numpy_only(r18_official, tmp_path):
    good = tmp_path / "w.pkl"
    with open(good, "wb") as fh:
        pickle.dump({"model": {k: v.numpy() for k, v in r18_official.items()}}, fh)
    loaded = load_official(good)
    assert np.array_equal(
        loaded["backbone.stem.conv1.weight"].numpy(),
        r18_official["backbone.stem.conv1.weight"].numpy(),
    )

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = tmp_path / "evil.pkl"
    with open(bad, "wb") as fh:
        pickle.dump({"model": Evil()}, fh)
    with pytest.raises(ConfigError, match="numpy arrays"):
        load_official(bad)


def test_shape_mismatch_names_the_key(r18_official):
    model = build_model("fastinst_r18_d3", num_classes=80)
    with pytest.raises(ConfigError, match="conv_proposal_cls_logits"):
        convert_state_dict(r18_official, model)
