"""``deform_onnx.quantize``: INT8 files of deformable models that keep accuracy (issue 22).

``deform_onnx.quantize(src, dst, calibration, target=...)`` is :func:`.api.quantize`;
this package is also callable as that function (``deform_onnx.quantize`` is both
the package and the function, whichever Python finds first).

Modules: :mod:`.api` (the entry point, ONNX Runtime / TensorRT through
``onnxruntime.quantization``), :mod:`.placement` (what gets Q/DQ, by graph
analysis), :mod:`.calibration` (feeds from arrays, ``.npz`` or images),
:mod:`.report` (:class:`QuantizeReport`), :mod:`.openvino` (nncf).
"""

from __future__ import annotations

import sys
import types

from .api import TARGETS, quantize, tensorrt_violations
from .calibration import Preprocess
from .placement import Placement, place
from .report import LayerError, QuantizeReport

__all__ = [
    "TARGETS",
    "LayerError",
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
