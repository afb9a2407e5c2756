"""Shared fixtures: a random-weight model bundle exported once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Config and static size of the shared random bundle (small: exports in a few seconds).
RANDOM_BUNDLE_CONFIG = "compactinst_demo"
RANDOM_BUNDLE_SIZE = (256, 320)
RANDOM_BUNDLE_SEED = 0


@pytest.fixture(scope="session")
def random_export(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(torch model, ModelBundle) of a random-init compactinst_demo exported at 256x320."""
    torch = pytest.importorskip("torch")
    from compactinst_ros.export.onnx_export import build_for_export, export_bundle

    torch.set_num_threads(min(2, torch.get_num_threads()))
    model, labels, source = build_for_export(
        RANDOM_BUNDLE_CONFIG, None, None, seed=RANDOM_BUNDLE_SEED
    )
    out = tmp_path_factory.mktemp("random_bundle")
    bundle = export_bundle(
        model, RANDOM_BUNDLE_CONFIG, RANDOM_BUNDLE_SIZE, labels, out, source, progress=print
    )
    return model, bundle


@pytest.fixture(scope="session")
def random_bundle(random_export: tuple) -> Path:
    """Directory of the session's random-weight compactinst_demo bundle (synthetic labels, K=8).

    Treat it as read-only; copy it (shutil.copytree) before modifying anything.
    """
    return random_export[1].root
