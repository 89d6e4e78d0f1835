"""Quantization of the weight-first contraction for ONNX Runtime: uint8 weight first, int8 columns second.

:func:`~deform_onnx.ops.deform_conv.integer_contraction.weight_first_contraction`
writes ``MatMul(W_normalised, cols)``. For ONNX Runtime to run it on MLAS's
U8S8 kernel (``MatMulIntegerToFloat``), two things must hold in the file:

1. the weight (first input) is uint8 per tensor, symmetric (zero point 128),
   and the columns (second input) int8: :func:`overrides` says so to
   ``quantize_static`` (``TensorQuantOverrides``);
2. the columns' ``QuantizeLinear`` is not directly followed by its
   ``DequantizeLinear``. ONNX Runtime's ``QDQS8ToU8Transformer``
   (``onnxruntime/core/optimizer/qdq_transformer/qdq_s8_to_u8.cc``) turns every
   int8 ``Q -> DQ`` pair into uint8 on x86, which makes the kernel U8U8 (2x
   slower, measured). :func:`quantize_before_layout` moves the ``Q`` above the
   layout ops (``Reshape``) between the mask product and the ``MatMul``:
   ``x -> Q -> Reshape -> DQ``. A per-tensor ``DequantizeLinear`` commutes
   with a ``Reshape`` exactly, so the numbers do not change; and
   ``QDQPropagationTransformer`` does not move it back (the ``Q`` follows the
   product ``Mul`` and the ``DQ`` precedes the ``MatMul``, neither of which it
   propagates through).
"""

from __future__ import annotations

import onnx

from .placement import Placement

#: Layout ops a per-tensor quantized tensor passes unchanged (the columns' reshapes).
_COMMUTING = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def overrides(placement: Placement) -> dict[str, list[dict]]:
    """``TensorQuantOverrides`` for ``quantize_static``: per weight-first contraction, its weight and columns."""
    from onnxruntime.quantization import QuantType

    out: dict[str, list[dict]] = {}
    for weight, columns in placement.weight_first.values():
        out[weight] = [{"quant_type": QuantType.QUInt8, "symmetric": True}]
        out[columns] = [{"quant_type": QuantType.QInt8}]
    return out


def quantize_before_layout(model: onnx.ModelProto, placement: Placement) -> int:
    """Move each weight-first contraction's column ``QuantizeLinear`` above its layout ops; returns how many.

    ``x -> Reshape.. -> Q -> DQ -> MatMul`` becomes ``x -> Q -> Reshape.. -> DQ -> MatMul``
    (in place; only per-tensor ``Q``s with a single consumer chain are moved).
    """
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for t in node.input:
            consumers[t] = consumers.get(t, 0) + 1
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    moved = 0
    before: dict[str, str] = {}  # moved Q -> the layout op it now precedes (names are unique)
    now_int8: set[str] = set()  # the layout ops' outputs, whose float value_info is stale
    for node in graph.node:
        if node.name not in placement.weight_first:
            continue
        dq = producer.get(node.input[1])
        q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or q.op_type != "QuantizeLinear" or consumers.get(q.output[0]) != 1:
            continue
        if q.input[1] not in inits or len(inits[q.input[1]].dims) != 0:
            continue  # per-axis: would not commute with a reshape
        chain = []
        top = producer.get(q.input[0])
        while (
            top is not None
            and top.op_type in _COMMUTING
            and consumers.get(top.output[0]) == 1
            and top.output[0] not in outputs
        ):
            chain.append(top)
            top = producer.get(top.input[0])
        if not chain or dq is None:
            continue
        first, last = chain[-1], chain[0]  # upstream-most, downstream-most layout op
        source = first.input[0]
        q.input[0] = source
        q.output[0] = source + "_int8"
        first.input[0] = q.output[0]
        dq.input[0] = last.output[0]
        now_int8.update(n.output[0] for n in chain)
        before[q.name] = first.name
        moved += 1
    if now_int8:
        kept = [v for v in graph.value_info if v.name not in now_int8]
        del graph.value_info[:]
        graph.value_info.extend(kept)
    if before:  # keep the node list in topological order: each moved Q now runs before its chain
        order = list(range(len(graph.node)))
        index = {n.name: k for k, n in enumerate(graph.node)}
        for q_name, first_name in before.items():
            order.remove(index[q_name])
            order.insert(order.index(index[first_name]), index[q_name])
        nodes = [onnx.NodeProto() for _ in order]
        for new, k in zip(nodes, order):
            new.CopyFrom(graph.node[k])
        del graph.node[:]
        graph.node.extend(nodes)
    return moved
