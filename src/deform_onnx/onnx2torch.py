"""``deform_onnx.onnx2torch``: onnx2torch support (see :mod:`deform_onnx.runtimes.onnx2torch`)."""

from .runtimes.onnx2torch import register

__all__ = ["register"]
