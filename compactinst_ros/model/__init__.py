"""PyTorch FastInst / CompactInst (training and export only; never imported at run time)."""

from .compactinst import CompactInst, build_model
from .configs import CONFIGS, ModelConfig, get_config

__all__ = ["CONFIGS", "CompactInst", "ModelConfig", "build_model", "get_config"]
