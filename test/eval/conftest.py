"""Fixtures for replay/eval tests (helpers live in eval_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import Scene, make_scenes, write_gt


@pytest.fixture
def scenes() -> list[Scene]:
    """Four 48x64 scenes with things and stuff."""
    return make_scenes()


@pytest.fixture
def gt_files(scenes: list[Scene], tmp_path: Path) -> tuple[Path, Path, Path]:
    """(instances.json, panoptic.json, panoptic PNG folder) of ``scenes`` with header stamps."""
    return write_gt(scenes, tmp_path / "gt")
