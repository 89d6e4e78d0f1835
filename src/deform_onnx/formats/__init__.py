"""Output formats of :func:`deform_onnx.export` beyond ONNX (:mod:`.registry`)."""

from .registry import FORMATS, Format, format_for, register_format, require, unregister_format

__all__ = ["FORMATS", "Format", "format_for", "register_format", "require", "unregister_format"]
