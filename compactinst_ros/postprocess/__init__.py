"""Post-processing: decoder outputs at mask resolution -> camera-resolution results.

``postprocess`` (numpy reference, the specification) and its building blocks, which the GPU
path's numpy twin and the tests compare against. See docs/postprocess.md for every rule.
"""

from .frame import RuleInputs, check_raw_outputs
from .instance import InstanceSelection, mask_scores, paint_instances, select_instances
from .panoptic import (
    PanopticSelection,
    finalize_panoptic,
    panoptic_slots,
    select_panoptic_queries,
)
from .reference import postprocess
from .resample import Resampler, bilinear_taps, logit_threshold, valid_region
from .semantic import SEMANTIC_VOID_FLOOR, class_maps, semantic_dtype, semantic_lowres

__all__ = [
    "SEMANTIC_VOID_FLOOR",
    "InstanceSelection",
    "PanopticSelection",
    "Resampler",
    "RuleInputs",
    "bilinear_taps",
    "check_raw_outputs",
    "class_maps",
    "finalize_panoptic",
    "logit_threshold",
    "mask_scores",
    "paint_instances",
    "panoptic_slots",
    "postprocess",
    "select_instances",
    "select_panoptic_queries",
    "semantic_dtype",
    "semantic_lowres",
    "valid_region",
]
