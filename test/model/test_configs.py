"""Named configs: lookup, overrides and the errors for bad names or fields."""

from __future__ import annotations

import pytest
from model_helpers import token_stride

from compactinst_ros.errors import ConfigError
from compactinst_ros.model.configs import CONFIGS, get_config

EXPECTED = {
    "fastinst_r18_d3",
    "fastinst_r50_d3",
    "fastinst_r50_d1",
    "compactinst_r18",
    "compactinst_r50",
    "compactinst_r18_pf32",
    "compactinst_r18_m4",
    "compactinst_demo",
}


def test_all_named_configs_exist() -> None:
    assert set(CONFIGS) >= EXPECTED


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(ConfigError) as err:
        get_config("compactinst_r34")
    assert "compactinst_r34" in str(err.value)
    for name in EXPECTED:
        assert name in str(err.value)


def test_overrides_and_unknown_field() -> None:
    cfg = get_config("compactinst_r18", num_classes=8)
    assert cfg.num_classes == 8 and CONFIGS["compactinst_r18"].num_classes == 80
    with pytest.raises(ConfigError, match="num_clases"):
        get_config("compactinst_r18", num_clases=8)


def test_variant_numbers() -> None:
    assert not CONFIGS["fastinst_r18_d3"].refine and token_stride(CONFIGS["fastinst_r18_d3"]) == 8
    assert token_stride(CONFIGS["compactinst_r18"]) == 16
    assert token_stride(CONFIGS["compactinst_r18_pf32"]) == 32
    assert CONFIGS["compactinst_r18_m4"].mask_stride == 4
    assert CONFIGS["fastinst_r50_d1"].dec_layers == 1


def test_invalid_combination_is_rejected() -> None:
    with pytest.raises(ConfigError, match="mask_stride 4"):
        get_config("fastinst_r18_d3", mask_stride=4)
