"""The docs print what the program prints: the demo summary's model fingerprint and bag hash,
and the default model's parameter count, recomputed the way the program computes them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compactinst_ros.bundle import ModelBundle, default_bundle_path

ROOT = Path(__file__).resolve().parents[1]
#: files that show a demo summary (``model NAME [FINGERPRINT] on ...``)
SUMMARIES = ("README.md", "docs/replay.md")


def shown(pattern: str, *files: str) -> set[str]:
    found: set[str] = set()
    for name in files:
        found |= set(re.findall(pattern, (ROOT / name).read_text()))
    return found


def test_demo_summaries_show_the_shipped_model_s_fingerprint() -> None:
    fingerprint = ModelBundle.load(default_bundle_path()).fingerprint  # as replay prints it
    assert shown(r"model compactinst_demo \[([0-9a-f]{16})\]", *SUMMARIES) == {fingerprint}


def test_demo_summaries_show_the_demo_bag_s_hash(tmp_path) -> None:
    from compactinst_ros import demo
    from compactinst_ros.eval.bags import bag_hash

    defaults = demo.build_parser().parse_args([])
    size = tuple(int(v) for v in defaults.size.split("x"))
    data = demo.build_demo_data(tmp_path, defaults.frames, defaults.seed, size, defaults.fps)
    hashes = shown(r"bag out/demo_data/bag \[([0-9a-f]{16})\]", *SUMMARIES)
    assert hashes == {bag_hash(data["bag"])}


def test_readme_parameter_count_of_the_default_model() -> None:
    pytest.importorskip("torch")
    from compactinst_ros.model import build_model

    bundle = ModelBundle.load(default_bundle_path(), verify_hashes=False)
    model = build_model("compactinst_demo", num_classes=bundle.labels.num_classes)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    (documented,) = shown(r"CompactInst-demo, ([0-9.]+) M parameters", "README.md")
    assert float(documented) == round(millions, 1)
