"""Repair ``"float16 InstanceNormalization in float32"``: a float16 ``InstanceNormalization`` computed in float32.

torch's exporters write ``nn.GroupNorm`` as ``Reshape``, ``InstanceNormalization`` (unit scale, zero bias),
``Reshape``, ``Mul``, ``Add``. TVM 0.27 (relax ONNX frontend, its legalized kernel) computes a float16
``InstanceNormalization``'s mean and variance in float16: a float16 ``GroupNorm(8, 32)`` on a 32x32 map came out
0.17 off PyTorch, three quarters of its elements outside the float16 tolerance (measured here; DETR-family input
projections, ``nn.GroupNorm(32, d_model)``, as Grounding DINO runs in float16). ONNX Runtime computes it in
float32. The node reads its input, scale and bias cast to float32 and its output is cast back to float16: the
values are ONNX's (the statistics in float32, one rounding at the end), and TVM then matches PyTorch.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

__all__ = ["float16_instance_norm_in_float32"]


def float16_instance_norm_in_float32(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph float16 ``InstanceNormalization`` between ``Cast`` nodes to and from float32.

    Edits ``model`` in place. Returns one line naming how many nodes changed (empty when none).
    """
    from .repair_clip import _elem_types

    graph = model.graph
    norms = [n for n in graph.node if n.op_type == "InstanceNormalization" and n.domain in ("", "ai.onnx")]
    if not norms:
        return []
    types = _elem_types(model)
    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in graph.node:
        if node not in norms or types.get(node.input[0]) != TensorProto.FLOAT16:
            nodes.append(node)
            continue
        name = node.name or f"instance_norm_{changed}"
        wide = []
        for k, value in enumerate(node.input):
            wide.append(f"{name}_in{k}_float32")
            nodes.append(helper.make_node("Cast", [value], [wide[-1]], name=f"{name}_cast_in{k}", to=TensorProto.FLOAT))
        norm = helper.make_node("InstanceNormalization", wide, [f"{name}_float32"], name=name)
        norm.attribute.extend(node.attribute)
        nodes.append(norm)
        nodes.append(
            helper.make_node("Cast", [f"{name}_float32"], [node.output[0]], name=f"{name}_cast", to=TensorProto.FLOAT16)
        )
        changed += 1
    if not changed:
        return []
    del graph.node[:]
    graph.node.extend(nodes)
    return [f"float16 InstanceNormalization computed in float32 on {changed} node(s)"]
