"""Session fixtures of the typed-graph tests: synthetic scenes and the tiny bundle of
typed_helpers.py with its variants made by ``compactinst quantize`` (a few seconds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typed_helpers import SIZE, make_tiny_bundle


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four synthetic 64x64 scenes in the COCO layout (calibration and evaluation data)."""
    from compactinst_ros.train.synthetic import generate

    out = tmp_path_factory.mktemp("tiny_data")
    generate(out, 4, 3, SIZE, SIZE, progress=False)
    return out


@pytest.fixture(scope="session")
def typed_bundle(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> Path:
    """The tiny bundle with fp16 and int8 variants and golden cases (read-only: copy it first)."""
    from compactinst_ros.cli import main

    root = tmp_path_factory.mktemp("typed") / "bundle"
    make_tiny_bundle(root)
    code = main(["quantize", str(root), "--data", str(tiny_data), "--frames", "4",
                 "--sensitivity-frames", "2", "--fp16-frames", "1",
                 "--out", str(root.parent / "sensitivity.json")])  # fmt: skip
    assert code == 0
    return root


@pytest.fixture
def typed_copy(typed_bundle: Path, tmp_path: Path) -> Path:
    """A writable copy of the typed bundle."""
    return Path(shutil.copytree(typed_bundle, tmp_path / "bundle"))
