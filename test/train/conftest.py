"""Fixtures of the training tests."""

import pytest
from tiny_model import TINY


@pytest.fixture
def tiny() -> dict:
    """ModelConfig overrides for a tiny compactinst_demo (fast on 2 CPU cores)."""
    return dict(TINY)
