"""Graph repairs a runtime target applies to the exported file: rewrites that keep every value the same.

A repair runs on the written graph after the export, before the target's rules
(:mod:`.rules`) check it (``Target.repairs`` names them; :meth:`.base.Choice.repair_graph`
applies them), so it also reaches nodes torch's exporters write, which the
lowerings' graph forms (:mod:`deform_onnx.builder.forms`) do not.

- ``"Reshape allowzero 0"``: torch's dynamo exporter writes every ``view`` /
  ``reshape`` as ``Reshape(allowzero=1)``; onnx2torch 1.5.15 refuses it
  ('"allowzero=1" is not implemented', measured here with
  scripts/op_matrix.py on Deformable DETR's MSDA core and the DCNv3 layer).
  ``allowzero`` only matters when the shape holds a 0 (ONNX ``Reshape``-14:
  with 0 a dimension is copied from the input, with allowzero=1 it is set to 0),
  so the attribute is dropped where the shape is a constant without a 0; a
  computed shape keeps it (rule ``no Reshape allowzero`` then names the node).
- ``"stack flatten as Concat"`` (:mod:`.repair_stack`): ``torch.stack(xs, dim=a).flatten(a, a + 1)``
  as one ``Concat`` (onnx2tf 1.29.24 misconverts the 5-D stack and its Reshape: Deformable DETR's
  per-level MSDA core 1.0 off in LiteRT).
- ``"scatter as Concat"`` / ``"index list as Concat"`` (:mod:`.repair_index`): ``x[:, i] = y`` and
  ``x[[1, 0]]`` (``ScatterElements`` / ``GatherND``, which ncnn does not load) as ``Slice`` + ``Concat``.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import numpy_helper

from .repair_index import index_list_as_concat, scatter_as_concat
from .repair_stack import stack_flatten_as_concat

__all__ = ["REPAIRS", "reshape_allowzero_0"]


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Initializers and ``Constant`` node outputs (attribute ``value``) by name."""
    out = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                out[node.output[0]] = value
    return out


def reshape_allowzero_0(model: onnx.ModelProto) -> list[str]:
    """Drop ``allowzero=1`` from the main graph's ``Reshape`` nodes whose shape is a constant without a 0.

    Edits ``model`` in place. Returns one line naming how many nodes changed (empty when none).
    """
    constants = _constants(model.graph)
    changed = 0
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        flag = next((a for a in node.attribute if a.name == "allowzero"), None)
        shape = constants.get(node.input[1])
        if flag is None or flag.i == 0 or shape is None or (numpy_helper.to_array(shape) == 0).any():
            continue
        node.attribute.remove(flag)
        changed += 1
    return [f"Reshape allowzero=1 dropped on {changed} node(s) with a constant shape without 0"] if changed else []


#: Repair name (``Target.repairs``) -> function editing the model in place, returning what it did.
REPAIRS: dict[str, Callable[[onnx.ModelProto], list[str]]] = {
    "Reshape allowzero 0": reshape_allowzero_0,
    "stack flatten as Concat": stack_flatten_as_concat,  # repair_stack.py
    "scatter as Concat": scatter_as_concat,  # repair_index.py
    "index list as Concat": index_list_as_concat,  # repair_index.py
}
