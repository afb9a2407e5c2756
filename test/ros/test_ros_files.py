"""The launch file, parameter YAML and rviz config agree with the node's declared parameters.

launch/launch_ros are not installable here, so the launch file is checked by parsing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from compactinst_ros.ros.params import OUTPUTS, PARAMETERS, read_config

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch" / "compactinst.launch.py"


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
    ]


def _kw(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def test_launch_arguments_and_parameters_match_the_node():
    tree = ast.parse(LAUNCH.read_text())
    declared = {c.args[0].value for c in _calls(tree, "DeclareLaunchArgument")}
    assert {"model", "image_topic", "backend", "params_file", "rviz"} <= declared
    used = {c.args[0].value for c in _calls(tree, "LaunchConfiguration")}
    assert used <= declared, f"undeclared launch arguments {used - declared}"
    nodes = [c for c in _calls(tree, "Node") if _kw(c, "executable").value == "compactinst_node"]
    assert len(nodes) == 1
    params = _kw(nodes[0], "parameters")
    dicts = [e for e in params.elts if isinstance(e, ast.Dict)]
    keys = {k.value for d in dicts for k in d.keys}
    assert keys and keys <= set(PARAMETERS), f"unknown node parameters {keys - set(PARAMETERS)}"
    for d in dicts:
        for k, v in zip(d.keys, d.values, strict=True):
            assert v.args[0].value in declared and v.args[0].value == k.value
    env = _calls(tree, "SetEnvironmentVariable")
    assert [e.args[0].value for e in env] == ["FASTDDS_DEFAULT_PROFILES_FILE"]
    assert "fastdds_shm.xml" in LAUNCH.read_text()


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
