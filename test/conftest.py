"""Shared fixtures: random-weight model bundles exported and the kernel emulator compiled once
per test session."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from compactinst_ros.bundle import ModelBundle

#: Config and static size of the shared random bundle (small: exports in a few seconds).
RANDOM_BUNDLE_CONFIG = "compactinst_demo"
RANDOM_BUNDLE_SIZE = (256, 320)
RANDOM_BUNDLE_SEED = 0
#: the CPU stand-ins of pycuda and TensorRT (imported by name: pycuda_emu, tensorrt_emu)
EMU_DIR = Path(__file__).parent / "gpu" / "emu"
#: The files that take longest on two cores (a Ray cluster, interface builds on a fresh clone,
#: many node processes), longest first. The suite runs them before all others, so that the
#: parallel run does not end with one worker still busy on one of them while the others idle
#: (longest-first scheduling; `make test` passes --no-loadscope-reorder so that pytest-xdist
#: hands the files out in this order).
SLOW_FILES = (
    "test/eval/test_eval_fleet.py",
    "test/ros/test_ros_depth.py",
    "test/ros/test_ros_video.py",
    "test/ros/test_launch.py",
    "test/scripts/test_scripts_run.py",
    "test/backends/test_openvino.py",
    "test/backends/test_real_builder.py",
    "test/ros/test_ros_multicamera.py",
    "test/eval/test_eval_cameras.py",
    "test/export/test_onnx_export.py",
    "test/postprocess/test_postprocess_fast.py",
    "test/ros/test_ros_tool.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of SLOW_FILES first, in that order; the others keep theirs."""
    root = Path(__file__).resolve().parent.parent
    rank = {name: i for i, name in enumerate(SLOW_FILES)}

    def order(item: pytest.Item) -> int:
        return rank.get(item.path.resolve().relative_to(root).as_posix(), len(SLOW_FILES))

    items.sort(key=order)  # stable: the others and the tests within a file keep their order


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


class PaperBundles:
    """Random-weight bundles of the paper configs at 160x160 with K=8 placeholder labels, each
    exported on first use into ``root`` in ``bench.models.random_bundle``'s layout
    (``<config>_k8_160x160``), so that ``compactinst bench`` (under ``--out``/bundles) and
    scripts/bench_ort_stages.py (``--bundles``) load them instead of exporting again."""

    size = (160, 160)
    num_classes = 8

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, config: str) -> ModelBundle:
        """The ModelBundle of ``config`` (exported now if this session has not yet)."""
        from compactinst_ros.bench.models import placeholder_labels, random_bundle

        labels = placeholder_labels(self.num_classes)
        return random_bundle(config, self.size, labels, self.root, progress=print)


@pytest.fixture(scope="session")
def paper_bundles(tmp_path_factory: pytest.TempPathFactory) -> PaperBundles:
    """The session's PaperBundles; read-only (copy a bundle before modifying it)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    return PaperBundles(tmp_path_factory.mktemp("paper_bundles"))


@pytest.fixture(scope="session")
def emu_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """runner.cpp (the real kernel sources on the CPU emulator) as a loaded shared library."""
    if str(EMU_DIR) not in sys.path:
        sys.path.insert(0, str(EMU_DIR))
    import pycuda_emu

    return pycuda_emu.build_library(tmp_path_factory.mktemp("emu"))


@pytest.fixture
def emu_library_for_nodes(emu_lib: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node subprocesses started now (test/gpu/emu/emulated_node.py) load the session's emulator
    library instead of compiling their own (~2 s each)."""
    import pycuda_emu

    monkeypatch.setenv(pycuda_emu.PREBUILT_LIBRARY_ENV, emu_lib._name)
