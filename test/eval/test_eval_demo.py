"""The demo end to end on a few frames: cached deterministic bag, both replay modes, outputs."""

from __future__ import annotations

import json

from compactinst_ros import demo
from compactinst_ros.eval.bags import bag_hash


def test_demo_data_is_deterministic_and_cached(tmp_path) -> None:
    a = demo.build_demo_data(tmp_path / "a", 3, 7, (64, 96), 10.0)
    b = demo.build_demo_data(tmp_path / "b", 3, 7, (64, 96), 10.0)
    assert bag_hash(a["bag"]) == bag_hash(b["bag"])
    mtime = (a["bag"] / "metadata.yaml").stat().st_mtime_ns
    again = demo.build_demo_data(tmp_path / "a", 3, 7, (64, 96), 10.0)
    assert (again["bag"] / "metadata.yaml").stat().st_mtime_ns == mtime
    gt = json.loads(a["gt_instances"].read_text())
    assert [e["stamp_ns"] for e in gt["images"]] == [demo.T0_NS + i * 100_000_000 for i in range(3)]


def test_demo_runs_both_modes(random_bundle, tmp_path, capsys) -> None:
    # the realtime replay picks a private ROS domain of its own (not ROS_DOMAIN_ID)
    out = tmp_path / "demo"
    argv = [
        "--out",
        str(out),
        "--data",
        str(tmp_path / "data"),
        "--model",
        str(random_bundle),
        "--frames",
        "6",
        "--size",
        "96x128",
        "--backend",
        "onnxruntime",
        "--quiet",
    ]
    assert demo.main(argv) == 0
    printed = capsys.readouterr().out
    assert "--- lockstep ---" in printed and "--- realtime ---" in printed
    assert "accuracy: mask AP" in printed and "end_to_end" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["modes"]["lockstep"]["frames"]["processed"] == 6
    assert report["modes"]["realtime"]["frames"]["sent"] == 6
    assert report["modes"]["realtime"]["frames"]["processed"] >= 1
    assert len(list((out / "overlays").glob("*.png"))) == 4
    assert (out / "output_bag" / "metadata.yaml").is_file()
    assert all((out / p).is_file() for p in report["plots"])
