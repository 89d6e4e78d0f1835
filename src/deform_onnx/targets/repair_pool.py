"""Repair ``"ceil_mode pooling explicit"``: ``ceil_mode=1`` pooling that ncnn, MNN and OpenVINO compute as PyTorch.

PyTorch (and ONNX Runtime) pool with ``ceil_mode=True`` this way, per spatial axis of size ``n`` with kernel
extent ``k`` (``dilation * (kernel - 1) + 1``), stride ``s`` and pads ``b`` (begin), ``e`` (end):
``out = ceil((n + b + e - k) / s) + 1``, less one when the last window would start in the end pad
(``(out - 1) * s >= n + b``); an average divides by the window clipped to ``[-b, n + e)``
(``count_include_pad=True``) or to the input (``False``). ncnn 1.0.20261020's ``Pooling`` (what pnnx
writes for ``AveragePool`` / ``MaxPool``; ``src/layer/pooling.cpp``, read, and measured here) pads the tail
so the last window fits ("full padding", ``pad_mode=0``) and then:

- with ``avgpool_count_include_pad=1`` divides every window by the whole kernel area, the zeros of its tail
  pad included: the last row/column is off wherever that window overhangs ``n + e`` (PaddleOCR's
  ``ResNet_vd`` shortcut ``AvgPool2d(2, 2, 0, ceil_mode=True)`` on an odd map: measured 1.4 off on a 7x9 map;
  ``AvgPool2d(3, 2, 1, ceil_mode=True)`` on 8x10 0.38 off);
- never drops a last window that starts in the end pad: one row/column more than PyTorch
  (``AvgPool2d(2, 2, 1, ceil_mode=True)`` or ``MaxPool2d(2, 2, 1, ceil_mode=True)`` on 5x7: 4x5, not 3x4).

``count_include_pad=0`` averages and max pooling without a dropped window run right (measured). MNN 3.6.1
keeps the dropped window too (of an average and of a max pool); OpenVINO 2026.4.1 keeps it for a max pool and
divides a partial last window of an average counting pads otherwise when it has pads (measured here, the
same graphs: ``tests/targets/test_ncnn_pooling.py``); targets ``mnn``, ``openvino`` and
``openvino-extension`` apply the repair too. The repair,
for 4-D pools with static spatial sizes and ``auto_pad`` unset:

- where every window fits inside the padded input (a dropped window, no partial one): ``ceil_mode=0``,
  the same windows and values (the ceil count less the dropped one is the floor count);
- an average with ``count_include_pad=1`` whose last window overhangs: the pads as an explicit zero ``Pad``
  (begin ``b``; end ``e``, or less where the windows need less: that drops the dropped window) and the
  pool with no pads and ``count_include_pad=0``: PyTorch's divisor counts the pads and not the overhang,
  which is the clipped window of the padded input. Without pads (PaddleOCR's case) no ``Pad`` is written.

A ``count_include_pad=0`` average or a max pool with a dropped window on one axis and a partial one on the
other is left (the target's run then refuses it).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.protos import inferred_dims

__all__ = ["ceil_mode_pooling_explicit"]


def _axes(node: onnx.NodeProto, size: list[int]) -> list[tuple[int, int, int, int, bool]] | None:
    """Per spatial axis ``(begin pad, end pad, out, fit, dropped)`` of a ``ceil_mode=1`` pool, or ``None``.

    ``fit`` is the end pad the windows reach (``(out - 1) * stride + extent - n - begin``): more than the end
    pad where the last window overhangs it; ``dropped``: PyTorch dropped a last window that starts in the end pad.
    """
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if not attrs.get("ceil_mode") or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    kernel = list(attrs.get("kernel_shape", []))
    if len(kernel) != len(size):
        return None
    strides = list(attrs.get("strides", [1] * len(size)))
    dilations = list(attrs.get("dilations", [1] * len(size)))
    pads = list(attrs.get("pads", [0] * 2 * len(size)))
    out = []
    for n, k, s, d, b, e in zip(size, kernel, strides, dilations, pads[: len(size)], pads[len(size) :], strict=True):
        extent = d * (k - 1) + 1
        count = math.ceil((n + b + e - extent) / s) + 1
        dropped = (count - 1) * s >= n + b  # the last window would start in the end pad: PyTorch drops it
        count -= dropped
        out.append((b, e, count, (count - 1) * s + extent - n - b, dropped))
    return out


def _declare(graph: onnx.GraphProto, name: str, dims: list[int]) -> None:
    """Drop a stale ``value_info`` of ``name``; a graph output named so gets ``dims`` (exporters wrote ONNX's count)."""
    for info in [v for v in graph.value_info if v.name == name]:
        graph.value_info.remove(info)
    for info in graph.output:
        shape = info.type.tensor_type.shape
        if info.name == name and len(shape.dim) == len(dims):
            for dim, value in zip(shape.dim, dims, strict=True):
                dim.Clear()
                dim.dim_value = value


def ceil_mode_pooling_explicit(model: onnx.ModelProto) -> list[str]:
    """Rewrite the main graph's ``ceil_mode=1`` pools ncnn computes differently from PyTorch (in place).

    Returns:
        One line naming how many pools changed and how (empty when none).
    """
    graph = model.graph
    pools = [n for n in graph.node if n.op_type in ("AveragePool", "MaxPool") and n.domain in ("", "ai.onnx")]
    if not pools:
        return []
    dims = inferred_dims(model)
    floor = padded = 0
    for node in pools:
        shape = dims.get(node.input[0])
        if shape is None or len(shape) != 4 or any(v is None for v in shape) or len(node.output) != 1:
            continue
        size = [int(v) for v in shape[2:]]  # type: ignore[arg-type]
        axes = _axes(node, size)
        if axes is None:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dropped = any(axis[4] for axis in axes)
        partial = any(fit > e for _, e, _, fit, _ in axes)
        count_pad = node.op_type == "AveragePool" and bool(attrs.get("count_include_pad", 0))
        out_dims = [int(v) for v in shape[:2]] + [count for _, _, count, _, _ in axes]  # type: ignore[arg-type]
        if not partial and dropped:
            _set(node, ceil_mode=0)
            floor += 1
        elif partial and count_pad and all(d == 1 for d in attrs.get("dilations", [1, 1])):
            begins = [b for b, *_ in axes]
            ends = [min(e, fit) for _, e, _, fit, _ in axes]
            if any(begins) or any(ends):
                name = f"{node.name or node.output[0]}__pads"
                pads = np.array([0, 0, *begins, 0, 0, *ends], dtype=np.int64)
                graph.initializer.append(numpy_helper.from_array(pads, name))
                padded_input = f"{node.output[0]}__padded"
                at = list(graph.node).index(node)
                pad = helper.make_node("Pad", [node.input[0], name], [padded_input], name=padded_input, mode="constant")
                graph.node.insert(at, pad)  # mode written out: pnnx matches a Pad only with it
                node.input[0] = padded_input
            _set(node, pads=[0, 0, 0, 0], count_include_pad=0)
            padded += 1
        else:
            continue
        _declare(graph, node.output[0], out_dims)
    done = []
    if floor:
        done.append(f"ceil_mode=1 pooling whose windows all fit written with ceil_mode=0 on {floor} node(s)")
    if padded:
        done.append(f"ceil_mode=1 AveragePool counting pads written as Pad + count_include_pad=0 on {padded} node(s)")
    return done


def _set(node: onnx.NodeProto, **values: int | list[int]) -> None:
    """Set (or add) ``node``'s attributes to ``values``."""
    for name, value in values.items():
        for attr in [a for a in node.attribute if a.name == name]:
            node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(name, value))
