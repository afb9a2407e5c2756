"""The one ``HxW`` size parser shared by the sub-commands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from compactinst_ros.errors import ConfigError
from compactinst_ros.sizes import parse_size


def test_parses_height_by_width() -> None:
    assert parse_size("512x1024") == (512, 1024)
    assert parse_size(" 96X128 ") == (96, 128)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("512", "HxW"),
        ("axb", "HxW"),
        ("1x2x3", "HxW"),
        ("", "HxW"),
        ("0x64", "positive"),
        ("-32x64", "positive"),
    ],
)
def test_rejects_with_the_expected_form(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        parse_size(text)
    assert "512x1024" in str(info.value)


def test_does_not_import_torch() -> None:
    code = "import sys, compactinst_ros.sizes; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
