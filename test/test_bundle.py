"""ModelBundle.load: every way a bundle can be missing or malformed gives a BundleError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compactinst_ros.bundle import ModelBundle
from compactinst_ros.errors import BundleError


@pytest.fixture
def bundle_copy(random_bundle: Path, tmp_path: Path) -> Path:
    """A private, editable copy of the session's random bundle."""
    return Path(shutil.copytree(random_bundle, tmp_path / "bundle"))


def _edit(root: Path, change) -> None:
    meta = json.loads((root / "bundle.json").read_text())
    change(meta)
    (root / "bundle.json").write_text(json.dumps(meta))


def test_valid_bundle_loads_and_round_trips(bundle_copy: Path) -> None:
    bundle = ModelBundle.load(bundle_copy, verify_hashes=True)
    assert bundle.name == "compactinst_demo" and bundle.mask_stride == 8
    assert len(bundle.fingerprint) == 16
    assert ModelBundle.from_json(bundle_copy, bundle.to_json()).stages == bundle.stages


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"does not exist.*compactinst export"):
        ModelBundle.load(tmp_path / "nowhere")


def test_missing_metadata(bundle_copy: Path) -> None:
    (bundle_copy / "bundle.json").unlink()
    with pytest.raises(BundleError, match=r"bundle\.json is missing"):
        ModelBundle.load(bundle_copy)


def test_bad_json(bundle_copy: Path) -> None:
    (bundle_copy / "bundle.json").write_text('{"format": 1,')
    with pytest.raises(BundleError, match="not valid JSON"):
        ModelBundle.load(bundle_copy)


def test_wrong_format(bundle_copy: Path) -> None:
    _edit(bundle_copy, lambda m: m.update(format=99))
    with pytest.raises(BundleError, match="format 99 is not supported"):
        ModelBundle.load(bundle_copy)


def test_missing_key(bundle_copy: Path) -> None:
    _edit(bundle_copy, lambda m: m.pop("stages"))
    with pytest.raises(BundleError, match="'stages' is missing"):
        ModelBundle.load(bundle_copy)


def test_missing_onnx_file(bundle_copy: Path) -> None:
    (bundle_copy / "decoder.onnx").unlink()
    with pytest.raises(BundleError, match=r"decoder\.onnx is missing"):
        ModelBundle.load(bundle_copy)


def test_label_count_mismatch(bundle_copy: Path) -> None:
    _edit(bundle_copy, lambda m: m["labels"].pop())
    with pytest.raises(BundleError, match="labels lists 7"):
        ModelBundle.load(bundle_copy)


def test_bad_size(bundle_copy: Path) -> None:
    _edit(bundle_copy, lambda m: m["input"].update(height=250))
    with pytest.raises(BundleError, match="multiples of 32"):
        ModelBundle.load(bundle_copy)


def test_sha_mismatch_only_with_verify(bundle_copy: Path) -> None:
    with open(bundle_copy / "encoder.onnx", "ab") as fh:
        fh.write(b"\0")
    ModelBundle.load(bundle_copy)  # hashes are not checked by default (fast start-up)
    with pytest.raises(BundleError, match=r"encoder\.onnx does not match its sha256"):
        ModelBundle.load(bundle_copy, verify_hashes=True)
