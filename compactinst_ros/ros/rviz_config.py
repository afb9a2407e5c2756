"""The rviz2 view of one node, generated from the shipped rviz/compactinst.rviz at launch time.

The shipped file is both the template and the view of a node with the defaults (``/compactinst``,
input ``/image``). ``render_rviz_config`` points its displays at another node's outputs (its
namespace and name), at the input topic as the node resolves it, and fixes the view on the
camera's ``frame_id`` (image displays need no tf, so no ``map`` frame has to exist).

Every display shows an encoding rviz2's image display draws on Humble (its
``ros_image_texture.cpp``): bgr8 for the camera-sized colour images and the overlay, mono16 for
the instance ids. The 32SC1 panoptic raster and the mono8 semantic label ids are shown through
their bgr8 colour images (``~/panoptic/color``, ``~/semantic/color``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from rclpy.expand_topic_name import expand_topic_name

#: topics of the shipped file that name the node's outputs and the camera input
TEMPLATE_NODE = "/compactinst"
TEMPLATE_IMAGE_TOPIC = "/image"


def rviz_topics(config_text: str) -> dict[str, str]:
    """Display name -> topic of every display of an rviz config."""
    data = yaml.safe_load(config_text)
    return {d["Name"]: d["Topic"]["Value"] for d in data["Visualization Manager"]["Displays"]}


def render_rviz_config(
    template_text: str,
    namespace: str = "/",
    node_name: str = "compactinst",
    image_topic: str = "image",
    frame_id: str = "camera",
) -> str:
    """The template with its topics moved to node ``namespace``/``node_name`` (``image_topic``
    resolved as the node resolves it: relative names in its namespace) and fixed frame
    ``frame_id``."""
    namespace = "/" + namespace.strip("/")
    node = expand_topic_name("~", node_name, namespace)
    camera = expand_topic_name(image_topic, node_name, namespace)
    data = yaml.safe_load(template_text)
    view = data["Visualization Manager"]
    for display in view["Displays"]:
        topic = display["Topic"]["Value"]
        if topic == TEMPLATE_IMAGE_TOPIC:
            display["Topic"]["Value"] = camera
        elif topic.startswith(TEMPLATE_NODE + "/"):
            display["Topic"]["Value"] = node + topic[len(TEMPLATE_NODE) :]
    view["Global Options"]["Fixed Frame"] = frame_id
    header = f"# rviz2 view of {node} (input {camera}), generated from rviz/compactinst.rviz\n"
    return header + yaml.safe_dump(data, sort_keys=False)


def params_file_value(path: str | Path, name: str, default: str) -> str:
    """Parameter ``name`` for every node (``/**``) in a node parameters YAML, else ``default``:
    what the node uses when the launch command line leaves it out."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    value = data.get("/**", {}).get("ros__parameters", {}).get(name)
    return str(value) if value else default


def write_rviz_config(template: str | Path, **names: str) -> Path:
    """``render_rviz_config`` of the ``template`` file written to a new temporary file."""
    text = render_rviz_config(Path(template).read_text(), **names)
    with tempfile.NamedTemporaryFile(
        "w", prefix="compactinst_", suffix=".rviz", delete=False
    ) as out:
        out.write(text)
    return Path(out.name)
