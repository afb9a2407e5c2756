"""Host mirrors of what the CUDA kernels define (gpu/kernels/*): capacities, tile size, encoding
codes, output flags, the ``PPTables`` layout and every kernel's parameter list.

One module, numpy only, shared by the pycuda launchers and the numpy twin; test_cuda_compile.py
checks the table layout and the parameter lists against nvcc's view of the sources.
"""

from __future__ import annotations

import numpy as np

#: ``ci::kMaxQueries`` / ``ci::kMaxClasses``: the largest model the post-processing kernels take.
MAX_QUERIES = 256
MAX_CLASSES = 256
#: ``ci::kTile``: camera pixels per tile side (a post-processing block is TILE x TILE threads).
TILE = 16
#: ``kSemChunk`` in postprocess.cu: classes per semantic block of ``pp_stats``.
SEM_CHUNK = 32
#: ``kBlock`` in postprocess.cu: threads of a ``pp_stats`` and a ``pp_remap`` block.
PP_BLOCK = 256
#: ``kRemapPixels`` in postprocess.cu: camera pixels per ``pp_remap`` thread.
REMAP_PIXELS = 8
#: ``ci::kBoundEps``: margin (in logits) added to footprint bounds so float rounding of bilinear
#: weights can never push an interpolated value outside [min, max] of its texels.
BOUND_EPS = np.float32(1e-4)

#: Camera encoding -> ``ci::Encoding`` code of the kernels' ``fetch_rgb``.
ENCODING_CODES: dict[str, int] = {
    "rgb8": 0,
    "bgr8": 1,
    "rgba8": 2,
    "bgra8": 3,
    "mono8": 4,
    "yuv422": 5,
    "uyvy": 5,
    "yuv422_yuy2": 6,
    "yuyv": 6,
}

#: ``Want`` flags of ``pp_tiles`` and ``pp_remap``: which rasters a frame asks for.
WANT_INSTANCE, WANT_PANOPTIC, WANT_SEMANTIC = 1, 2, 4

#: ``PPTables`` in postprocess.cu, field by field in declaration order as ``name:type:count``
#: (count ``1`` a scalar, ``Q`` one per query slot, ``Q+1`` and ``Qx4`` as declared).
_PP_TABLES = """
    n_inst:i4:1 n_pan:i4:1 n_inst_out:i4:1 n_seg:i4:1 stats_done:u4:1 tiles_done:u4:1
    mask_score:f4:Q inst_query:i4:Q inst_class:i4:Q inst_score:f4:Q
    pan_query:i4:Q pan_class:i4:Q pan_score:f4:Q
    inst_area:u4:Q inst_box:i4:Qx4 wins:u4:Q orig:u4:Q seg:u4:Q
    inst_lut:i4:Q+1 pan_lut:i4:Q out_slot:i4:Q seg_id:i4:Q seg_class:i4:Q
    seg_score:f4:Q seg_area:u4:Q
"""
_COUNTS = {"1": (), "Q": (MAX_QUERIES,), "Q+1": (MAX_QUERIES + 1,), "Qx4": (MAX_QUERIES, 4)}
#: Host mirror of ``PPTables`` (4-byte fields only, so no padding).
TABLES_DTYPE = np.dtype(
    [
        (name, f"<{kind}", _COUNTS[count])
        for name, kind, count in (field.split(":") for field in _PP_TABLES.split())
    ]
)

#: ``kLiftBins`` in lift.cu: bins of the first radix level of the depths (float bits 30..20); the
#: two later levels have half as many (bits 19..10 and 9..0).
LIFT_BINS = 2048
#: ``kSelectThreads`` in lift.cu: the block size of ``lift_select``.
LIFT_SELECT_THREADS = 256
#: ``kCloudRow`` in lift.cu: a cloud's points are laid out as rows of this many, so that the
#: depth kernels' one-thread-per-pixel launches cover them.
LIFT_CLOUD_ROW = 256
#: ``LiftFrame`` and ``LiftSlot`` in lift.cu, field by field in declaration order (8-byte fields
#: first, so no padding); ``LIFT_TABLES_DTYPE`` is ``LiftTables``: the frame, then one slot per
#: variant (0: eroded mask, 1: whole mask) and query slot.
LIFT_FRAME_DTYPE = np.dtype(
    [(name, "<i4") for name in ("labelled", "min_row", "min_col", "step", "radius", "row0", "col0")]
    + [("pad", "<i4")]
)
LIFT_SLOT_DTYPE = np.dtype(
    [
        ("sum", "<f8", (3,)),
        ("moment", "<f8", (6,)),  # xx, yy, zz, xy, xz, yz (spatial.lift.MOMENT_PAIRS)
        ("lo", "<i4", (3,)),
        ("hi", "<i4", (3,)),
        ("count", "<i4"),
        ("rank", "<i4"),
        ("prefix", "<i4"),
        ("support", "<i4"),
        ("depth", "<f4"),
        ("pad", "<i4"),
    ]
)
LIFT_TABLES_DTYPE = np.dtype(
    [("frame", LIFT_FRAME_DTYPE), ("slot", LIFT_SLOT_DTYPE, (2, MAX_QUERIES))]
)

#: pycuda ``prepare`` argument types of every kernel (P pointer, i int, f float, d double).
SIGNATURES: dict[str, str] = {
    "pp_stats": "PPiiiiiifPffiiPPP",
    "pp_tiles": "iPPiiiiiPPPPPPfPPdiPPPPi",
    "pp_remap": "iiPPP",
    "pre_letterbox": "PiiiiiifffffiiP",
    "pre_letterbox_half": "PiiiiiifffffiiP",
    "ov_instance": "PiiiiPiPffP",
    "ov_panoptic": "PiiiiPPiPffP",
    "lift_clear": "iPP",
    "lift_bounds": "PiPPiiP",
    "lift_plan": "iiP",
    "lift_classify": "PiPPPiiPiffiPPP",
    "lift_select": "iidPP",
    "lift_histogram": "iPPiiiPP",
    "lift_accumulate": "PPiiddffffP",
    "lift_cloud_classify": "PiiPiiffffPiffiiPPP",
    "lift_cloud_accumulate": "PPiffP",
    "lift_cloud_labels": "PiiPiPP",
}
