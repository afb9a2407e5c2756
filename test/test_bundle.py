"""ModelBundle.load: every way a bundle can be missing or malformed gives a BundleError."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path

import pytest

from compactinst_ros.bundle import ModelBundle, default_bundle_path, record_hashes, sha256_file
from compactinst_ros.cli import main
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


def test_sha_mismatch_is_refused_by_default(bundle_copy: Path) -> None:
    with open(bundle_copy / "encoder.onnx", "ab") as fh:
        fh.write(b"\0")
    ModelBundle.load(bundle_copy, verify_hashes=False)  # explicit opt-out still loads
    with pytest.raises(BundleError, match=r"encoder\.onnx does not match its sha256"):
        ModelBundle.load(bundle_copy)


@pytest.mark.parametrize(
    "file",
    ["../outside.onnx", "sub/../../outside.onnx", "{outside}", "link.onnx"],
)
def test_stage_file_must_stay_inside_the_bundle(bundle_copy: Path, file: str) -> None:
    outside = bundle_copy.parent / "outside.onnx"
    shutil.copy(bundle_copy / "decoder.onnx", outside)
    (bundle_copy / "link.onnx").symlink_to(outside)
    file = file.format(outside=outside)  # an absolute path
    _edit(bundle_copy, lambda m: m["stages"][1].update(file=file, sha256=sha256_file(outside)))
    with pytest.raises(BundleError, match=r"stage 'decoder' file .* outside the bundle folder"):
        ModelBundle.load(bundle_copy)
    with pytest.raises(BundleError, match="outside the bundle folder"):
        record_hashes(bundle_copy)


def test_symlink_inside_the_bundle_is_allowed(bundle_copy: Path) -> None:
    (bundle_copy / "models").mkdir()
    (bundle_copy / "decoder.onnx").rename(bundle_copy / "models" / "decoder.onnx")
    (bundle_copy / "decoder.onnx").symlink_to(Path("models") / "decoder.onnx")
    assert ModelBundle.load(bundle_copy).stage("decoder").path == bundle_copy / "decoder.onnx"


def test_bundle_without_hashes_warns_with_the_fix(bundle_copy: Path) -> None:
    _edit(bundle_copy, lambda m: [stage.pop("sha256") for stage in m["stages"]])
    with pytest.warns(UserWarning, match=rf"no sha256.*'compactinst bundle-hash {bundle_copy}'"):
        ModelBundle.load(bundle_copy)
    assert main(["bundle-hash", str(bundle_copy)]) == 0
    bundle = ModelBundle.load(bundle_copy)
    assert [s.sha256 for s in bundle.stages] == [sha256_file(s.path) for s in bundle.stages]


def test_bundle_hash_keeps_other_keys_and_refuses_mismatch_without_update(
    bundle_copy: Path,
) -> None:
    _edit(bundle_copy, lambda m: m.update(note="kept"))
    with open(bundle_copy / "encoder.onnx", "ab") as fh:
        fh.write(b"\0")
    assert main(["bundle-hash", str(bundle_copy)]) == 1  # CompactInstError -> exit status 1
    with pytest.raises(BundleError, match="--update"):
        record_hashes(bundle_copy)
    hashes = record_hashes(bundle_copy, update=True)
    assert hashes["encoder"] == sha256_file(bundle_copy / "encoder.onnx")
    assert json.loads((bundle_copy / "bundle.json").read_text())["note"] == "kept"
    ModelBundle.load(bundle_copy)


def test_default_bundle_loads_verified_and_hashing_is_cheap() -> None:
    root = default_bundle_path()
    assert root is not None, "models/default is part of the checkout"
    bundle = ModelBundle.load(root)
    assert all(len(s.sha256) == 64 for s in bundle.stages)
    size_mb = sum(os.path.getsize(s.path) for s in bundle.stages) / 1e6
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        ModelBundle.load(root)
        runs.append(time.perf_counter() - start)
    # sha256 runs at >= 300 MB/s on any core this ships to; 2 s allows for a loaded machine
    assert statistics.median(runs) < 2.0, f"{size_mb:.1f} MB verified in {runs} s"
