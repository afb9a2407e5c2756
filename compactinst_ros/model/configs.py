"""Named model configurations (frozen dataclasses); variants differ only in the numbers here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ConfigError

#: ImageNet RGB statistics in 0..255 (detectron2 / torchvision convention).
PIXEL_MEAN = (123.675, 116.28, 103.53)
PIXEL_STD = (58.395, 57.12, 57.375)


@dataclass(frozen=True)
class ModelConfig:
    """Every number that distinguishes FastInst, CompactInst and their variants.

    ``pool_factor`` = 1 is FastInst (decoder tokens = E3 at 1/8, per-stage Linear mask features);
    2 (PF 1/16) or 4 (PF 1/32) max-pools E3 before the decoder and adds the refinement head.
    ``mask_stride`` = 4 is the M 1/4 variant (extra res2 FPN level, refinement and masks at 1/4).
    """

    name: str
    backbone: str = "resnet18"  # resnet18 | resnet50
    backbone_width: int = 64  # stem/res2 base width; 64 is the standard ResNet
    num_classes: int = 80
    hidden_dim: int = 256
    num_queries: int = 100
    num_aux_queries: int = 8
    dec_layers: int = 3
    nheads: int = 8
    dim_feedforward: int = 1024
    pool_factor: int = 1
    mask_stride: int = 8
    ppm_bins: tuple[int, ...] = (1, 2, 3, 6)
    gn_groups: int = 32
    size_divisibility: int = 32
    pixel_mean: tuple[float, float, float] = PIXEL_MEAN
    pixel_std: tuple[float, float, float] = PIXEL_STD
    # The paper's own figures for ``compactinst info`` (None where the paper gives none): GMACs
    # at ``size`` with ``num_classes``, parameters at K = 80, or a relative claim
    # ``fewer_total_than`` = (config, percent) where it states no absolute number.
    paper: dict | None = dataclasses.field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.backbone not in ("resnet18", "resnet50"):
            raise ConfigError(f"{self.name}: backbone {self.backbone!r}; use resnet18 or resnet50")
        if self.pool_factor not in (1, 2, 4):
            raise ConfigError(f"{self.name}: pool_factor {self.pool_factor}; use 1, 2 or 4")
        if self.mask_stride not in (4, 8):
            raise ConfigError(f"{self.name}: mask_stride {self.mask_stride}; use 8 or 4")
        if self.mask_stride == 4 and self.pool_factor == 1:
            raise ConfigError(
                f"{self.name}: mask_stride 4 needs the refinement head (pool_factor > 1)"
            )
        if self.hidden_dim % self.nheads or self.hidden_dim % self.gn_groups:
            raise ConfigError(
                f"{self.name}: hidden_dim {self.hidden_dim} must divide by nheads {self.nheads} "
                f"and gn_groups {self.gn_groups}"
            )
        if self.num_classes < 1 or self.num_queries < 1 or self.dec_layers < 1:
            raise ConfigError(f"{self.name}: num_classes, num_queries and dec_layers must be >= 1")

    @property
    def refine(self) -> bool:
        """True for CompactInst (pooled tokens + refinement head), False for FastInst."""
        return self.pool_factor > 1

    def replace(self, **overrides: object) -> ModelConfig:
        """Copy with fields replaced; unknown field names raise ConfigError."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {unknown}; known: {sorted(fields)}")
        return dataclasses.replace(self, **overrides)


_FASTINST_R18_CITY = {
    "size": (1024, 2048),
    "num_classes": 8,
    "decoder_gmacs": 103.2,
    "total_gmacs": 205.8,
}

CONFIGS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        ModelConfig("fastinst_r18_d3", paper=_FASTINST_R18_CITY),
        ModelConfig("fastinst_r50_d3", backbone="resnet50", paper={"params_m": 34.2}),
        ModelConfig("fastinst_r50_d1", backbone="resnet50", dec_layers=1, paper={"params_m": 30.0}),
        # The paper gives no absolute count here, only "about 7 % fewer FLOPs than FastInst".
        ModelConfig(
            "compactinst_r18",
            pool_factor=2,
            paper={
                "size": (1024, 2048),
                "num_classes": 8,
                "fewer_total_than": ("fastinst_r18_d3", 7.0),
            },
        ),
        ModelConfig(
            "compactinst_r50", backbone="resnet50", pool_factor=2, paper={"params_m": 35.9}
        ),
        ModelConfig("compactinst_r18_pf32", pool_factor=4),
        ModelConfig(
            "compactinst_r18_m4",
            pool_factor=2,
            mask_stride=4,
            paper={
                "size": (1024, 2048),
                "num_classes": 8,
                "decoder_gmacs": 264.9,
                "total_gmacs": 446.5,
            },
        ),
        # Small enough to train on a CPU in tens of minutes at ~256x384 with 8 classes.
        ModelConfig(
            "compactinst_demo",
            backbone_width=32,
            num_classes=8,
            hidden_dim=128,
            num_queries=50,
            dec_layers=2,
            nheads=4,
            dim_feedforward=512,
            pool_factor=2,
            gn_groups=16,
        ),
    )
}


def get_config(config: str | ModelConfig, **overrides: object) -> ModelConfig:
    """Resolve a config name (or pass a ModelConfig through) and apply field overrides."""
    if isinstance(config, ModelConfig):
        cfg = config
    elif config in CONFIGS:
        cfg = CONFIGS[config]
    else:
        raise ConfigError(f"unknown model config {config!r}; known: {', '.join(CONFIGS)}")
    return cfg.replace(**overrides) if overrides else cfg
