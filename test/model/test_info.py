"""``compactinst info``: the table, the paper column and errors through the real CLI."""

from __future__ import annotations

import pytest

from compactinst_ros.cli import main


def test_info_prints_components_and_paper_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "fastinst_r18_d3", "--size", "1024x2048", "--num-classes", "8"]) == 0
    text = capsys.readouterr().out
    for label in ("backbone", "pixel decoder", "decoder (after pixel decoder)", "total", "GB fp16"):
        assert label in text
    assert "paper   103.2" in text and "paper   205.8" in text


def test_info_params_paper_figure_for_k80(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "compactinst_r50", "--size", "640x640"]) == 0
    assert "params paper    35.9" in capsys.readouterr().out


def test_info_unknown_config_and_bad_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "fastinst_r34"]) == 2
    err = capsys.readouterr().err
    assert "fastinst_r34" in err and "compactinst_r18_m4" in err
    assert main(["info", "compactinst_r18", "--size", "big"]) == 2
    assert "HEIGHTxWIDTH" in capsys.readouterr().err


def test_info_takes_the_sizes_bench_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """Named sizes and padding to /32 as bench and costmodel (1080x1920 runs as 1088x1920)."""
    assert main(["info", "compactinst_demo", "--size", "1080x1920"]) == 0
    out = capsys.readouterr().out
    assert "input 1080x1920 padded to 1088x1920" in out and "at 1088x1920" in out
    assert main(["info", "compactinst_demo", "--size", "vga"]) == 0
    assert "at 480x640" in capsys.readouterr().out
    assert main(["info", "compactinst_r18", "--size", "big"]) == 2
    assert "HEIGHTxWIDTH" in capsys.readouterr().err


def test_info_compares_a_relative_paper_claim_as_a_ratio(capsys: pytest.CaptureFixture) -> None:
    assert main(["info", "compactinst_r18", "--size", "1024x2048", "--num-classes", "8"]) == 0
    text = capsys.readouterr().out
    assert "paper: about 7 % fewer GMACs than fastinst_r18_d3, no absolute figure" in text
    assert "ours 7.3 % fewer" in text
    assert "191.4" not in text  # 205.8 x 0.93 is derived, not the paper's
