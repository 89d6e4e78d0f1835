"""Repair ``"Split as Slice"``: each ``Split`` whose pieces are known before run time as one ``Slice`` per piece.

onnx2torch 1.5.15 converts ``Split`` only at versions 2, 11 and 13 (its converter registry, read into
:mod:`.loadable_ops`), so every ``Split`` of an opset-19 file is ``Split-18`` there and refused ("Split-18 is
not among the ops onnx2torch converts"). Target ``onnx2torch-native`` needs opset 19 (``DeformConv``), and
mmdet's ``ModulatedDeformConv2dPack`` splits its offset predictor's output with ``torch.chunk(out, 3, dim=1)``:
without this repair that target could not take the DCNv2 layer it is for. ``Slice``-13 is the version at
opset 19, and onnx2torch has it. The pieces are the same values: ``Split``-18's ``split`` input, or
``num_outputs`` pieces of ``ceil(dim / n)`` with a smaller last one (what ``torch.chunk`` makes), read along a
static axis; a ``Split`` whose pieces depend on a run-time size is left (the loadable-ops rule then names it).
"""

from __future__ import annotations

import math

import onnx
from onnx import helper, numpy_helper

from ..core.protos import constant_tensors, inferred_dims

__all__ = ["split_as_slice"]


def _pieces(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto], dim: int | None) -> list[int] | None:
    """The sizes of ``node``'s outputs along its axis, or ``None`` when they are not known before run time."""
    if len(node.input) > 1 and node.input[1]:
        given = consts.get(node.input[1])
        return [int(v) for v in numpy_helper.to_array(given).reshape(-1)] if given is not None else None
    split = next((list(a.ints) for a in node.attribute if a.name == "split"), None)  # Split-2/11
    if split:
        return split
    if dim is None:
        return None
    count = next((a.i for a in node.attribute if a.name == "num_outputs"), len(node.output))
    chunk = math.ceil(dim / count)
    return [chunk] * (count - 1) + [dim - chunk * (count - 1)]


def split_as_slice(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph ``Split`` with pieces known before run time as ``Slice`` nodes (in place).

    Returns one line naming how many ``Split`` nodes changed (empty when none).
    """
    graph = model.graph
    if not any(n.op_type == "Split" and n.domain in ("", "ai.onnx") for n in graph.node):
        return []
    consts = constant_tensors(graph)
    dims = inferred_dims(model)
    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in graph.node:
        if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        shape = dims.get(node.input[0])
        dim = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
        sizes = _pieces(node, consts, dim)
        if sizes is None or len(sizes) != len(node.output):
            nodes.append(node)
            continue
        base, start = node.name or f"split{changed}", 0
        for k, (out, size) in enumerate(zip(node.output, sizes, strict=True)):
            bounds = [f"{base}__slice{k}_{what}" for what in ("starts", "ends", "axes")]
            for name, value in zip(bounds, (start, start + size, axis), strict=True):  # initializers: onnx2torch
                graph.initializer.append(
                    helper.make_tensor(name, onnx.TensorProto.INT64, [1], [value])
                )  # has no Constant-19
            nodes.append(helper.make_node("Slice", [node.input[0], *bounds], [out], name=f"{base}__slice{k}"))
            start += size
        changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return [f"Split written as Slice on {changed} node(s)"] if changed else []
