"""The roofline preset of the GPU a measurement ran on: CUDA calls every Jetson Orin module
"Orin", so the module comes from the device tree (a fake /proc root here), else the SM count;
a GPU no preset fits gets none, never another device's peaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactinst_ros.bench.devices import DEVICES, JETSON_MODULES, identify_device

#: /proc/device-tree ``model`` and ``compatible`` as L4T writes them. Model strings as reported
#: by Orin owners (jetson-stats' ``jetson_release``, kernel "Machine model:" lines) for L4T 35
#: and 36; compatible lists from L4T's tegra234 device trees (carrier+module, module, SoC).
BOARDS = {
    "orin nano devkit, L4T 35": (
        "NVIDIA Orin Nano Developer Kit",
        ["nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"],
    ),
    "orin nano devkit super, L4T 36": (
        "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
        ["nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"],
    ),
    "orin nx 16GB, L4T 36": (
        "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
        ["nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", "nvidia,tegra234"],
    ),
    "agx orin 64GB devkit, L4T 36": (
        "NVIDIA Jetson AGX Orin Developer Kit",
        ["nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234"],
    ),
}


def fake_root(tmp_path: Path, model: str | None, compatible: list[str] | None) -> Path:
    """A folder with proc/device-tree/{model,compatible} NUL-terminated, as the kernel has them."""
    tree = tmp_path / "proc" / "device-tree"
    tree.mkdir(parents=True)
    if model is not None:
        (tree / "model").write_bytes(model.encode() + b"\0")
    if compatible is not None:
        (tree / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in compatible))
    return tmp_path


@pytest.mark.parametrize(
    "board, sms, preset",
    [
        ("orin nano devkit, L4T 35", 8, "orin-nano"),
        ("orin nano devkit super, L4T 36", 8, "orin-nano"),
        ("orin nx 16GB, L4T 36", 8, None),
        ("agx orin 64GB devkit, L4T 36", 16, "agx-orin"),
    ],
)
def test_jetson_module_from_the_device_tree(
    tmp_path: Path, board: str, sms: int, preset: str | None
) -> None:
    model, compatible = BOARDS[board]
    found = identify_device("Orin", sms, fake_root(tmp_path, model, compatible))
    assert found.preset == preset, found
    assert "device tree compatible" in found.evidence
    assert f"preset {preset or 'none'}" in found.label()


def test_model_alone_names_the_family(tmp_path: Path) -> None:
    """A carrier board whose compatible list lacks the module's part number."""
    root = fake_root(tmp_path, "NVIDIA Jetson AGX Orin Developer Kit", ["acme,carrier"])
    assert identify_device("Orin", 16, root).preset == "agx-orin"
    assert identify_device("Orin", 14, root).preset is None  # 32GB module, 1792 cores
    nano = fake_root(tmp_path / "nano", "NVIDIA Orin Nano Developer Kit", None)
    assert identify_device("Orin", 8, nano).preset == "orin-nano"
    assert identify_device("Orin", 4, nano).module == "Jetson Orin Nano 4GB"


def test_sm_count_alone_without_a_device_tree(tmp_path: Path) -> None:
    """In a container without /proc/device-tree: 16 SMs is only AGX Orin; 8 SMs is Orin Nano
    8GB or Orin NX, which need different presets, so none is taken."""
    assert identify_device("Orin", 16, tmp_path).preset == "agx-orin"
    eight = identify_device("Orin", 8, tmp_path)
    assert eight.preset is None and "Orin NX" in eight.module
    assert "no device tree model" in eight.evidence


def test_a_module_with_unexpected_sms_gets_no_preset(tmp_path: Path) -> None:
    model, compatible = BOARDS["orin nano devkit, L4T 35"]
    found = identify_device("Orin", 4, fake_root(tmp_path, model, compatible))
    assert found.preset is None and "4 SMs, not 8" in found.module


def test_discrete_gpus_by_name_and_unknown_ones_get_none(tmp_path: Path) -> None:
    assert identify_device("NVIDIA H200", 132, tmp_path).preset == "h200"
    assert identify_device("NVIDIA RTX A4000", 48, tmp_path).preset == "rtx-a4000"
    assert identify_device("NVIDIA GeForce RTX 4090", 128, tmp_path).preset is None


def test_every_module_preset_exists() -> None:
    assert {p for _, _, p in JETSON_MODULES.values() if p} <= set(DEVICES)
