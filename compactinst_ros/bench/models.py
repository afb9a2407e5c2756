"""Random-weight models and bundles to time (latency does not depend on the weights).

PyTorch runners time the model itself; ONNX Runtime and TensorRT runners time a bundle exported
by the export module, exactly as the runtime loads one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..bundle import METADATA_FILE, ModelBundle
from ..labels import LabelSet

if TYPE_CHECKING:
    import torch

#: Seed of every random initialisation and synthetic input of the benches.
SEED = 0


def num_classes_of(config: str, num_classes: int | None) -> int:
    """K of a bench model: ``num_classes``, or the config's own default."""
    from ..model import get_config

    return num_classes or get_config(config).num_classes


def build_bench_model(config: str, num_classes: int | None) -> torch.nn.Module:
    """A randomly initialised model in eval mode."""
    import torch

    from ..model import build_model

    torch.manual_seed(SEED)
    return build_model(config, num_classes=num_classes_of(config, num_classes)).eval()


def feature_shapes(model: torch.nn.Module, height: int, width: int) -> dict[str, tuple]:
    """Decoder inputs (encoder outputs) for a padded input: e3 at 1/8, e4 at 1/16, e2 at 1/4."""
    dim = model.cfg.hidden_dim
    strides = {"e2": 4, "e3": 8, "e4": 16}
    return {n: (1, dim, height // strides[n], width // strides[n]) for n in model.encoder_outputs}


def synthetic_features(shapes: dict[str, tuple]) -> dict[str, torch.Tensor]:
    """Preallocated N(0, 1) feature maps, float32 on the CPU."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    return {n: torch.randn(s, generator=gen) for n, s in shapes.items()}


def placeholder_labels(num_classes: int) -> LabelSet:
    """``class1..classK`` with ids 1..K, the first half things and the rest stuff, so that both
    kinds of post-processing run."""
    return LabelSet(
        names=tuple(f"class{i}" for i in range(1, num_classes + 1)),
        ids=tuple(range(1, num_classes + 1)),
        isthing=tuple(i < num_classes // 2 or num_classes == 1 for i in range(num_classes)),
    )


def random_bundle(
    config: str,
    size: tuple[int, int],
    labels: LabelSet,
    root: Path,
    progress: Callable[[str], None] = print,
) -> ModelBundle:
    """A random-weight bundle of ``config`` at ``size`` (H, W) under ``root``; exported on first
    use into ``<config>_k<K>_<H>x<W>`` (whole or not at all), loaded afterwards."""
    from ..export.onnx_export import build_for_export, export_bundle

    out = root / f"{config}_k{labels.num_classes}_{size[0]}x{size[1]}"
    if not (out / METADATA_FILE).is_file():
        model, labels, source = build_for_export(config, labels, None, seed=SEED)
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        export_bundle(model, config, size, labels, partial, source, progress=progress)
        partial.rename(out)
    return ModelBundle.load(out)
