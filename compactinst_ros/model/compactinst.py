"""The assembled model: backbone -> PPM-FPN (``encode``) -> dual-path decoder (``decode``)."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from .backbone import build_backbone
from .configs import ModelConfig, get_config
from .decoder import DualPathDecoder, Matcher
from .pixel_decoder import PPMFPN


class CompactInst(nn.Module):
    """FastInst (``pool_factor`` 1) or CompactInst (max-pooled tokens + refinement head).

    ``encode``: float32 (B, 3, H, W) RGB 0..255, H and W multiples of 32 (normalisation is
    inside) -> ``{"e3": (B, D, H/8, W/8), "e4": (B, D, H/16, W/16)[, "e2": (B, D, H/4, W/4)]}``.
    ``decode`` -> ``pred_logits`` (B, Q, K+1), ``pred_masks`` (B, Q, H/s, W/s) with
    s = ``mask_stride``; training mode adds the outputs documented in docs/model.md.

    Export example (static shapes)::

        model = build_model("compactinst_r18", num_classes=8).eval()
        torch.onnx.export(model, torch.zeros(1, 3, 512, 1024), "m.onnx", opset_version=17,
                          dynamo=False)
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = build_backbone(cfg.backbone, cfg.backbone_width)
        channels = {k: c for k, (c, _) in self.backbone.output_shape().items()}
        self.pixel_decoder = PPMFPN(
            channels, cfg.hidden_dim, cfg.gn_groups, cfg.ppm_bins, use_res2=cfg.mask_stride == 4
        )
        self.decoder = DualPathDecoder(cfg)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(1, 3, 1, 1), False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(1, 3, 1, 1), False)

    @property
    def mask_stride(self) -> int:
        """Stride of ``pred_masks`` relative to the input (8, or 4 for M 1/4)."""
        return self.cfg.mask_stride

    @property
    def encoder_outputs(self) -> tuple[str, ...]:
        """Names of the tensors ``encode`` returns, in export order."""
        return ("e3", "e4", "e2") if self.cfg.mask_stride == 4 else ("e3", "e4")

    def check_input_size(self, height: int, width: int) -> None:
        """Raise ConfigError unless (height, width) is usable (multiple of 32, enough pixels)."""
        div = self.cfg.size_divisibility
        if height % div or width % div:
            raise ConfigError(
                f"input {height}x{width} must be a multiple of {div} on both sides; "
                "pad the image (preprocess.letterbox does)"
            )
        if (height // 16) * (width // 16) < self.cfg.num_queries:
            raise ConfigError(
                f"input {height}x{width} gives {(height // 16) * (width // 16)} "
                f"proposal pixels < {self.cfg.num_queries} queries; use a larger "
                "input"
            )

    def encode(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """RGB 0..255 image (B, 3, H, W) -> pixel-decoder maps named by ``encoder_outputs``."""
        self.check_input_size(int(image.shape[-2]), int(image.shape[-1]))
        x = (image - self.pixel_mean) / self.pixel_std
        maps = self.pixel_decoder(self.backbone(x))
        return {name: maps[name] for name in self.encoder_outputs}

    def decode(
        self,
        features: dict[str, torch.Tensor],
        targets: list[dict] | None = None,
        matcher: Matcher | None = None,
    ) -> dict:
        """Pixel-decoder maps -> predictions (+ training outputs; GT-guided with targets)."""
        return self.decoder(features, targets, matcher)

    def forward(
        self, image: torch.Tensor, targets: list[dict] | None = None, matcher: Matcher | None = None
    ) -> dict:
        """``decode(encode(image))``."""
        return self.decode(self.encode(image), targets, matcher)


def build_model(config: str | ModelConfig, **overrides: object) -> CompactInst:
    """Build a named config (see ``CONFIGS``), e.g. ``build_model("compactinst_r18",
    num_classes=8)``; unknown names or fields raise ConfigError."""
    return CompactInst(get_config(config, **overrides))
