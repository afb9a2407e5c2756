"""PPM pooling matrices reproduce adaptive average pooling exactly at awkward sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from compactinst_ros.model.pixel_decoder import MatrixAdaptiveAvgPool2d, adaptive_pool_matrix


@pytest.mark.parametrize("hw", [(32, 64), (7, 13), (6, 6), (1, 5), (20, 27)])
@pytest.mark.parametrize("bins", [1, 2, 3, 6])
def test_matrix_pool_equals_adaptive_avg_pool(hw: tuple[int, int], bins: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, *hw, dtype=torch.float64)
    got = MatrixAdaptiveAvgPool2d(bins)(x)
    torch.testing.assert_close(got, F.adaptive_avg_pool2d(x, bins), rtol=1e-12, atol=1e-12)


def test_pool_matrix_rows_are_averages() -> None:
    m = adaptive_pool_matrix(64, 6)  # 64 is not divisible by 6: overlapping bins
    assert m.shape == (6, 64)
    torch.testing.assert_close(m.sum(1), torch.ones(6, dtype=m.dtype))
    assert (m > 0).sum(1).tolist() == [11, 12, 11, 11, 12, 11]
