"""Repair ``"stack flatten as Concat"``: ``torch.stack(xs, dim=a).flatten(a, a + 1)`` written as one ``Concat``.

Deformable DETR's PyTorch MSDA core (one ``F.grid_sample`` per level) ends with
``torch.stack(sampling_value_list, dim=-2).flatten(-2)``; exported, that is an ``Unsqueeze`` per
tensor, a ``Concat`` on the new axis and a ``Reshape`` merging it with the next. onnx2tf 1.29.24 keeps
the 5-D ``Concat`` in another axis order and its ``Reshape`` then merges the wrong axes: the converted
model runs 1.0 off PyTorch in LiteRT while the ONNX file is right on ONNX Runtime (measured here,
scripts/repro/onnx2tf_stack_flatten.py; a constant shape on the ``Reshape`` is still 1.0 off). Stacking
on axis ``a`` and merging ``a`` with ``a + 1`` gives the values of ``Concat(xs, axis=a)`` (ONNX
``Concat``/``Unsqueeze``/``Reshape`` definitions), which converts and matches (1.6e-7). The rewrite
is made only where the ``Reshape``'s target shape is known (a constant, or computed from static
shapes: ``Shape`` of an inferred value through shape arithmetic) and merges exactly those two axes;
the ``Concat`` is left to its other users (``Shape`` nodes whose results are no longer used are
removed with the rest of the unused nodes by onnx-ir's ``RemoveUnusedNodesPass``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.protos import drop_unused_nodes

__all__ = ["stack_flatten_as_concat"]

#: Shape-arithmetic ops whose values are folded when every input is known (``Shape`` of static values).
_SHAPE_OPS = frozenset({"Slice", "Concat", "Gather", "Unsqueeze", "Squeeze", "Cast", "Mul", "Add", "Sub", "Div"})


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    inferred = onnx.shape_inference.infer_shapes(model).graph
    out = {}
    for v in (*inferred.input, *inferred.value_info, *inferred.output):
        dims = v.type.tensor_type.shape.dim
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[v.name] = [d.dim_value for d in dims]
    out.update({t.name: list(t.dims) for t in model.graph.initializer})
    return out


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                out[node.output[0]] = numpy_helper.to_array(value)
    return out


def _fold(model: onnx.ModelProto, name: str, shapes: dict[str, list[int]], consts: dict[str, np.ndarray]):
    """The value of ``name`` when it is shape arithmetic on constants and ``Shape`` of static values, else None."""
    from onnx.reference import ReferenceEvaluator

    producer = {o: n for n in model.graph.node for o in n.output}
    known: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def visit(value: str) -> bool:
        if value in consts:
            known[value] = consts[value]
            return True
        node = producer.get(value)
        if node is None:
            return False
        if node.op_type == "Shape" and node.input[0] in shapes:
            dims = shapes[node.input[0]]
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), len(dims))
            known[value] = np.array(dims[start:end], dtype=np.int64)
            return True
        if node.op_type not in _SHAPE_OPS or not all(visit(x) for x in node.input if x):
            return False
        if node not in nodes:
            nodes.append(node)
        return True

    if not visit(name):
        return None
    if not nodes:
        return known[name]
    order = [n for n in model.graph.node if n in nodes]
    graph = helper.make_graph(
        order,
        "fold",
        [],
        [helper.make_tensor_value_info(name, onnx.TensorProto.INT64, None)],
        [numpy_helper.from_array(v, k) for k, v in known.items()],
    )
    folded = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    outputs: list = list(ReferenceEvaluator(folded).run(None, {}))
    return np.asarray(outputs[0])


def _target_shape(shape: np.ndarray, given: list[int], allowzero: bool) -> list[int] | None:
    """ONNX ``Reshape``'s output shape for input shape ``given`` (0 copies a dimension unless allowzero)."""
    dims = [given[i] if d == 0 and not allowzero else int(d) for i, d in enumerate(shape.tolist())]
    if dims.count(-1) > 1:
        return None
    if -1 in dims:
        rest = int(np.prod([d for d in dims if d != -1]))
        if rest == 0 or int(np.prod(given)) % rest:
            return None
        dims[dims.index(-1)] = int(np.prod(given)) // rest
    return dims


def stack_flatten_as_concat(model: onnx.ModelProto) -> list[str]:
    """Replace ``Reshape(Concat(Unsqueeze(x_i, a)..., axis=a))`` merging axes ``a, a + 1`` by ``Concat(x_i, axis=a)``.

    Edits ``model`` in place (main graph). Returns one line naming how many were replaced (empty when none).
    """
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    consts = _constants(graph)
    shapes = _static_shapes(model)
    changed = 0
    for index, node in enumerate(graph.node):
        cat = producer.get(node.input[0]) if node.op_type == "Reshape" and len(node.input) == 2 else None
        if cat is None or cat.op_type != "Concat" or cat.output[0] not in shapes:
            continue
        stacked = shapes[cat.output[0]]
        rank = len(stacked)
        axis = next(a.i for a in cat.attribute if a.name == "axis") % rank
        ups = [producer[x] for x in cat.input if x in producer]
        if not ups or len(ups) != len(cat.input) or any(u.op_type != "Unsqueeze" for u in ups) or axis + 1 >= rank:
            continue
        axes = []
        for u in ups:
            attr = next((list(a.ints) for a in u.attribute if a.name == "axes"), None)
            axes.append(attr if attr is not None else (consts[u.input[1]].tolist() if u.input[1] in consts else None))
        if any(a is None or [x % rank for x in a] != [axis] for a in axes):
            continue
        shape = _fold(model, node.input[1], shapes, consts)
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        merged = [*stacked[:axis], stacked[axis] * stacked[axis + 1], *stacked[axis + 2 :]]
        if shape is None or _target_shape(shape, stacked, allowzero) != merged:
            continue
        concat = helper.make_node("Concat", [u.input[0] for u in ups], list(node.output), name=node.name, axis=axis)
        graph.node[index].CopyFrom(concat)
        changed += 1
    if not changed:
        return []
    drop_unused_nodes(model)
    return [f"stack then flatten written as one Concat on {changed} node(s)"]
