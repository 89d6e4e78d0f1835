"""Repair ``"static shape arithmetic folded"``: values computed from static shapes become constants.

torch's TorchScript exporter writes a model's shape arithmetic as ops, not numbers: ``torch.chunk(o, 3,
dim=1)`` becomes ``Shape -> Gather -> Add -> Div -> Mul`` feeding each ``Slice``'s ends, even when every
shape is static. A frontend that types the graph before running it then loses the shapes after the
``Slice`` (measured here: TVM 0.27's relax frontend refuses the lowering's ``Reshape`` of such a value,
"Reshape expects the input tensor to have known shape"; ncnn's blob rule sees a ``?`` batch in the same
file). ONNX shape inference alone cannot help (a ``Slice`` with computed ends has no inferred shape).

The repair folds what the shapes decide with onnxscript's constant folder (``onnxscript.optimizer``,
ONNX shape inference per node): a ``Shape`` of a value whose shape is static, and the small computations
on it, become constants; then ONNX shape inference types the rest. Only small values are folded (at most
:data:`LIMIT` elements in and out; ``Shape`` reads no data), so a model's weights and the lowerings' large
constant grids stay as written. A dynamic axis stays dynamic: its ``Shape`` does not fold. A small
``ConstantOfShape`` of a constant shape folds too (onnxscript keeps every one by default): TorchScript's
``F.pad`` pads come out of one, and TVM refuses a ``Pad`` with computed pads.

The folder writes a partly static shape (a ``Gather`` of static axes of a ``Shape`` whose other axis is
dynamic) as ``Constant(value_ints=...)``; TVM 0.27's frontend reads only a ``Constant``'s ``value`` ("no value
in Constant"), so every numeric ``Constant`` of the result carries ``value`` (the same numbers, as a tensor).
"""

from __future__ import annotations

import math

import onnx

__all__ = ["LIMIT", "static_shape_arithmetic_folded"]

#: Most elements a folded node may read or write (shape vectors, scalars, split sizes).
LIMIT = 64


def static_shape_arithmetic_folded(model: onnx.ModelProto) -> list[str]:
    """Fold the main graph's small values computed from static shapes into constants (in place).

    Args:
        model: an ONNX model; its outputs, graph inputs, initializers and metadata are kept.

    Returns:
        One line naming how many nodes were folded away (empty when none).
    """
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass
    from onnxscript.optimizer import fold_constants

    if not any(n.op_type in ("Shape", "ConstantOfShape") and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return []  # nothing is computed from shapes
    before = len(model.graph.node)
    ir_model = ir.from_proto(model)
    fold_constants(
        ir_model, onnx_shape_inference=True, input_size_limit=LIMIT, output_size_limit=LIMIT, should_fold=_small_fill
    )
    RemoveUnusedNodesPass()(ir_model)
    folded = ir.to_proto(ir_model)
    gone = before - len(folded.graph.node)
    if gone <= 0:
        return []
    _constants_as_value(folded.graph)
    model.CopyFrom(folded)
    return [f"static shape arithmetic folded: {gone} node(s) fewer"]


def _small_fill(node) -> bool | None:
    """Fold a ``ConstantOfShape`` of a constant shape of at most :data:`LIMIT` elements (onnxscript keeps every one).

    torch's TorchScript ``F.pad`` (opset >= 11) writes its pads as ``Concat(pads, ConstantOfShape(...))``
    and more ops on it; left unfolded, the ``Pad`` has computed pads ("Dynamic pads are not supported yet"
    in TVM 0.27's relax frontend). ``None``: onnxscript's own rules decide.
    """
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    shape = node.inputs[0].const_value if node.inputs[0] is not None else None
    if shape is None or math.prod(int(d) for d in shape.numpy().reshape(-1)) > LIMIT:
        return None
    return True


#: A ``Constant``'s shorthand attributes and the element type of the tensor each one stands for (ONNX ``Constant``).
_SHORTHAND = {
    "value_int": onnx.TensorProto.INT64,
    "value_ints": onnx.TensorProto.INT64,
    "value_float": onnx.TensorProto.FLOAT,
    "value_floats": onnx.TensorProto.FLOAT,
}


def _constants_as_value(graph: onnx.GraphProto) -> None:
    """Write each ``Constant(value_int[s] / value_float[s])`` of ``graph`` as ``Constant(value=tensor)`` (in place)."""
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        if attr.name not in _SHORTHAND:
            continue
        values = onnx.helper.get_attribute_value(attr)
        scalar = attr.name in ("value_int", "value_float")
        dims = [] if scalar else [len(values)]
        tensor = onnx.helper.make_tensor("value", _SHORTHAND[attr.name], dims, [values] if scalar else values)
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("value", tensor))
