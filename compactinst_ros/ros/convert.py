"""Message <-> numpy conversion for the node: our own, no cv_bridge on the hot path.

Incoming Image data becomes a zero-copy view (``image_from_buffer``; one conversion for the
encodings the pipeline does not take itself); depth messages become float32 metres
(``depth_from_msg``); outgoing rasters go out as an ``array.array('B')``, the fast path of the
generated message setters on every distro (a numpy array, and ``bytes`` where setters check
fields as Humble's do, is checked element by element: about 400 ms for 2 MB instead of 0.2 ms):
with no copy where post-processing made the raster in one (``raster_memory``), else copied once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image, JointState, PointCloud2, PointField
from std_msgs.msg import Header

from ..errors import InputError
from ..image_formats import (
    array_from_buffer,
    decode_compressed,
    decode_compressed_depth,
    depth_to_metres,
    image_from_buffer,
)
from ..labels import LabelSet
from ..raster_memory import message_bytes
from ..structures import RASTER_ENCODINGS, FrameResult, Instances, Segments

_LITTLE_ENDIAN = sys.byteorder == "little"
#: Jazzy's and later generated setters keep an array.array as it is only in a message that checks
#: its fields (else ``array.array('B', value)``, a copy; ROS_PYTHON_CHECK_FIELDS sets the
#: default); Humble's always check and keep it, and have no such switch.
_KEEPS_ARRAY = {"check_fields": True} if "_check_fields" in Image.__slots__ else {}


def image_from_msg(msg: Image) -> tuple[np.ndarray, str]:
    """A sensor_msgs/Image as the pipeline takes it, and that array's encoding: a zero-copy
    HxWxC view, or one conversion to rgb8/mono8 for bayer, 16-bit, 8UCn and nv12/nv21/nv24
    (``image_formats.image_from_buffer``); InputError if unusable."""
    return image_from_buffer(
        msg.data, msg.height, msg.width, msg.step, msg.encoding, bool(msg.is_bigendian)
    )


def depth_from_msg(msg: Image | CompressedImage) -> np.ndarray:
    """HxW float32 metres, NaN where there is no return, of a depth sensor_msgs/Image (16UC1
    millimetres, 32FC1 metres, either byte order) or an image_transport compressedDepth
    CompressedImage (PNG or RVL); InputError for another encoding or corrupt data."""
    if isinstance(msg, CompressedImage):
        return decode_compressed_depth(msg.format, msg.data)
    image = array_from_buffer(
        msg.data, msg.height, msg.width, msg.step, msg.encoding, bool(msg.is_bigendian)
    )
    return depth_to_metres(msg.encoding, image)


def image_from_compressed(msg: CompressedImage) -> tuple[np.ndarray, str]:
    """bgr8 frame of a jpeg/png CompressedImage; InputError for a format other than the one
    ``msg.format`` names, a size over the limits, or corrupt data (checked before decoding)."""
    return decode_compressed(msg.data, msg.format), "bgr8"


def image_msg(raster: np.ndarray, header: Header, encoding: str | None = None) -> Image:
    """sensor_msgs/Image of an HxW raster or HxWx3 bgr8 image with ``header``: its memory as it
    is where it is a ``message_raster``, else one copy.

    ``encoding`` defaults to the raster's (``RASTER_ENCODINGS``), bgr8 for three channels.
    """
    encoding = encoding or ("bgr8" if raster.ndim == 3 else RASTER_ENCODINGS[raster.dtype])
    msg = Image(**_KEEPS_ARRAY)
    msg.header = header
    msg.height, msg.width = int(raster.shape[0]), int(raster.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0 if _LITTLE_ENDIAN or raster.itemsize == 1 else 1
    msg.step = int(raster.shape[1] * raster.itemsize * (raster.shape[2] if raster.ndim == 3 else 1))
    msg.data = message_bytes(raster)
    return msg


def raster_from_msg(msg: Image) -> np.ndarray:
    """The HxW raster of an ``image_msg`` output (mono8, mono16, 32SC1), in its own byte order;
    InputError for another encoding."""
    dtypes = {encoding: dtype for dtype, encoding in RASTER_ENCODINGS.items()}
    if msg.encoding not in dtypes:
        raise InputError(f"'{msg.encoding}' is not a raster encoding; use one of {list(dtypes)}")
    dtype = dtypes[msg.encoding].newbyteorder(">" if msg.is_bigendian else "<")
    rows = np.frombuffer(msg.data, np.uint8)[: msg.height * msg.step].reshape(msg.height, msg.step)
    return rows[:, : msg.width * dtype.itemsize].copy().view(dtype).astype(dtypes[msg.encoding])


def jpeg_msg(bgr: np.ndarray, header: Header, quality: int) -> CompressedImage:
    """sensor_msgs/CompressedImage (``bgr8; jpeg compressed bgr8``, image_transport's format) of
    an HxWx3 bgr8 image at JPEG ``quality`` (1..100)."""
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f"OpenCV could not JPEG-encode a {bgr.shape} {bgr.dtype} image")
    msg = CompressedImage()
    msg.header = header
    msg.format = "bgr8; jpeg compressed bgr8"
    msg.data = message_bytes(data)
    return msg


#: numpy type -> PointField datatype of a table column
POINTFIELD_TYPES = {
    np.dtype(np.uint8): PointField.UINT8,
    np.dtype(np.int32): PointField.INT32,
    np.dtype(np.uint32): PointField.UINT32,
    np.dtype(np.float32): PointField.FLOAT32,
}

#: columns of the instance table, in PointCloud2 field order
INSTANCE_TABLE = np.dtype(
    [("id", "u4"), ("class_index", "i4"), ("label_id", "i4"), ("score", "f4")]
    + [(corner, "f4") for corner in ("x0", "y0", "x1", "y1")]
    + [("area", "u4")]
)

#: columns of the panoptic segment table, in PointCloud2 field order
SEGMENT_TABLE = np.dtype(
    [("id", "i4"), ("label_id", "i4"), ("isthing", "u1"), ("score", "f4"), ("area", "u4")]
)


def _table_msg(header: Header, table: np.dtype, columns: dict[str, np.ndarray]) -> PointCloud2:
    """One PointCloud2 point per row: ``columns`` packed into ``table``'s layout (one copy)."""
    rows = np.zeros(len(columns["id"]), table)
    for name in table.names:
        rows[name] = columns[name]
    msg = PointCloud2()
    msg.header = header
    msg.height, msg.width = 1, int(rows.shape[0])
    msg.fields = [
        PointField(
            name=name,
            offset=table.fields[name][1],
            datatype=POINTFIELD_TYPES[table.fields[name][0]],
            count=1,
        )
        for name in table.names
    ]
    msg.is_bigendian = not _LITTLE_ENDIAN
    msg.point_step = table.itemsize
    msg.row_step = table.itemsize * msg.width
    msg.is_dense = True
    msg.data = message_bytes(rows.view(np.uint8))
    return msg


def table_from_msg(msg: PointCloud2) -> np.ndarray:
    """Structured numpy array (one row per point, one column per field) of a PointCloud2 table,
    read from its own fields and byte order: no sensor_msgs_py needed."""
    codes = {code: dtype for dtype, code in POINTFIELD_TYPES.items()}
    unknown = sorted({f.name for f in msg.fields if f.datatype not in codes})
    if unknown:
        raise InputError(
            f"PointCloud2 fields {unknown} have a datatype this reader does not know; it reads "
            f"{sorted(str(d) for d in POINTFIELD_TYPES)}, as the node's tables use"
        )
    order = ">" if msg.is_bigendian else "<"
    dtype = np.dtype(
        {
            "names": [f.name for f in msg.fields],
            "formats": [
                (codes[f.datatype].newbyteorder(order), (f.count,))
                if f.count > 1
                else codes[f.datatype].newbyteorder(order)
                for f in msg.fields
            ],
            "offsets": [f.offset for f in msg.fields],
            "itemsize": msg.point_step,
        }
    )
    return np.frombuffer(msg.data, np.uint8)[: msg.width * msg.height * msg.point_step].view(dtype)


def instance_table_msg(header: Header, instances: Instances) -> PointCloud2:
    """Per-instance table as a PointCloud2 (one point per instance; ``id`` = raster value)."""
    box = instances.box.reshape(-1, 4)
    return _table_msg(
        header,
        INSTANCE_TABLE,
        {
            "id": instances.ids,
            "class_index": instances.class_index,
            "label_id": instances.label_id,
            "score": instances.score,
            "x0": box[:, 0],
            "y0": box[:, 1],
            "x1": box[:, 2],
            "y1": box[:, 3],
            "area": instances.area,
        },
    )


def segment_table_msg(header: Header, segments: Segments) -> PointCloud2:
    """Panoptic segment table as a PointCloud2 (one point per segment; ``id`` = raster value)."""
    return _table_msg(
        header,
        SEGMENT_TABLE,
        {
            "id": segments.ids,
            "label_id": segments.label_id,
            "isthing": segments.isthing,
            "score": segments.score,
            "area": segments.area,
        },
    )


def latency_record_msg(header: Header, stages: Sequence[str], timings_ms: dict) -> JointState:
    """Per-frame stamped record: JointState with name = stages, position = milliseconds."""
    msg = JointState()
    msg.header = header
    msg.name = list(stages)
    msg.position = [float(timings_ms.get(s, 0.0)) for s in stages]
    return msg


def labels_json(labels: LabelSet) -> str:
    """The label table as JSON text (published transient-local on ``~/labels``)."""
    return json.dumps(labels.to_json())


def detections_msg(header: Header, instances: Instances, vision_msgs: object) -> object:
    """vision_msgs/Detection2DArray: ``id`` = raster value, class_id = label id, score, box."""
    out = vision_msgs.Detection2DArray()  # type: ignore[attr-defined]
    out.header = header
    box = instances.box.reshape(-1, 4)
    for i in range(len(instances)):
        det = vision_msgs.Detection2D()  # type: ignore[attr-defined]
        det.header = header
        det.id = str(int(instances.ids[i]))
        hyp = vision_msgs.ObjectHypothesisWithPose()  # type: ignore[attr-defined]
        hyp.hypothesis.class_id = str(int(instances.label_id[i]))
        hyp.hypothesis.score = float(instances.score[i])
        det.results.append(hyp)
        x0, y0, x1, y1 = (float(v) for v in box[i])
        det.bbox.center.position.x = (x0 + x1) / 2.0
        det.bbox.center.position.y = (y0 + y1) / 2.0
        det.bbox.size_x = x1 - x0
        det.bbox.size_y = y1 - y0
        out.detections.append(det)
    return out


def label_info_msg(
    header: Header, labels: LabelSet, threshold: float, vision_msgs: object
) -> object:
    """vision_msgs/LabelInfo listing label id and name of every class."""
    out = vision_msgs.LabelInfo()  # type: ignore[attr-defined]
    out.header = header
    for label_id, name in zip(labels.ids, labels.names, strict=True):
        cls = vision_msgs.VisionClass()  # type: ignore[attr-defined]
        cls.class_id = int(label_id)
        cls.class_name = name
        out.class_map.append(cls)
    out.threshold = float(threshold)
    return out


def result_images(result: FrameResult) -> dict[str, np.ndarray | None]:
    """Output topic suffix -> image of a frame result (None where it was not computed)."""
    return {
        "instance_mask": result.instance_raster,
        "panoptic": result.panoptic_raster,
        "semantic": result.semantic_raster,
        "overlay": result.overlay,
    }
