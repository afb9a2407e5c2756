"""Every named config builds and produces the contract's shapes at a small input."""

from __future__ import annotations

import pytest
import torch

from compactinst_ros.errors import ConfigError
from compactinst_ros.model import CONFIGS, build_model

SIZE = (256, 320)


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_inference_shapes(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, num_classes=8).eval()
    cfg = model.cfg
    image = torch.rand(1, 3, *SIZE) * 255
    with torch.no_grad():
        feats = model.encode(image)
        out = model.decode(feats)
    h, w = SIZE
    assert tuple(feats) == model.encoder_outputs
    assert feats["e3"].shape == (1, cfg.hidden_dim, h // 8, w // 8)
    assert feats["e4"].shape == (1, cfg.hidden_dim, h // 16, w // 16)
    if cfg.mask_stride == 4:
        assert feats["e2"].shape == (1, cfg.hidden_dim, h // 4, w // 4)
    s = model.mask_stride
    assert set(out) == {"pred_logits", "pred_masks"}
    assert out["pred_logits"].shape == (1, cfg.num_queries, 9)
    assert out["pred_masks"].shape == (1, cfg.num_queries, h // s, w // s)
    assert torch.isfinite(out["pred_masks"]).all() and torch.isfinite(out["pred_logits"]).all()


def test_backbone_channels_and_strides() -> None:
    r18 = build_model("fastinst_r18_d3").backbone.output_shape()
    r50 = build_model("fastinst_r50_d1").backbone.output_shape()
    assert r18 == {"res2": (64, 4), "res3": (128, 8), "res4": (256, 16), "res5": (512, 32)}
    assert r50 == {"res2": (256, 4), "res3": (512, 8), "res4": (1024, 16), "res5": (2048, 32)}


def test_frozen_backbone_norm_has_no_parameters() -> None:
    names = [n for n, _ in build_model("compactinst_demo").backbone.named_parameters()]
    assert names and all("bn" not in n and "downsample.1" not in n for n in names)


def test_bad_input_size_names_the_fix() -> None:
    model = build_model("compactinst_demo").eval()
    with pytest.raises(ConfigError, match="multiple of 32"):
        model.encode(torch.zeros(1, 3, 250, 320))
    with pytest.raises(ConfigError, match="larger input"):
        model.encode(torch.zeros(1, 3, 64, 64))


def test_batch_items_are_independent() -> None:
    torch.manual_seed(0)
    model = build_model("compactinst_demo").eval()
    images = torch.rand(2, 3, *SIZE) * 255
    with torch.no_grad():
        both = model(images)
        second = model(images[1:])
    torch.testing.assert_close(both["pred_masks"][1:], second["pred_masks"], rtol=1e-4, atol=1e-4)


def test_backbone_loads_torchvision_style_state_dict() -> None:
    """torchvision checkpoints carry ``bn*.num_batches_tracked`` and ``fc``; the first is dropped
    by FrozenBatchNorm2d, so only ``fc`` remains unexpected."""
    src = build_model("compactinst_demo").backbone
    state = dict(src.state_dict())
    state.update(
        {
            k.replace("running_var", "num_batches_tracked"): torch.tensor(7)
            for k in list(state)
            if k.endswith("running_var")
        }
    )
    state["fc.weight"] = torch.zeros(1000, 256)
    dst = build_model("compactinst_demo").backbone
    result = dst.load_state_dict(state, strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == ["fc.weight"]
    assert torch.equal(dst.layer1[0].conv1.weight, src.layer1[0].conv1.weight)
