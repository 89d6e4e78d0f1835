"""``deform_onnx.openvino``: OpenVINO support (see :mod:`deform_onnx.runtimes.openvino`)."""

from .runtimes.openvino import available, compile, extension, inference_precision, read_model

__all__ = ["extension", "compile", "read_model", "inference_precision", "available"]
