"""``compactinst ros`` against a real lifecycle node over DDS: the lifecycle, parameters, the
instance table, the latency record and the topic list, without the ros2 command line. One node
start (in a namespace, with the relative default input topic) serves every test: it starts on a
missing bundle, so its first configure fails, and is configured again after the tool sets the
model; the start-up log's input topic, outputs and demo-model caveat are checked on it too."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import threading
import time
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from ros_domains import next_domain
from ros_harness import Client, NodeProcess, cpu_node_params
from ros_messages import table_from_msg
from test_ros_node import image_msg, scene

from compactinst_ros import cli
from compactinst_ros.backends import BackendOptions
from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import STAGES, OutputSet, PostprocessOptions

pytest.importorskip("rclpy")
from sensor_msgs.msg import Image, PointCloud2

NAMESPACE = "/front"
NODE = f"{NAMESPACE}/compactinst"
CAMERA = f"{NAMESPACE}/image"  # the relative default image_topic, resolved in the namespace
TABLE = f"{NODE}/instance_table"
OPTIONS = dict(score_threshold=0.0, max_instances=20)


class Tool:
    """``compactinst ros ...`` run in this process on the node's domain: (exit code, stdout,
    stderr)."""

    def __init__(self, domain: int) -> None:
        self.domain = domain

    def __call__(self, *argv: str, timeout: float = 20.0) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        args = ["ros", "--domain-id", str(self.domain), "--timeout", str(timeout), *argv]
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(args)
        return code, out.getvalue(), err.getvalue()

    def while_streaming(self, client: Client, camera, *argv: str) -> tuple[int, str, str]:
        """Run the tool while the camera sends the same frame (a new stamp each) every 0.3 s."""
        result: list = []
        thread = threading.Thread(target=lambda: result.append(self(*argv)), daemon=True)
        thread.start()
        deadline = time.monotonic() + 40
        while thread.is_alive() and time.monotonic() < deadline:
            camera.publish(image_msg(FRAME, "bgr8"))
            thread.join(0.3)
        assert result, f"compactinst ros {' '.join(argv)} did not return"
        return result[0]


FRAME = scene(96, 128, 3)


@pytest.fixture(scope="module")
def ros(tmp_path_factory):
    """(node process, client, camera publisher, tool, the failed configure's outputs, configure
    and activate outputs): the lifecycle node in NAMESPACE, started on a missing bundle, given
    the model by the tool and driven to active by it."""
    domain = next_domain()
    missing = tmp_path_factory.mktemp("tool") / "no_bundle"
    params = cpu_node_params(str(missing), tracking=False, **OPTIONS)
    node = NodeProcess(domain, params, lifecycle=True, namespace=NAMESPACE)
    client = Client(domain)
    tool = Tool(domain)
    try:
        client.subscribe(PointCloud2, TABLE)
        camera = client.publisher(Image, CAMERA)
        failed = tool("lifecycle", NODE, "configure", timeout=60)
        assert tool("param-set", NODE, "model", str(default_bundle_path()))[0] == 0, node.tail()
        driven = [tool("lifecycle", NODE, step, timeout=60) for step in ("configure", "activate")]
        yield node, client, camera, tool, failed, driven
    finally:
        client.close()
        code = node.stop()
        assert code == 0, f"node exited with {code} after SIGINT:\n{node.log()}"


def test_a_failed_configure_says_why(ros):
    """The node's own reason (its ERROR line on /rosout) reaches the tool's user."""
    node, _, _, _, (code, _, err), _ = ros
    assert code == 1, node.tail()
    assert "configure from 'unconfigured' failed" in err
    assert "the node reports: configure failed: " in err and "no_bundle" in err, err


def test_lifecycle_goes_to_active(ros):
    node, _, _, tool, _, driven = ros
    assert driven == [
        (0, f"{NODE}: configure: unconfigured -> inactive\n", ""),
        (0, f"{NODE}: activate: inactive -> active\n", ""),
    ], node.tail()
    assert tool("lifecycle", NODE, "get") == (0, f"{NODE}: active\n", "")
    code, _, err = tool("lifecycle", NODE, "configure")  # no configure from active
    assert code == 1 and "configure from 'active' failed, the node is 'active'" in err
    code, _, err = tool("lifecycle", "/nobody", "get", timeout=1.0)
    assert code == 1 and "no node answers /nobody/get_state" in err and "no lifecycle" in err


def test_start_up_log_names_the_resolved_input_the_outputs_made_and_the_demo_model(ros):
    node = ros[0]
    log = node.log()
    loaded = next(line for line in log.splitlines() if "loaded compactinst_demo" in line)
    assert f"input: {CAMERA} (raw);" in loaded, loaded
    outputs = ast.literal_eval(re.search(r"outputs: (\[.*\])", loaded).group(1))
    has_vision_msgs = importlib.util.find_spec("vision_msgs") is not None
    assert ("detections" in outputs) == has_vision_msgs, (outputs, log)
    assert {"instance_mask", "instance_table", "latency", "overlay"} <= set(outputs)
    assert "model compactinst_demo: demo model, trained on synthetic field/road scenes only" in log
    assert "pass model:=/path/to/your/bundle for real use" in log


def table_of(client: Client, camera) -> np.ndarray:
    """The instance table of a frame sent now, as the client received it."""
    msg = image_msg(FRAME, "bgr8")
    camera.publish(msg)
    sec = msg.header.stamp.sec
    client.wait_for(lambda: client.stamped(TABLE, sec), 30, f"table of frame {sec}")
    return table_from_msg(client.stamped(TABLE, sec))


def test_param_set_takes_effect_and_a_refusal_names_the_reason(ros):
    _, client, camera, tool, *_ = ros
    client.wait_for(camera.get_subscription_count, 30, "node subscribed to the camera")
    assert len(table_of(client, camera)) > 0
    try:
        code, out, err = tool("param-set", NODE, "score_threshold", "1")  # an int for a double
        assert (code, out) == (0, f"{NODE}: score_threshold 0.0 -> 1.0\n"), err
        assert tool("param-get", NODE, "score_threshold")[1] == f"{NODE}: score_threshold = 1.0\n"
        assert len(table_of(client, camera)) == 0
        code, _, err = tool("param-set", NODE, "score_threshold", "1.5")
        assert code == 1 and "refused score_threshold:=1.5" in err and "out of range" in err
        code, _, err = tool("param-set", NODE, "score_threshold", "high")
        assert code == 2 and "'high' is not a double" in err  # usage
    finally:
        assert tool("param-set", NODE, "score_threshold", "0.0")[0] == 0
    assert len(table_of(client, camera)) > 0


def test_table_rows_equal_the_pipelines_instances(ros):
    _, client, camera, tool, *_ = ros
    code, out, err = tool.while_streaming(client, camera, "table", NODE, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["frame_id"] == "camera_bgr8"
    rows = record["rows"]
    options = PostprocessOptions(**OPTIONS)
    with Pipeline(default_bundle_path(), "onnxruntime", options, BackendOptions(threads=1)) as run:
        expected = run(FRAME, "bgr8", OutputSet(instance=True)).instances
        classes = dict(zip(run.bundle.labels.ids, run.bundle.labels.names, strict=True))
    assert len(rows) == len(expected.ids) > 0
    assert [r["id"] for r in rows] == expected.ids.tolist()
    assert [r["label_id"] for r in rows] == expected.label_id.tolist()
    assert [r["class"] for r in rows] == [classes[i] for i in expected.label_id.tolist()]
    assert [r["area"] for r in rows] == expected.area.tolist()
    np.testing.assert_allclose([r["score"] for r in rows], expected.score, rtol=1e-5)
    boxes = [[r[k] for k in ("x0", "y0", "x1", "y1")] for r in rows]
    np.testing.assert_allclose(boxes, expected.box.reshape(-1, 4), atol=1e-3)
    code, out, _ = tool.while_streaming(client, camera, "table", TABLE)
    assert code == 0 and f"{TABLE} stamp" in out and out.count("\n") == len(rows) + 2


def test_latency_reads_the_stamped_record(ros):
    _, client, camera, tool, *_ = ros
    code, out, err = tool.while_streaming(client, camera, "latency", NODE, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert set(record["ms"]) == set(STAGES)
    assert all(v > 0 for v in record["ms"].values()), record
    assert record["delay_ms"] >= record["ms"]["node"] > 0


def test_topics_lists_the_nodes_publishers_and_input(ros):
    _, client, camera, tool, *_ = ros
    client.wait_for(camera.get_subscription_count, 30, "node subscribed to the camera")
    code, out, err = tool("topics", NODE)
    assert code == 0, err
    assert f"{TABLE} [sensor_msgs/msg/PointCloud2]" in out.splitlines()
    assert f"{CAMERA} [sensor_msgs/msg/Image]" in out.splitlines()
    code, _, err = tool("topics", "/nobody", timeout=1.0)
    assert code == 1 and "no node /nobody" in err


def test_diagnostics_shows_the_node_s_status_and_its_counters(ros):
    _, client, camera, tool, *_ = ros
    code, out, err = tool.while_streaming(client, camera, "diagnostics", NODE, "--json")
    assert code == 0, err
    status = json.loads(out.splitlines()[0])
    assert status["name"] == f"{NODE}: segmentation" and status["level"] in ("OK", "WARN")
    assert int(status["values"]["frames_received"]) > 0 and "last_error" in status["values"]
    code, out, err = tool("diagnostics", NODE)
    assert code == 0 and out.startswith(("OK ", "WARN ")) and "  frames_processed: " in out, err
    code, _, err = tool("diagnostics", "/nobody", timeout=1.0)
    assert code == 1 and "0 of 1 messages on /diagnostics" in err
