"""Exceptions of :func:`deform_onnx.export`."""


class ExportError(RuntimeError):
    """The export did not produce a valid model; no file was written."""


class VerificationError(ExportError):
    """The exported model's ONNX Runtime outputs differ from PyTorch's; no file was written."""


class MissingKernelError(ExportError):
    """ONNX Runtime has no kernel for a node of the exported model at its dtype, so it cannot be verified."""
