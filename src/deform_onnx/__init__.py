"""deform-onnx: deploy torchvision deformable convolution (DCNv1/DCNv2) through ONNX.

Quick use::

    import torch, deform_onnx
    deform_onnx.register()            # method="auto"
    torch.onnx.export(model, (x,), "model.onnx", dynamo=False, opset_version=17)

The public names are loaded on first use (PEP 562), so ``import deform_onnx``
and the CLI's ``--help`` do not import torch or onnx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: Public name -> submodule that defines it.
_EXPORTS = {
    "export": ".exporting.api",
    "ExportReport": ".exporting.api",
    "ExportError": ".exporting.api",
    "VerificationError": ".exporting.api",
    "translation_table": ".exporters.dynamo",
    "decompositions": ".formats.decompose",
    "lower": ".rewrite",
    "register": ".exporters.torchscript",
    "unregister": ".exporters.torchscript",
    "resolve_method": ".ops.deform_conv.register",
    "DeformConvSpec": ".ops.deform_conv.spec",
    "LOWERINGS": ".ops.deform_conv.register",
    "METHODS": ".ops.registry",
    "Target": ".targets",
    "TARGETS": ".targets",
    "TARGET_NAMES": ".targets",
    "resolve_target": ".targets",
    "lowest_ir_version": ".core.irversion",
    "DCNv3": ".ops.dcnv3",
    "DCNv4": ".ops.dcnv3",
    "dcnv3_core": ".ops.dcnv3",
    "dcnv4_core": ".ops.dcnv3",
    "quantize": ".quantize",
    "QuantizeReport": ".quantize",
    "check_runtimes": ".runtimes.deployed.check",
    "RuntimeRow": ".runtimes.deployed.check",
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ loads these
    from .core.irversion import lowest_ir_version
    from .exporters.dynamo import translation_table
    from .exporters.torchscript import register, unregister
    from .exporting.api import ExportError, ExportReport, VerificationError, export
    from .formats.decompose import decompositions
    from .ops.dcnv3 import DCNv3, DCNv4, dcnv3_core, dcnv4_core
    from .ops.deform_conv.register import LOWERINGS, resolve_method
    from .ops.deform_conv.spec import DeformConvSpec
    from .ops.registry import METHODS
    from .quantize import QuantizeReport, quantize
    from .rewrite import lower
    from .runtimes.deployed.check import RuntimeRow, check_runtimes
    from .targets import TARGET_NAMES, TARGETS, Target, resolve_target


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    # deform_onnx.openvino without importing OpenVINO at package import time.
    if name == "openvino":
        return importlib.import_module(".openvino", __name__)
    if name == "ops":  # deform_onnx.ops.ms_deform_attn: defining the op imports torch
        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "openvino", "ops"])
