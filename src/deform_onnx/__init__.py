"""deform-onnx: deploy torchvision deformable convolution (DCNv1/DCNv2) through ONNX.

Quick use::

    import torch, deform_onnx
    deform_onnx.register()            # method="auto"
    torch.onnx.export(model, (x,), "model.onnx", dynamo=False, opset_version=17)
"""

from .api import ExportError, ExportReport, VerificationError, export
from .exporters.dynamo import translation_table
from .exporters.torchscript import register, unregister
from .lowering import LOWERINGS, METHODS, resolve_method
from .rewrite import lower
from .semantics import DeformConvSpec
from .irversion import lowest_ir_version
from .targets import TARGET_NAMES, TARGETS, Target, resolve_target

__all__ = [
    "export",
    "ExportReport",
    "ExportError",
    "VerificationError",
    "translation_table",
    "lower",
    "register",
    "unregister",
    "resolve_method",
    "DeformConvSpec",
    "LOWERINGS",
    "METHODS",
    "Target",
    "TARGETS",
    "TARGET_NAMES",
    "resolve_target",
    "lowest_ir_version",
]
__version__ = "0.1.0"


def __getattr__(name):
    # deform_onnx.openvino without importing OpenVINO at package import time.
    if name == "openvino":
        import importlib

        return importlib.import_module(".openvino", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
