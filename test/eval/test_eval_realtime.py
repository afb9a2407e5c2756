"""Realtime replay against the real node subprocess over ROS (DDS on loopback)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from eval_helpers import make_scenes, oracle_result, scene_bag

from compactinst_ros.errors import BackendError
from compactinst_ros.eval.bags import ImageBag
from compactinst_ros.eval.realtime import recorded_result, run_realtime


def test_realtime_reports_drops_when_the_node_is_slower_than_the_bag(random_bundle, tmp_path):
    scenes = make_scenes(16, 96, 128, seed=5)  # recorded at 10 Hz
    bag = scene_bag(scenes, tmp_path / "bag", "mcap")
    domain = 150 + os.getpid() % 50
    out_bag = tmp_path / "outputs"
    with ImageBag(bag) as b:
        block, facts = run_realtime(
            b,
            random_bundle,
            "onnxruntime",
            rate=20.0,
            output_bag=out_bag,
            warmup=1,
            progress=False,
            domain_id=domain,
            log_path=tmp_path / "node.log",
            node_params={"ort_threads": "1"},
        )
    log = (tmp_path / "node.log").read_text()
    frames = block["frames"]
    assert frames["sent"] == 16, log
    assert 1 <= frames["processed"] < 16, (frames, log)
    assert frames["dropped"] == 16 - frames["processed"] > 0
    assert frames["drop_pct"] > 0
    assert block["throughput"]["target_input_fps"] == 200.0
    assert "end_to_end" in block["latency"] and "encoder" in block["latency"]
    assert block["latency"]["end_to_end"]["p50"] >= block["latency"]["encoder"]["p50"]
    assert facts["backend"] == "onnxruntime" and facts["model_fingerprint"]
    assert block["node_exit_code"] == 0, log
    with ImageBag(out_bag, "/compactinst/instance_mask") as outputs:
        assert outputs.count >= 1
        assert set(outputs.image_topics) >= {
            "/compactinst/instance_mask",
            "/compactinst_replay/image",
        }


def test_realtime_node_that_cannot_start_is_a_clear_error(tmp_path):
    scenes = make_scenes(2, 48, 64)
    bag = scene_bag(scenes, tmp_path / "bag", "sqlite3")
    broken = tmp_path / "broken_bundle"
    broken.mkdir()
    with ImageBag(bag) as b, pytest.raises(BackendError, match=r"exited with code 1 before") as err:
        run_realtime(
            b,
            broken,
            "onnxruntime",
            progress=False,
            domain_id=199,
            log_path=tmp_path / "node.log",
            ready_timeout=60,
        )
    assert "bundle.json is missing" in str(err.value)


def test_the_published_outputs_give_back_the_result_they_came_from() -> None:
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Header

    from compactinst_ros.ros import convert

    scene = make_scenes(1, 48, 64, seed=3)[0]
    result = oracle_result(scene)
    header = Header()
    outputs = {
        "instance_mask": convert.image_msg(result.instance_raster, header),
        "panoptic": convert.image_msg(result.panoptic_raster, header),
        "semantic": convert.image_msg(result.semantic_raster, header),
        "instance_table": convert.instance_table_msg(header, result.instances),
    }
    back = recorded_result({k: serialize_message(m) for k, m in outputs.items()})
    np.testing.assert_array_equal(back.instance_raster, result.instance_raster)
    np.testing.assert_array_equal(back.panoptic_raster, result.panoptic_raster)
    np.testing.assert_array_equal(back.semantic_raster, result.semantic_raster)
    for name in ("ids", "label_id", "score", "box", "area"):
        np.testing.assert_array_equal(
            getattr(back.instances, name), getattr(result.instances, name)
        )

    def labels(s) -> dict:
        return dict(zip(s.ids.tolist(), s.label_id.tolist(), strict=True))

    assert labels(back.segments) == labels(result.segments)
    assert (back.meta.src_h, back.meta.src_w) == scene.panoptic.shape
