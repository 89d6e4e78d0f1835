"""``deform_onnx.quantize``: INT8 files of deformable models that keep accuracy (issue 22).

``deform_onnx.quantize(src, dst, calibration, target=...)`` is :func:`.api.quantize`;
this package is also callable as that function (``deform_onnx.quantize`` is both
the package and the function, whichever Python finds first).

Modules: :mod:`.api` (the entry point, ONNX Runtime / TensorRT through
``onnxruntime.quantization``), :mod:`.placement` (what gets Q/DQ, by graph
analysis), :mod:`.calibration` (feeds from arrays, ``.npz`` or images),
:mod:`.report` (:class:`QuantizeReport`), :mod:`.gate` (the accuracy gate), :mod:`.measure`
(the INT8 file against the float model on every evaluation input), :mod:`.openvino` (nncf).
"""

from __future__ import annotations

import sys
import types

from .api import TARGETS, quantize, tensorrt_violations
from .calibration import Preprocess
from .gate import AccuracyError, Bound
from .placement import Placement, place
from .report import LayerError, OutputAccuracy, QuantizeReport

__all__ = [
    "TARGETS",
    "AccuracyError",
    "Bound",
    "LayerError",
    "OutputAccuracy",
    "Placement",
    "Preprocess",
    "QuantizeReport",
    "place",
    "quantize",
    "tensorrt_violations",
]


class _CallableModule(types.ModuleType):
    """``deform_onnx.quantize(...)`` calls :func:`.api.quantize` even after the package is imported."""

    def __call__(self, *args, **kwargs):
        return quantize(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
