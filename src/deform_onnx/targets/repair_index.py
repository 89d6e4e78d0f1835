"""Repairs ``"scatter as Concat"`` and ``"index list as Concat"``: indexing ncnn cannot load, as Slice + Concat.

Model code indexes in ways torch's exporters write as ``ScatterElements`` and ``GatherND``, which ncnn
(through pnnx 20261020) does not load ("layer ScatterElements not exists or registered", measured here on
voxelmorph's ``SpatialTransformer``, case c38):

- an in-place assignment to one index of an axis, ``x[:, i, ...] = y`` (``aten.select_scatter``): a
  ``ScatterElements(data, indices, updates, axis=a)`` whose constant ``indices`` hold one value ``i``
  and cover every other axis of ``data`` -- the same values as ``Concat(data[.., :i], updates,
  data[.., i+1:], axis=a)`` (ONNX ``ScatterElements`` with ``reduction="none"``: each ``updates``
  element replaces ``data`` at its index on ``a``, the other coordinates its own);
- a constant list of indices on the first axis, ``x[[1, 0]]`` (after the exporter moves the axis
  first): ``GatherND(data, indices)`` with ``batch_dims=0`` and constant ``indices`` of shape ``[n, 1]``
  -- ``Concat(data[i_0:i_0+1], ..., data[i_n-1:i_n-1+1], axis=0)``.

Both are rewritten only where every shape involved is static (the target runs static shapes) and the
pattern is exactly the one above; anything else is left for the target's rule to name.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .repair_stack import _constants, _static_shapes

__all__ = ["index_list_as_concat", "scatter_as_concat"]


def _slice(graph: onnx.GraphProto, prefix: str, data: str, axis: int, start: int, end: int) -> tuple[str, list]:
    """A ``Slice`` of ``data[start:end]`` on ``axis`` (its constants as initializers): ``(output, nodes)``."""
    names = [f"{prefix}_{what}" for what in ("starts", "ends", "axes", "out")]
    for name, value in zip(names[:3], (start, end, axis)):
        graph.initializer.append(numpy_helper.from_array(np.array([value], dtype=np.int64), name))
    return names[3], [helper.make_node("Slice", [data, *names[:3]], [names[3]], name=names[3])]


def _replace(graph: onnx.GraphProto, node: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
    """Put ``new`` where ``node`` was (its order keeps the graph topologically sorted)."""
    at = list(graph.node).index(node)
    graph.node.remove(node)
    for offset, n in enumerate(new):
        graph.node.insert(at + offset, n)


def scatter_as_concat(model: onnx.ModelProto) -> list[str]:
    """Rewrite single-index ``ScatterElements`` (``x[:, i] = y``) as ``Slice`` + ``Concat``; edits ``model`` in place.

    Returns:
        One line saying how many nodes changed (empty when none).
    """
    g = model.graph
    shapes, constants = _static_shapes(model), _constants(g)
    changed = 0
    for node in list(g.node):
        if node.op_type != "ScatterElements" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        data, indices, updates = node.input
        index = constants.get(indices)
        shape = shapes.get(data)
        if attrs.get("reduction", b"none") not in (b"none", "none") or index is None or shape is None:
            continue
        axis = attrs.get("axis", 0) % len(shape)
        others = [d for k, d in enumerate(shape) if k != axis]
        values = np.unique(index)
        if values.size != 1 or index.shape[axis] != 1 or [d for k, d in enumerate(index.shape) if k != axis] != others:
            continue
        i = int(values[0]) % shape[axis]
        prefix = f"{node.name or node.output[0]}_as_concat"
        pieces, nodes = [], []
        if i > 0:
            out, made = _slice(g, f"{prefix}_before", data, axis, 0, i)
            pieces.append(out)
            nodes += made
        pieces.append(updates)
        if i < shape[axis] - 1:
            out, made = _slice(g, f"{prefix}_after", data, axis, i + 1, shape[axis])
            pieces.append(out)
            nodes += made
        nodes.append(helper.make_node("Concat", pieces, list(node.output), name=prefix, axis=axis))
        _replace(g, node, nodes)
        changed += 1
    return [f"{changed} single-index ScatterElements (x[:, i] = y) written as Slice + Concat"] if changed else []


def index_list_as_concat(model: onnx.ModelProto) -> list[str]:
    """Rewrite ``GatherND`` with constant ``[n, 1]`` indices (``x[[1, 0]]``) as ``Slice`` + ``Concat``; in place.

    Returns:
        One line saying how many nodes changed (empty when none).
    """
    g = model.graph
    shapes, constants = _static_shapes(model), _constants(g)
    changed = 0
    for node in list(g.node):
        if node.op_type != "GatherND" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        batch_dims = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
        data, indices = node.input
        index = constants.get(indices)
        shape = shapes.get(data)
        if batch_dims != 0 or index is None or shape is None or index.ndim != 2 or index.shape[1] != 1:
            continue
        prefix = f"{node.name or node.output[0]}_as_concat"
        pieces, nodes = [], []
        for k, i in enumerate(int(v) % shape[0] for v in index[:, 0]):
            out, made = _slice(g, f"{prefix}_{k}", data, 0, i, i + 1)
            pieces.append(out)
            nodes += made
        nodes.append(helper.make_node("Concat", pieces, list(node.output), name=prefix, axis=0))
        _replace(g, node, nodes)
        changed += 1
    return [f"{changed} GatherND with a constant index list (x[[1, 0]]) written as Slice + Concat"] if changed else []
