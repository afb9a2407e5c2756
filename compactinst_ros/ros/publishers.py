"""The node's output publishers: made from the ``outputs`` parameter, asked each frame which
have subscribers (the ``OutputSet`` the Pipeline computes), and fed one frame's result."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image, JointState, PointCloud2
from std_msgs.msg import Float64, Header, String

from ..labels import LabelSet
from ..overlay import panoptic_color, semantic_color
from ..structures import STAGES, FrameResult, OutputSet
from . import convert
from .qos import frame_qos, latched_qos

try:
    import vision_msgs.msg as vision_msgs
except ImportError:
    vision_msgs = None

#: outputs published as sensor_msgs/Image, and the PointCloud2 tables
IMAGE_OUTPUTS = ("instance_mask", "panoptic", "semantic", "overlay")
TABLE_OUTPUTS = ("instance_table", "panoptic_segments")
#: bgr8 colour images of the rasters for viewers (rviz2): output -> (topic under ~, renderer);
#: made only while subscribed
COLOUR_OUTPUTS = {
    "panoptic_color": ("panoptic/color", panoptic_color),
    "semantic_color": ("semantic/color", semantic_color),
}
#: outputs made from the instance raster and table
INSTANCE_OUTPUTS = ("instance_mask", "instance_table", "detections")
#: latched publishers, sent once at start: never "wanted" per frame
LATCHED = ("labels", "label_info")


def output_set(wanted: Mapping[str, bool]) -> OutputSet:
    """What the Pipeline must compute for the outputs that have subscribers."""
    return OutputSet(
        instance=any(wanted.get(k, False) for k in INSTANCE_OUTPUTS),
        panoptic=any(
            wanted.get(k, False) for k in ("panoptic", "panoptic_segments", "panoptic_color")
        ),
        semantic=wanted.get("semantic", False) or wanted.get("semantic_color", False),
        overlay=wanted.get("overlay", False) or wanted.get("overlay_compressed", False),
    )


def vision_publishers(
    node: Node,
    vision_msgs: ModuleType,
    labels: LabelSet,
    score_threshold: float,
    out_qos: Any,
    prefix: str = "~/",
) -> dict[str, Any]:
    """~/detections, and the latched ~/label_info (published now) where ``vision_msgs`` (the
    installed vision_msgs.msg) has LabelInfo: 4.1 and later, not the 4.0.0 of early Humble.
    ``prefix`` replaces ``~/`` (a camera's ``~/<name>/``)."""
    pubs = {
        "detections": node.create_publisher(
            vision_msgs.Detection2DArray, f"{prefix}detections", out_qos
        )
    }
    if not hasattr(vision_msgs, "LabelInfo") or not hasattr(vision_msgs, "VisionClass"):
        node.get_logger().warning(
            "the installed vision_msgs has no LabelInfo (vision_msgs 4.0; it came with 4.1, "
            "in Humble since February 2023): ~/label_info is off, ~/detections works, ~/labels "
            "carries the label names (upgrade ros-<distro>-vision-msgs to enable ~/label_info)",
            once=True,
        )
        return pubs
    info = node.create_publisher(vision_msgs.LabelInfo, f"{prefix}label_info", latched_qos())
    header = Header()
    header.stamp = node.get_clock().now().to_msg()
    info.publish(convert.label_info_msg(header, labels, score_threshold, vision_msgs))
    pubs["label_info"] = info
    return pubs


class Publishers:
    """Publishers of the offered outputs, the latched label tables and the latency topics, all
    under ``prefix`` (``~/``, or a camera's ``~/<name>/`` in a node of several)."""

    def __init__(
        self,
        node: Node,
        outputs: frozenset[str],
        reliability: ReliabilityPolicy,
        labels: LabelSet,
        score_threshold: float,
        jpeg_quality: int = 80,
        prefix: str = "~/",
    ) -> None:
        self.node = node
        self.prefix = prefix
        self.outputs = outputs
        self.labels = labels
        self.jpeg_quality = jpeg_quality
        out_qos = frame_qos(reliability)
        self.pubs: dict[str, Any] = {}
        self.latency: dict[str, Any] = {}
        for name in IMAGE_OUTPUTS:
            if name in outputs:
                self.pubs[name] = node.create_publisher(Image, f"{prefix}{name}", out_qos)
        for name, (topic, _) in COLOUR_OUTPUTS.items():
            if name in outputs:
                self.pubs[name] = node.create_publisher(Image, f"{prefix}{topic}", out_qos)
        if "overlay" in outputs:
            self.pubs["overlay_compressed"] = node.create_publisher(
                CompressedImage, f"{prefix}overlay/compressed", out_qos
            )
        for name in TABLE_OUTPUTS:
            if name in outputs:
                self.pubs[name] = node.create_publisher(PointCloud2, f"{prefix}{name}", out_qos)
        self.pubs["labels"] = node.create_publisher(String, f"{prefix}labels", latched_qos())
        self.pubs["labels"].publish(String(data=convert.labels_json(labels)))
        if "detections" in outputs:
            self._detections(labels, score_threshold, out_qos)
        if "latency" in outputs:
            for stage in STAGES:
                self.latency[stage] = node.create_publisher(
                    Float64, f"{prefix}latency/{stage}", out_qos
                )
            self.pubs["latency_frame"] = node.create_publisher(
                JointState, f"{prefix}latency/frame", out_qos
            )

    def _detections(self, labels: LabelSet, score_threshold: float, out_qos: Any) -> None:
        """~/detections and the latched ~/label_info where vision_msgs is installed."""
        if vision_msgs is None:
            self.node.get_logger().warning(
                "vision_msgs is not installed: ~/detections and ~/label_info are off; "
                "~/instance_table and ~/labels carry the same data (install "
                "ros-<distro>-vision-msgs to enable them)"
            )
            return
        self.pubs.update(
            vision_publishers(
                self.node, vision_msgs, labels, score_threshold, out_qos, self.prefix
            )
        )

    def offered(self) -> list[str]:
        """The ``outputs`` names that have publishers (not ``detections`` without vision_msgs)."""
        made = {*self.pubs, *(("latency",) if self.latency else ())}
        return sorted(name for name in self.outputs if name in made)

    def wanted(self) -> dict[str, bool]:
        """Output name -> whether it has a subscriber now; ``latency`` for any latency topic."""
        wanted = {
            name: pub.get_subscription_count() > 0
            for name, pub in self.pubs.items()
            if name not in LATCHED
        }
        wanted["latency"] = wanted.get("latency_frame", False) or any(
            p.get_subscription_count() > 0 for p in self.latency.values()
        )
        return wanted

    def listened(self) -> bool:
        """True while some output (not /diagnostics, not the latched tables) has a subscriber."""
        return any(self.wanted().values())

    def publish(self, header: Header, result: FrameResult, wanted: Mapping[str, bool]) -> None:
        """Publish the wanted outputs of one frame, all with the input image's header."""
        for name, image in convert.result_images(result).items():
            if wanted.get(name) and image is not None:
                self.pubs[name].publish(convert.image_msg(image, header))
        for name, (_, render) in COLOUR_OUTPUTS.items():
            colour = render(result, self.labels) if wanted.get(name) else None
            if colour is not None:
                self.pubs[name].publish(convert.image_msg(colour, header))
        if wanted.get("overlay_compressed") and result.overlay is not None:
            self.pubs["overlay_compressed"].publish(
                convert.jpeg_msg(result.overlay, header, self.jpeg_quality)
            )
        if wanted.get("instance_table"):
            self.pubs["instance_table"].publish(
                convert.instance_table_msg(header, result.instances)
            )
        if wanted.get("panoptic_segments"):
            self.pubs["panoptic_segments"].publish(
                convert.segment_table_msg(header, result.segments)
            )
        if wanted.get("detections"):
            self.pubs["detections"].publish(
                convert.detections_msg(header, result.instances, vision_msgs)
            )

    def publish_latency(self, header: Header, timings: Mapping[str, float]) -> None:
        """Per-stage Float64 topics and the stamped per-frame record, to subscribers only."""
        for stage, pub in self.latency.items():
            if stage in timings and pub.get_subscription_count() > 0:
                pub.publish(Float64(data=float(timings[stage])))
        frame_pub = self.pubs.get("latency_frame")
        if frame_pub is not None and frame_pub.get_subscription_count() > 0:
            frame_pub.publish(convert.latency_record_msg(header, STAGES, timings))

    def destroy(self) -> None:
        """Remove every publisher from the node."""
        for pub in [*self.pubs.values(), *self.latency.values()]:
            self.node.destroy_publisher(pub)
        self.pubs.clear()
        self.latency.clear()
