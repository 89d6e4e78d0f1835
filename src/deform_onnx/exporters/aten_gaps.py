"""TorchScript symbolics for ATen ops that torch's own exporter has only from a later opset.

Real models around the deformable ops use a few ATen ops whose TorchScript
symbolic starts above opset 11, so ``dynamo=False`` at 11 fails on them before
any deformable layer is reached. Each symbolic here is registered only at the
opsets below torch's own (:data:`SYMBOLICS`), so torch's symbolic still serves
from its first opset on.

- ``aten::outer`` (torch: opset 12, as ``Einsum``): Hugging Face transformers'
  sine position embedding (RT-DETR's ``build_2d_sinusoidal_position_embedding``,
  ``grid.flatten().outer(omega)``) calls it.
"""

from __future__ import annotations

from ..lowering.builder import Builder, Value


def emit_outer(b: Builder, input: Value, vec2: Value, out_dtype=None) -> Value:
    """``torch.outer(input, vec2)``: ``[n] x [m] -> [n, m]``, ``out[i, j] = input[i] * vec2[j]``.

    One ``Mul`` of the two vectors unsqueezed to ``[n, 1]`` and ``[1, m]``
    (ONNX broadcasting). Semantics from ``torch.outer``: both inputs 1-D; the
    result has PyTorch's promoted dtype, ``out_dtype`` (numpy dtype, read from
    the traced node): an input of another dtype is cast to it first (torch's
    own opset-12 symbolic casts ``vec2`` to ``input``'s dtype instead, which is
    wrong for ``int x float``).

    Raises:
        ValueError: an input whose rank is known and is not 1.
    """
    for name, value in (("input", input), ("vec2", vec2)):
        shape = b.static_shape(value)
        if shape is not None and len(shape) != 1:
            raise ValueError(f"outer: {name} must be 1-D, got rank {len(shape)}; flatten it first")
    if out_dtype is not None:
        from onnx.helper import np_dtype_to_tensor_dtype

        to = int(np_dtype_to_tensor_dtype(out_dtype))
        input, vec2 = (v if b.dtype(v) == out_dtype else b.op("Cast", v, to=to) for v in (input, vec2))
    return b.op("Mul", _unsqueeze(b, input, 1), _unsqueeze(b, vec2, 0))


def _unsqueeze(b: Builder, value: Value, axis: int) -> Value:
    # Unsqueeze's axes moved from an attribute to an input at opset 13.
    if b.opset < 13:
        return b.op("Unsqueeze", value, axes=[axis])
    return b.op("Unsqueeze", value, b.i64([axis]))


def _outer_symbolic(g, input, vec2):
    from .torchscript import TorchScriptBuilder, traced_output_dtype

    return emit_outer(TorchScriptBuilder(g), input, vec2, traced_output_dtype(g))


#: TorchScript op name -> (symbolic, opsets it is registered at: those below torch's own).
SYMBOLICS: dict = {
    "aten::outer": (_outer_symbolic, range(11, 12)),
}
