"""ONNX Runtime vs PyTorch (fp32) parity of an exported bundle.

Relative error of one output = ``max|ort - torch| / max|torch|`` (the largest absolute deviation
over the tensor, scaled by the tensor's largest magnitude; 0 when both are all-zero). A bundle
passes when every output of every check stays within ``tolerance`` (1e-4 by default).

The check runs on an image unlike the trace input (smooth gradients, a letterbox band of mean
colour, a different seed), as torchvision's export tests do, so that constants baked in at trace
time show up. Three comparisons: encoder alone, decoder alone fed with PyTorch's features (the
stage contract), and the chained ORT encoder -> decoder against ``model.decode(model.encode(x))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..backends.ort import create_session
from ..bundle import DECODER_OUTPUTS, ModelBundle

if TYPE_CHECKING:
    import torch

DEFAULT_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ParityResult:
    """Deviation of one ONNX Runtime output from PyTorch."""

    check: str  # "encoder", "decoder" or "chain"
    output: str
    max_abs: float
    max_ref: float
    rel_err: float
    tolerance: float

    @property
    def ok(self) -> bool:
        """True when the relative error is within tolerance."""
        return bool(self.rel_err <= self.tolerance)

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (
            f"{self.check:8s} {self.output:12s} rel_err {self.rel_err:.2e} "
            f"(max|d| {self.max_abs:.2e}, max|ref| {self.max_ref:.2e}) <= {self.tolerance:.0e}: "
            f"{verdict}"
        )


def relative_error(actual: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    """(max|a-b| / max|b|, max|a-b|, max|b|); shapes must match."""
    actual = np.asarray(actual, np.float64)
    reference = np.asarray(reference, np.float64)
    if actual.shape != reference.shape:
        raise ValueError(f"shape mismatch: {actual.shape} vs reference {reference.shape}")
    max_abs = float(np.max(np.abs(actual - reference))) if actual.size else 0.0
    max_ref = float(np.max(np.abs(reference))) if reference.size else 0.0
    if max_ref == 0.0:
        return (0.0 if max_abs == 0.0 else float("inf")), max_abs, max_ref
    return max_abs / max_ref, max_abs, max_ref


def parity_image(
    height: int, width: int, pad_value: tuple[float, float, float], seed: int = 1
) -> np.ndarray:
    """(1, 3, H, W) float32 RGB 0..255: gradients + noise, right/bottom quarter mean-colour pad."""
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.linspace(0, 1, height), np.linspace(0, 1, width), indexing="ij")
    base = np.stack([255 * xx, 255 * yy, 127.5 * (1 + np.sin(6 * np.pi * xx * yy))])
    image = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.float32)
    pad = np.asarray(pad_value, np.float32)[:, None, None]
    image[:, (3 * height) // 4 :, :] = pad
    image[:, :, (3 * width) // 4 :] = pad
    return image[None]


def check_parity(
    model: torch.nn.Module,
    bundle: ModelBundle,
    image: np.ndarray | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    threads: int | None = 2,
) -> list[ParityResult]:
    """Compare the bundle's ONNX Runtime outputs with ``model`` in fp32 on ``image``."""
    import torch

    if image is None:
        image = parity_image(bundle.input_h, bundle.input_w, bundle.pad_value)
    names = list(model.encoder_outputs)
    model = model.eval()
    with torch.no_grad():
        features = model.encode(torch.from_numpy(image))
        ref_feats = {n: features[n].numpy() for n in names}
        ref_out = model.decode(features)
        ref_dec = {n: ref_out[n].numpy() for n in DECODER_OUTPUTS}

    encoder = create_session(bundle.stage("encoder").path, threads)
    decoder = create_session(bundle.stage("decoder").path, threads)
    ort_feats = dict(zip(names, encoder.run(names, {"image": image}), strict=True))
    isolated = decoder.run(list(DECODER_OUTPUTS), ref_feats)
    chained = decoder.run(list(DECODER_OUTPUTS), ort_feats)

    results = []
    comparisons = [
        ("encoder", ort_feats, ref_feats),
        ("decoder", dict(zip(DECODER_OUTPUTS, isolated, strict=True)), ref_dec),
        ("chain", dict(zip(DECODER_OUTPUTS, chained, strict=True)), ref_dec),
    ]
    for check, actual, reference in comparisons:
        for name, ref in reference.items():
            rel, max_abs, max_ref = relative_error(actual[name], ref)
            results.append(ParityResult(check, name, max_abs, max_ref, rel, tolerance))
    return results
