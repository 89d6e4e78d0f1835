"""The graph Builder every lowering is written against, and its adapters.

- :mod:`.base`: :class:`Builder` (the "emit an op" interface and its shape
  helpers), :class:`IRValueBuilder` and :class:`TapeBuilder` (onnx-ir: the
  file rewriter);
- :mod:`.torchscript`: :class:`~.torchscript.TorchScriptBuilder` over ``g.op``
  (imports torch: import it by its path);
- :mod:`.onnxscript`: :class:`~.onnxscript.OnnxScriptBuilder` over onnxscript's
  tracing evaluator (the dynamo translation);
- :mod:`.forms`: the graph forms a runtime target asks the lowerings for.
"""

from .base import Builder, Dim, IRValueBuilder, TapeBuilder, Value

__all__ = ["Builder", "Dim", "Value", "IRValueBuilder", "TapeBuilder"]
