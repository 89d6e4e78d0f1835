"""Repair ``"float Equal as arithmetic"``: ``(a == b).float()`` of float tensors as ``1 - min(ceil(|a - b|), 1)``.

ncnn has no comparison layer: pnnx 20261020 writes ONNX ``Equal`` as ``torch.eq`` and ncnn refuses the file ("layer
torch.eq not exists or registered", measured here on CenterNet's heat-map NMS ``keep = (hmax == heat).float()``
with ``hmax = F.max_pool2d(heat, 3, 1, 1)``, the decode CenterNet, FairMOT and TTFNet deployments export). For
finite ``a`` and ``b`` the arithmetic is the same 0/1 value: ``|a - b|`` is 0 exactly when they are equal (IEEE
subtraction of distinct finite floats is never 0, gradual underflow), and ``ceil`` of any positive value is at
least 1. An infinite or NaN operand gives NaN instead of 0/1. Only an ``Equal`` whose every reader is a ``Cast``
to a floating type is rewritten (the bool itself has no arithmetic form in ncnn); the ``Cast`` stays and reads the
0/1 float.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["float_equal_as_arithmetic"]

_FLOATS: dict[int, type[np.floating]] = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    from .repair_clip import _elem_types as types

    return types(model)


def float_equal_as_arithmetic(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph float ``Equal`` read only by float ``Cast`` nodes as ``Sub, Abs, Ceil, Min, Sub``.

    Edits ``model`` in place. Returns one line naming how many ``Equal`` nodes changed (empty when none).
    """
    graph = model.graph
    equals = [n for n in graph.node if n.op_type == "Equal" and n.domain in ("", "ai.onnx")]
    if not equals:
        return []
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {v.name for v in graph.output}
    types = _elem_types(model)
    nodes: list[onnx.NodeProto] = []
    rewritten: set[str] = set()
    for node in graph.node:
        dtype = _FLOATS.get(types.get(node.input[0], 0)) if node in equals else None
        casts = readers.get(node.output[0], []) if dtype is not None else []
        if (
            dtype is None
            or node.output[0] in outputs
            or not casts
            or not all(
                r.op_type == "Cast" and any(a.name == "to" and a.i in _FLOATS for a in r.attribute) for r in casts
            )
        ):
            nodes.append(node)
            continue
        name = node.name or f"equal_{len(rewritten)}"
        one = numpy_helper.from_array(np.array(1, dtype), f"{name}_one")
        nodes += [
            helper.make_node("Constant", [], [f"{name}_one"], name=f"{name}_one", value=one),
            helper.make_node("Sub", list(node.input), [f"{name}_diff"], name=f"{name}_sub"),
            helper.make_node("Abs", [f"{name}_diff"], [f"{name}_abs"], name=f"{name}_abs"),
            helper.make_node("Ceil", [f"{name}_abs"], [f"{name}_ceil"], name=f"{name}_ceil"),
            helper.make_node("Min", [f"{name}_ceil", f"{name}_one"], [f"{name}_differs"], name=f"{name}_min"),
            helper.make_node("Sub", [f"{name}_one", f"{name}_differs"], [node.output[0]], name=name),
        ]
        rewritten.add(node.output[0])
    if not rewritten:
        return []
    del graph.node[:]
    graph.node.extend(nodes)
    # the Equal's bool output is a float now: drop its recorded type so that checkers infer it again
    kept = [v for v in graph.value_info if v.name not in rewritten]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return [f"float Equal written as arithmetic on {len(rewritten)} node(s)"]
