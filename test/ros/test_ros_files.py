"""The launch files, parameter YAML and rviz config agree with the node's declared parameters.

These checks parse the launch files, so they run without launch/launch_ros installed;
test_launch.py runs them for real where those are.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from compactinst_ros.ros.params import OUTPUTS, PARAMETERS, read_config

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch" / "compactinst.launch.py"
MULTI_LAUNCH = REPO / "launch" / "compactinst_multi.launch.py"
#: parameters rclpy declares on every node
RCLPY_PARAMETERS = {"use_sim_time"}


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
    ]


def _kw(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def _assigned(tree: ast.Module, name: str) -> ast.expr:
    return next(
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets)
    )


def _argument_table(node: ast.AST) -> dict[str, ast.expr]:
    """(name, default, description) tuples under ``node``: name -> default expression."""
    return {
        t.elts[0].value: t.elts[1]
        for t in ast.walk(node)
        if isinstance(t, ast.Tuple)
        and len(t.elts) == 3
        and isinstance(t.elts[0], ast.Constant)
        and isinstance(t.elts[0].value, str)
    }


def test_launch_arguments_and_parameters_match_the_node():
    tree = ast.parse(LAUNCH.read_text())
    declare = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "declared_arguments"
    )
    declared = _argument_table(declare)
    assert {
        "model",
        "image_topic",
        "backend",
        "params_file",
        "rviz",
        "namespace",
        "node_name",
        "use_sim_time",
        "lifecycle",
        "fastdds_profile",
    } <= set(declared)
    used = {
        c.args[0].value
        for c in _calls(tree, "LaunchConfiguration")
        if c.args and isinstance(c.args[0], ast.Constant)
    }
    assert used <= set(declared), f"undeclared launch arguments {used - set(declared)}"
    overridable = {k.value for k in _assigned(tree, "PARAMETER_ARGUMENTS").keys}
    known = set(PARAMETERS) | RCLPY_PARAMETERS
    assert overridable <= known, f"unknown node parameters {overridable - known}"
    assert overridable <= set(declared)
    for name in overridable:
        assert ast.literal_eval(declared[name]) == "", f"{name}: a default would override the YAML"
    executables = {
        _kw(c, "executable").value
        for c in _calls(tree, "Node") + _calls(tree, "LifecycleNode")
        if _kw(c, "executable") is not None
    }
    assert {"compactinst_node", "compactinst_lifecycle_node"} <= executables
    assert "compactinst_ros.dds_env" in LAUNCH.read_text()  # both profile names, a site's kept
    assert "fastdds_shm.xml" in LAUNCH.read_text()


def test_multi_camera_launch_passes_only_arguments_the_single_launch_declares():
    single = _argument_table(ast.parse(LAUNCH.read_text()))
    tree = ast.parse(MULTI_LAUNCH.read_text())
    shared = set(_argument_table(_assigned(tree, "SHARED_ARGUMENTS")))
    camera_keys = set(ast.literal_eval(_assigned(tree, "CAMERA_KEYS")))
    assert shared and shared <= set(single)
    assert camera_keys == {"namespace", "image_topic", "camera_info_topic"}
    assert camera_keys <= set(single)


def test_parameter_yaml_lists_every_parameter_with_its_default():
    data = yaml.safe_load((REPO / "config" / "compactinst.yaml").read_text())
    values = data["/**"]["ros__parameters"]
    assert set(values) == set(PARAMETERS)
    for name, spec in PARAMETERS.items():
        assert values[name] == spec.default, name
    config = read_config({**values, "model": "/some/bundle"})
    assert config.outputs == frozenset(OUTPUTS)


def test_rviz_config_shows_node_outputs():
    data = yaml.safe_load((REPO / "rviz" / "compactinst.rviz").read_text())
    topics = {d["Topic"]["Value"] for d in data["Visualization Manager"]["Displays"]}
    shown = {"/compactinst/overlay", "/compactinst/instance_mask", "/compactinst/panoptic/color"}
    assert shown <= topics  # the 32SC1 panoptic raster through its colour image (rviz2 draws it)


def test_fastdds_profile_has_a_32mb_shared_memory_segment():
    import xml.etree.ElementTree as ET

    ns = {"f": "http://www.eprosima.com"}
    root = ET.parse(REPO / "config" / "fastdds_shm.xml").getroot()
    shm = [
        t
        for t in root.iterfind(".//f:transport_descriptor", ns)
        if t.findtext("f:type", namespaces=ns) == "SHM"
    ]
    assert len(shm) == 1
    assert int(shm[0].findtext("f:segment_size", namespaces=ns)) >= 32 << 20
    participant = root.find(".//f:participant", ns)
    assert participant.get("is_default_profile") == "true"
