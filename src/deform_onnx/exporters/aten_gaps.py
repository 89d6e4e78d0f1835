"""TorchScript symbolics for ATen ops that torch's own exporter has only from a later opset.

Real models around the deformable ops use a few ATen ops whose TorchScript
symbolic starts above opset 11, so ``dynamo=False`` at 11 fails on them before
any deformable layer is reached. Each symbolic here is registered only at the
opsets below torch's own (:data:`SYMBOLICS`), so torch's symbolic still serves
from its first opset on.

- ``aten::outer`` (torch: opset 12, as ``Einsum``): Hugging Face transformers'
  sine position embedding (RT-DETR's ``build_2d_sinusoidal_position_embedding``,
  ``grid.flatten().outer(omega)``) calls it.
- ``aten::einsum`` (torch: opset 12, ``Einsum`` appeared in ONNX opset 12):
  two-operand contractions, as ``Transpose``/``Reshape``/``MatMul``
  (Mask2Former's mask head: ``einsum("bqc, bchw -> bqhw", ...)``).
- ``aten::affine_grid_generator`` (torch: opset 20, as ``AffineGrid``): spatial transformers'
  ``F.affine_grid``, see :mod:`.aten_affine_grid`.
- ``aten::pad`` / ``aten::constant_pad_nd`` (every opset from 11, over torch's own): a constant ``F.pad``
  with constant pads, so the exporter knows the padded map's sizes, see :mod:`.aten_pad`.
"""

from __future__ import annotations

from ..builder import Builder, Value


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
    return b.op("Mul", b.unsqueeze(input, [1]), b.unsqueeze(vec2, [0]))


def emit_einsum(b: Builder, equation: str, operands: list) -> Value:
    """``torch.einsum(equation, a, b)`` for two operands as one batched ``MatMul``.

    Semantics from ``torch.einsum``: each index of the output is a batch index
    (in both operands), or a free index of one operand; an index in both
    operands and not in the output is summed (contracted). The operands are
    transposed to ``[batch..., free..., contracted...]`` and
    ``[batch..., contracted..., free...]``, flattened to 3 groups, multiplied,
    and the product reshaped and transposed to the output's order. Sizes are
    read at run time where they are dynamic (``Shape``), so dynamic axes stay
    dynamic. Batch axes broadcast as ``MatMul``'s leading axes do.

    Raises:
        ValueError: not two operands, an ellipsis, an index repeated within one
            operand (a diagonal), or an index of one operand only that the
            output drops (a sum): export at opset 12 or higher for those.
    """
    eq = equation.replace(" ", "")
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    if len(terms) != 2 or len(operands) != 2 or "." in eq:
        raise ValueError(
            f"einsum {equation!r}: opset 11 takes two operands without '...'; export at opset 12 or higher"
        )
    ta, tb = terms
    if out is None:  # implicit output: the indices that appear once, in alphabetical order
        out = "".join(sorted(c for c in set(ta + tb) if (ta + tb).count(c) == 1))
    if len(set(ta)) != len(ta) or len(set(tb)) != len(tb) or any(c not in ta + tb for c in out):
        raise ValueError(f"einsum {equation!r}: a repeated or unknown index; export at opset 12 or higher")
    batch = [c for c in out if c in ta and c in tb]
    left = [c for c in out if c in ta and c not in tb]
    right = [c for c in out if c in tb and c not in ta]
    summed = [c for c in ta if c in tb and c not in out]
    if any(c not in out and not (c in ta and c in tb) for c in ta + tb):
        raise ValueError(f"einsum {equation!r}: sums an index of one operand; export at opset 12 or higher")
    a, v = operands

    def grouped(x, term, first, second):
        x = _transpose(b, x, [term.index(c) for c in batch + first + second])
        dims = [b.dim(x, i) for i in range(len(term))]
        n = len(batch)
        return b.reshape(x, dims[:n] + [_prod(b, dims[n : n + len(first)]), _prod(b, dims[n + len(first) :])]), dims

    a3, a_dims = grouped(a, ta, left, summed)
    v3, v_dims = grouped(v, tb, summed, right)
    product = b.op("MatMul", a3, v3)  # [batch..., L, R]
    n = len(batch)
    dims = [b.dim(product, i) for i in range(n)] + a_dims[n : n + len(left)] + v_dims[n + len(summed) :]
    result = b.reshape(product, dims)
    order = batch + left + right
    return _transpose(b, result, [order.index(c) for c in out])


def _transpose(b: Builder, x: Value, perm: list[int]) -> Value:
    return x if perm == sorted(perm) else b.op("Transpose", x, perm=perm)


def _prod(b: Builder, dims: list):
    total = 1
    for d in dims:
        total = b.mul_dim(total, d)
    return total


def _einsum_symbolic(g, equation, tensor_list, path=None):
    from torch.onnx import symbolic_helper

    from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line

    equation = symbolic_helper._maybe_get_const(equation, "s")
    try:
        return emit_einsum(TorchScriptBuilder(g), equation, symbolic_helper._unpack_list(tensor_list))
    except ValueError as exc:
        _keep_error_one_line(exc, g)  # no dump of the whole TorchScript graph before the one line
        raise


def _outer_symbolic(g, input, vec2):
    from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line, traced_output_dtype

    try:
        return emit_outer(TorchScriptBuilder(g), input, vec2, traced_output_dtype(g))
    except ValueError as exc:
        _keep_error_one_line(exc, g)
        raise


#: TorchScript op name -> (symbolic, opsets it is registered at: those below torch's own).
SYMBOLICS: dict = {
    "aten::outer": (_outer_symbolic, range(11, 12)),
    "aten::einsum": (_einsum_symbolic, range(11, 12)),
}


def _add_detector_gaps() -> None:
    # SDPA below 14, isin and antialiased resize (issue 19): aten_detectors.py.
    from torch.onnx._constants import ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET

    from . import aten_affine_grid, aten_pad
    from .aten_detectors import torchscript_symbolics

    SYMBOLICS.update(torchscript_symbolics(11, ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET))
    SYMBOLICS.update(aten_affine_grid.torchscript_symbolics(11))  # F.affine_grid below opset 20
    SYMBOLICS.update(aten_pad.torchscript_symbolics(ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET))  # F.pad's pads constant


_add_detector_gaps()
