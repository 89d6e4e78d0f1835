"""The onnxscript adapter of :class:`~.base.Builder`: emits through onnxscript's tracing evaluator.

Used inside the dynamo translations (``torch.onnx.export(..., dynamo=True)``).
"""

from __future__ import annotations

from .base import IRValueBuilder


class OnnxScriptBuilder(IRValueBuilder):
    """:class:`Builder` over onnxscript's tracing evaluator (inside a dynamo translation)."""

    def __init__(self, opset: int):
        self.opset = opset
        import onnxscript

        self._ops = getattr(onnxscript, f"opset{opset}")

    def _emit(self, op_type, inputs, attrs, domain=""):
        while inputs and inputs[-1] is None:
            inputs.pop()
        return getattr(self._ops, op_type)(*inputs, **_ir_tensors(attrs))

    def _constant(self, array):
        import onnx_ir as ir

        return self._ops.Constant(value=ir.tensor(array))


def _ir_tensors(attrs: dict) -> dict:
    """Numpy attribute values (tensor attributes) as onnx-ir tensors."""
    import numpy as np
    import onnx_ir as ir

    return {k: ir.tensor(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
