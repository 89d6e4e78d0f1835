"""TensorRT's explicit-quantization rules, checked on a quantized file (no GPU): :func:`tensorrt_violations`."""

from __future__ import annotations

import numpy as np
import onnx

from .placement import LINEAR_OPS, Placement


def tensorrt_violations(model: onnx.ModelProto, placement: Placement) -> list[str]:
    """Where ``model`` breaks TensorRT's explicit-quantization rules (empty: none); checked here, no GPU.

    Rules (NVIDIA TensorRT documentation, "Working with Quantized Types" and
    "Explicit Quantization"): TensorRT quantizes symmetrically, so every
    ``QuantizeLinear``/``DequantizeLinear`` has a signed int8 zero point of 0;
    weights are quantized per tensor or per output channel (``axis`` 0 for a
    ``Conv`` weight ``[K, C, R, S]``; the last axis of a ``MatMul``/``Gemm``
    weight ``[C, K]``) with positive constant scales; both the data and the
    weight input of each quantized weighted op come through a
    ``DequantizeLinear``; constants are dequantized from INT8 only (no int32
    bias: TensorRT's dequantize takes INT8/FP8/INT4/FP4); no ``QuantizeLinear`` on a weighted
    op's output (its Q/DQ placement recommendations quantize inputs); and (this project's placement) no Q/DQ sits on the
    offset path.
    """
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    found: list[str] = []
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        zp = node.input[2] if len(node.input) > 2 else ""
        if (
            node.op_type == "DequantizeLinear"
            and node.input[0] in inits
            and inits[node.input[0]].data_type != onnx.TensorProto.INT8
        ):
            found.append(
                f"DequantizeLinear {node.name!r}: TensorRT dequantizes INT8 (FP8/INT4/FP4), not "
                f"{onnx.TensorProto.DataType.Name(inits[node.input[0]].data_type)}; keep biases float"
            )
        elif zp:
            z = onnx.numpy_helper.to_array(inits[zp]) if zp in inits else None
            if z is None or z.dtype != np.int8 or np.any(z != 0):
                found.append(f"{node.op_type} {node.name!r}: zero point must be a constant int8 0 (symmetric)")
        scale = inits.get(node.input[1])
        if scale is None or np.any(onnx.numpy_helper.to_array(scale) <= 0):
            found.append(f"{node.op_type} {node.name!r}: scale must be a positive constant")
    quantized_ops = set(placement.quantize)
    for node in graph.node:
        if node.name not in quantized_ops or node.op_type not in LINEAR_OPS:
            continue
        for k in (0, 1):
            p = producer.get(node.input[k])
            if p is None or p.op_type != "DequantizeLinear":
                found.append(f"{node.op_type} {node.name!r}: input {k} does not come through DequantizeLinear")
                continue
            if k == 1 and p.input[0] in inits and onnx.numpy_helper.to_array(inits[p.input[1]]).size > 1:
                axis = next((a.i for a in p.attribute if a.name == "axis"), 1)
                rank = len(inits[p.input[0]].dims)
                want = 0 if node.op_type == "Conv" else rank - 1
                if axis % rank != want:
                    found.append(
                        f"{node.op_type} {node.name!r}: per-channel weight axis {axis}, want {want} (output channels)"
                    )
    for node in graph.node:
        if node.op_type == "QuantizeLinear":
            p = producer.get(node.input[0])
            if p is not None and p.name in quantized_ops and p.op_type in LINEAR_OPS:
                found.append(
                    f"QuantizeLinear {node.name!r} on the output of {p.op_type} {p.name!r}: "
                    "TensorRT's placement quantizes the inputs of weighted ops, not their outputs"
                )
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            for t in node.input[:1]:
                p = producer.get(t)
                if p is not None and p.name in placement.offset_path:
                    found.append(f"{node.op_type} {node.name!r} quantizes {p.name!r} of the offset path")
    return found
