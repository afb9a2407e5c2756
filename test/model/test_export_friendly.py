"""The model's graph exports (opset 17, static shapes) and ONNX Runtime reproduces PyTorch on
an input unlike the trace input; covers the variants the export tests do not (M 1/4, PF 1/32)
and the PPM at the Cityscapes 1/32 size (32x64, not divisible by 3 or 6)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compactinst_ros.model import build_model
from compactinst_ros.model.pixel_decoder import PyramidPoolingModule

ort = pytest.importorskip("onnxruntime")

SMALL = {
    "backbone_width": 16,
    "hidden_dim": 64,
    "nheads": 4,
    "dim_feedforward": 128,
    "gn_groups": 16,
    "num_queries": 30,
    "dec_layers": 2,
    "num_classes": 8,
}


def _run_onnx(module: nn.Module, trace_args: tuple, run_args: tuple, names: list[str]) -> list:
    buf = io.BytesIO()
    torch.onnx.export(module, trace_args, buf, opset_version=17, dynamo=False, input_names=names)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, {n: a.numpy() for n, a in zip(names, run_args, strict=True)})


class _Stages(nn.Module):
    """encode + decode as one graph with flat outputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(image)
        return out["pred_logits"], out["pred_masks"]


@pytest.mark.parametrize(
    "name",
    [
        "compactinst_r18_m4",  # the paper-config parity of m4 (twice as long) is make test-full's
        "compactinst_r18_pf32",
    ],
)
def test_variant_exports_with_parity(name: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _Stages(build_model(name, **SMALL).eval())
    trace, other = torch.rand(1, 3, 256, 320) * 255, torch.rand(1, 3, 256, 320) * 255
    got = _run_onnx(model, (trace,), (other,), ["image"])
    with torch.no_grad():
        want = model(other)
    for g, w in zip(got, want, strict=True):
        assert g.shape == tuple(w.shape)
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-4 * float(w.abs().max()))


def test_ppm_exports_at_cityscapes_coarse_size() -> None:
    torch.manual_seed(0)
    ppm = PyramidPoolingModule(32, 8, (1, 2, 3, 6)).eval()
    x, other = torch.randn(1, 32, 32, 64), torch.randn(1, 32, 32, 64)
    (got,) = _run_onnx(ppm, (x,), (other,), ["x"])

    def reference(t: torch.Tensor) -> torch.Tensor:  # the upstream module: adaptive pooling
        priors = [
            F.interpolate(
                F.relu(s[1](F.adaptive_avg_pool2d(t, s[0].size))),
                size=(32, 64),
                mode="bilinear",
                align_corners=False,
            )
            for s in ppm.stages
        ]
        return F.relu(ppm.bottleneck(torch.cat([*priors, t], 1)))

    with torch.no_grad():
        np.testing.assert_allclose(got, reference(other).numpy(), rtol=1e-4, atol=1e-5)
