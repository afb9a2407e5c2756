"""``compactinst infer``: overlay PNG + JSON per image through the real CLI entry point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from compactinst_ros.bundle import ModelBundle, default_bundle_path, model_caveat
from compactinst_ros.cli import main
from compactinst_ros.errors import BundleError
from compactinst_ros.infer import output_stems


def test_infer_writes_overlay_and_json(random_bundle: Path, tmp_path: Path, capsys) -> None:
    image = np.zeros((180, 260, 3), np.uint8)
    cv2.circle(image, (90, 90), 50, (0, 0, 255), -1)
    path = tmp_path / "frame.png"
    cv2.imwrite(str(path), image)
    out = tmp_path / "out"
    code = main(
        [
            "infer",
            "--model",
            str(random_bundle),
            "--backend",
            "onnxruntime",
            "--threads",
            "1",
            "--score-threshold",
            "0",
            "--out",
            str(out),
            str(path),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "[1/1]" in printed
    overlay = cv2.imread(str(out / "frame_overlay.png"))
    assert overlay.shape == (180, 260, 3)
    assert not np.array_equal(overlay, image)
    record = json.loads((out / "frame.json").read_text())
    assert (record["height"], record["width"]) == (180, 260)
    assert record["backend"] == "onnxruntime" and record["model"] == "compactinst_demo"
    assert record["instances"], "score threshold 0 keeps instances"
    first = record["instances"][0]
    assert set(first) == {"id", "label", "name", "score", "box", "area", "segmentation"}
    assert first["id"] == 1 and len(first["box"]) == 4 and first["area"] > 0
    scores = [i["score"] for i in record["instances"]]
    assert scores == sorted(scores, reverse=True)
    stages = {"preprocess", "encoder", "decoder", "postprocess", "inference"}
    assert stages <= set(record["timings_ms"])
    assert isinstance(record["segments"], list)


def test_a_batch_keeps_same_named_results_and_goes_past_a_bad_file(
    random_bundle: Path, tmp_path: Path, capfd
) -> None:
    images = []
    for folder, colour in (("a", (0, 0, 255)), ("b", (255, 0, 0))):
        image = np.zeros((64, 96, 3), np.uint8)
        cv2.circle(image, (40, 30), 20, colour, -1)
        (tmp_path / folder).mkdir()
        cv2.imwrite(str(tmp_path / folder / "000000.png"), image)
        images.append(tmp_path / folder / "000000.png")
    (tmp_path / "a" / "bad.png").write_bytes(b"not an image")
    (tmp_path / "a" / "empty.jpg").write_bytes(b"")
    batch = [images[0], tmp_path / "a" / "bad.png", tmp_path / "a" / "gone.png"]
    batch += [tmp_path / "a" / "empty.jpg", images[1]]
    out = tmp_path / "out"
    code = main(["infer", "--model", str(random_bundle), "--out", str(out), *map(str, batch)])
    printed = capfd.readouterr()
    assert code == 1, printed
    assert "[ WARN" not in printed.err  # OpenCV's own log stays out (fd 2 is captured)
    assert "bad.png: skipped: cannot read image" in printed.err
    assert "gone.png: skipped: cannot read image" in printed.err and "no such file" in printed.err
    assert "3 of 5 images failed" in printed.err
    first = json.loads((out / "a" / "000000.json").read_text())
    second = json.loads((out / "b" / "000000.json").read_text())
    assert (first["image"], second["image"]) == (str(images[0]), str(images[1]))
    for written in ("a/000000.json", "a/000000_overlay.png", "b/000000.json"):
        assert str(out / written) in printed.out  # every file written is printed


def test_output_stems_never_collide() -> None:
    stems = output_stems(["x/a/0.jpg", "x/b/0.jpg", "x/a/1.png", "x/a/1.jpg", "x/a/2.png"])
    assert [s.as_posix() for s in stems] == ["a/0", "b/0", "a/1_png", "a/1_jpg", "a/2"]
    assert [s.as_posix() for s in output_stems(["one/0.png"])] == ["0"]


def test_the_demo_model_says_what_it_knows(tmp_path: Path, capsys) -> None:
    model = default_bundle_path()
    assert model is not None
    caveat = model_caveat(ModelBundle.load(model, verify_hashes=False))
    assert caveat and "synthetic field/road scenes only" in caveat
    image = tmp_path / "photo.png"
    cv2.imwrite(str(image), np.full((48, 64, 3), 128, np.uint8))
    out = tmp_path / "out"
    assert main(["infer", "--model", str(model), "--out", str(out), str(image)]) == 0
    assert f"note: {caveat}" in capsys.readouterr().out
    assert json.loads((out / "photo.json").read_text())["model_caveat"] == caveat


def test_missing_bundle_fails_cleanly(tmp_path: Path, capsys) -> None:
    code = main(["infer", "--model", str(tmp_path / "none"), str(tmp_path / "x.png")])
    assert code == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_bundle_without_int8_ranges_still_runs_fp32(tmp_path: Path, capsys) -> None:
    """A copy of the default bundle without its INT8 calibration ranges (e.g. copied to a car
    without the recipe files) runs FP32; only asking for INT8 names the missing file and the
    fix."""
    model = default_bundle_path()
    assert model is not None
    copy = tmp_path / "model"
    shutil.copytree(model, copy, ignore=shutil.ignore_patterns("int8_ranges.*"))
    assert not list(copy.glob("int8_ranges.*")) and list(model.glob("int8_ranges.*"))
    image = tmp_path / "photo.png"
    cv2.imwrite(str(image), np.full((48, 64, 3), 128, np.uint8))
    out = tmp_path / "out"
    code = main(["infer", "--model", str(copy), "--out", str(out), str(image)])
    assert code == 0, capsys.readouterr().err
    assert (out / "photo.json").is_file()
    bundle = ModelBundle.load(copy)
    assert "int8" not in bundle.precisions and "fp16" in bundle.precisions
    with pytest.raises(BundleError, match=r"int8_ranges\.encoder\.json .* is missing.*quantize"):
        bundle.stage_graph("encoder", "int8", "cpu")


def test_a_folder_is_its_images_and_the_model_defaults_to_models_default(tmp_path, capsys):
    """As replay does, infer runs the embedded model without --model; a folder argument
    stands for the images in it (it was refused as "no such file")."""
    for name in ("b.png", "a.jpg"):
        cv2.imwrite(str(tmp_path / name), np.full((48, 64, 3), 100, np.uint8))
    (tmp_path / "notes.txt").write_text("not an image")
    out = tmp_path / "out"
    assert main(["infer", "--out", str(out), str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "model compactinst_demo" in printed
    assert "[1/2]" in printed and "[2/2]" in printed and "notes.txt" not in printed
    assert {p.name for p in out.glob("*.json")} == {"a.json", "b.json", "coco_results.json"}
    (tmp_path / "empty").mkdir()
    assert main(["infer", "--out", str(out), str(tmp_path / "empty")]) == 1
    assert "holds no image OpenCV can decode" in capsys.readouterr().err


def test_infer_writes_masks_in_coco_formats_reads_what_opencv_reads_and_warns_on_mono(
    tmp_path, capsys
) -> None:
    """Instance and panoptic PNGs and COCO RLE results (which pycocotools reads back as the
    instance raster's masks); TIFF and WebP in a folder are images, a text file is named as
    left out, and a 16-bit greyscale PNG is segmented with the mono warning."""
    pycocotools = pytest.importorskip("pycocotools.mask")  # not in the runtime-only lane
    from pycocotools.coco import COCO

    from compactinst_ros.coco import rgb_to_id
    from compactinst_ros.train.synthetic import render_scene

    scene = render_scene(1, 3, 256, 384)
    for name in ("a.tif", "b.webp"):
        assert cv2.imwrite(str(tmp_path / name), scene.image)
    grey = cv2.cvtColor(scene.image, cv2.COLOR_BGR2GRAY).astype(np.uint16) * 257
    cv2.imwrite(str(tmp_path / "c.png"), grey)
    (tmp_path / "notes.txt").write_text("not an image")
    out = tmp_path / "out"
    assert main(["infer", "--out", str(out), str(tmp_path)]) == 0
    printed = capsys.readouterr()
    assert "[3/3]" in printed.out and "left out: " in printed.err and "notes.txt" in printed.err
    assert "c.png: the input is single-channel (mono)" in printed.err
    assert "a.tif" not in printed.err and "b.webp" not in printed.err
    record = json.loads((out / "a.json").read_text())
    raster = cv2.imread(str(out / "a_instances.png"), cv2.IMREAD_UNCHANGED)
    assert raster.dtype == np.uint16 and record["instances"]
    for inst in record["instances"]:
        mask = pycocotools.decode(inst["segmentation"]).astype(bool)
        np.testing.assert_array_equal(mask, raster == inst["id"])
        assert int(mask.sum()) == inst["area"]
    panoptic = rgb_to_id(cv2.imread(str(out / "a_panoptic.png"))[..., ::-1])
    assert set(np.unique(panoptic)) - {0} == {s["id"] for s in record["segments"]}
    results = json.loads((out / "coco_results.json").read_text())
    gt = COCO()
    gt.dataset = {
        "images": [{"id": n, "height": 256, "width": 384} for n in (1, 2, 3)],
        "categories": [{"id": i} for i in range(1, 9)], "annotations": [],
    }  # fmt: skip
    gt.createIndex()
    loaded = gt.loadRes(results)
    assert len(loaded.getAnnIds(imgIds=[1])) == len(record["instances"])
