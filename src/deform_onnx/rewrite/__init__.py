"""Rewrite existing ONNX files: replace the file nodes of the op family by a lowering (``deform_onnx.lower``).

The driver is :mod:`.driver` (:func:`lower`, :func:`lower_file`, :func:`lower_model`);
file IO lives in :mod:`.model_io`, the opset conversion in :mod:`.opset`, graph-wide
helpers in :mod:`.graph`, the decision of which nodes a method lowers in :mod:`.lowerable`.
Each op's own file nodes live in its folder (``deform_onnx/ops/<op>/sources.py``).
"""

from .driver import LowerReport, Replacement, lower, lower_file, lower_model
from .model_io import ModelFileError, default_opset, read_model

__all__ = [
    "lower", "lower_file", "lower_model", "read_model", "default_opset", "LowerReport", "Replacement", "ModelFileError",
]  # fmt: skip
