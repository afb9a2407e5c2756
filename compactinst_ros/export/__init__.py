"""Stage-split ONNX export of a CompactInst/FastInst model into a model bundle, and parity checks.

Importing this package needs torch and onnx (the ``train`` extra); the runtime never imports it.
"""

from .onnx_export import export_bundle, resolve_labels
from .parity import ParityResult, check_parity, relative_error

__all__ = [
    "ParityResult",
    "check_parity",
    "export_bundle",
    "relative_error",
    "resolve_labels",
]
