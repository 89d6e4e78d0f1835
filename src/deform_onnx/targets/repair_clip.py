"""Repair ``"integer Clip as Max/Min"``: a ``Clip`` of an integer tensor as ``Max`` then ``Min``.

onnx2torch 1.5.15 reads ``Clip``'s bounds with ``float(...)`` and runs ``torch.clamp(x, min_val, max_val)``
(``node_converters/clip.py``), which turns an int64 tensor into float32. RT-DETRv2's ``cross_attn_method=
'discrete'`` clamps its int64 sampling coordinates (``sampling_coord.clamp(0, h - 1)``) and indexes the value map
with them: onnx2torch then failed in its ``GatherND`` ("IndexError: tensors used as indices must be long, int,
byte or bool tensors", measured here). ``Max(x, lo)`` then ``Min(., hi)`` is the same value (ONNX ``Clip``:
``min(max(x, lo), hi)``), and onnx2torch's ``Max``/``Min`` keep the dtype. A float ``Clip`` is left as it is.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

__all__ = ["integer_clip_as_max_min"]

_INTEGERS = {
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT16,
    TensorProto.UINT32,
    TensorProto.UINT64,
}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model).graph
    found = {t.name: t.data_type for t in model.graph.initializer}
    found.update(
        (v.name, v.type.tensor_type.elem_type)
        for v in (*inferred.input, *inferred.value_info, *inferred.output)
        if v.type.HasField("tensor_type")
    )
    return found


def integer_clip_as_max_min(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph ``Clip`` (opset >= 11: bounds as inputs) of an integer tensor as ``Max`` + ``Min``.

    Returns one line naming how many ``Clip`` nodes changed (empty when none).
    """
    graph = model.graph
    clips = [n for n in graph.node if n.op_type == "Clip" and n.domain in ("", "ai.onnx") and not n.attribute]
    if not clips:
        return []
    types = _elem_types(model)
    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in graph.node:
        if node not in clips or types.get(node.input[0]) not in _INTEGERS:
            nodes.append(node)
            continue
        value = node.input[0]
        lo = node.input[1] if len(node.input) > 1 else ""
        hi = node.input[2] if len(node.input) > 2 else ""
        name = node.name or f"clip_{changed}"
        if lo and hi:
            nodes.append(helper.make_node("Max", [value, lo], [f"{name}_at_least"], name=f"{name}_max"))
            nodes.append(helper.make_node("Min", [f"{name}_at_least", hi], list(node.output), name=f"{name}_min"))
        elif lo or hi:
            nodes.append(helper.make_node("Max" if lo else "Min", [value, lo or hi], list(node.output), name=name))
        else:
            nodes.append(helper.make_node("Identity", [value], list(node.output), name=name))
        changed += 1
    if not changed:
        return []
    del graph.node[:]
    graph.node.extend(nodes)
    return [f"integer Clip written as Max/Min on {changed} node(s)"]
