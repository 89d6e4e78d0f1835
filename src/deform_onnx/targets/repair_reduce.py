"""Repair ``"reductions as pooling and Conv"``: ONNX ``Reduce*`` nodes written as ops pnnx converts right for ncnn.

pnnx 20261020 converts every ONNX ``Reduce*`` (``ReduceMean``, ``ReduceMax``, ``ReduceSum``, ``ReduceL2``, ...,
``keepdims`` 1 or 0) into an ncnn ``Reduction`` whose axes are the ONNX axes not shifted for ncnn's missing batch
axis (measured here: ``ReduceMean`` over axis 1 of ``[1, C, H, W]`` reduced H, over ``(2, 3)`` W only, over 3
nothing). An SE block's ``x.mean((2, 3), keepdim=True)``, CBAM's ``x.mean(1, keepdim=True)`` /
``x.max(1, keepdim=True)`` and SuperPoint's ``F.normalize(descriptors.reshape(b, c, -1), dim=1)`` were refused
by the ``ncnn`` target's run. The ops below ran right on ncnn (measured here, each on its own small graph):

- spatial axes of a 4-D value: ``GlobalAveragePool`` / ``GlobalMaxPool`` (both), ``AveragePool`` / ``MaxPool``
  with a kernel spanning the reduced axis (one);
- the channel axis: ``Conv`` with a ones weight ``[1, C, 1, 1]`` (a sum), and ``Transpose`` to ``[N, H, C, W]``,
  ``MaxPool`` with kernel ``[C, 1]``, ``Transpose`` back (a max).

Each reduction becomes: an elementwise first step (``Mul(x, x)`` for ``ReduceL2`` / ``ReduceSumSquare``,
``Abs`` for ``ReduceL1``, ``Neg`` for ``ReduceMin``: the min is the negated max of the negation), the spatial
pooling (mean or max), the channel step (sum or max), one ``Mul`` by a constant (the spatial element count for a
sum, ``1 / C`` for a mean over channels), a last step (``Sqrt`` for ``ReduceL2``, ``Neg`` for ``ReduceMin``) and a
``Reshape`` to the node's static output shape where ``keepdims=0`` or the value was not 4-D (a 2-D ``[N, C]`` or
3-D ``[N, C, L]`` value is read as ``[N, C, 1, 1]`` / ``[N, C, 1, L]``). The values are ONNX's up to float rounding
of the summation order (a spatial sum is the pooled mean times the count).

Rewritten: a node of the main graph whose input is float with a static shape of rank 2 to 4 and a leading (batch)
axis of 1 (ncnn's blobs drop it; the ``ncnn blobs`` rule refuses a larger batch), whose reduced axes are known
(the ``axes`` attribute, or a constant ``axes`` input from opset 18; none: every axis); a reduced axis of size 1,
the batch included, needs no pooling. Left as written (the target's run in ncnn then refuses the file where ncnn
gets it wrong): ``ReduceProd``, ``ReduceLogSum``, ``ReduceLogSumExp``, 5-D values, dynamic shapes, a leading axis
above 1, a reduction of every axis to a 0-d value (``x.mean()``: ncnn loads no ``Reshape`` to 0-d; pnnx writes
such a node as ncnn's reduce-all ``Reduction``, which ran right for ``ReduceMean``, ``ReduceSum``, ``ReduceL2`` and,
without an ``axes`` attribute, ``ReduceMax``), and ``F.normalize(x, dim=1)`` on a 4-D value (``ReduceL2`` over
axis 1 read by ``Clip`` -> ``Expand`` -> ``Div(x, .)``), which pnnx fuses into ncnn's own ``Normalize`` layer:
that ran right as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.protos import constant_tensors, inferred_dims

__all__ = ["ALL_REDUCTIONS", "REDUCTIONS", "reductions_as_pooling_and_conv", "reductions_left"]

#: op type -> (first step, spatial pooling, channel step, scale by the spatial count, last step)
REDUCTIONS: dict[str, tuple[str | None, str, str, bool, str | None]] = {
    "ReduceMean": (None, "mean", "sum", False, None),
    "ReduceSum": (None, "mean", "sum", True, None),
    "ReduceMax": (None, "max", "max", False, None),
    "ReduceMin": ("Neg", "max", "max", False, "Neg"),
    "ReduceL2": ("Square", "mean", "sum", True, "Sqrt"),
    "ReduceSumSquare": ("Square", "mean", "sum", True, None),
    "ReduceL1": ("Abs", "mean", "sum", True, None),
}


def _axes(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto], rank: int) -> list[int] | None:
    """The node's reduced axes (non-negative, sorted), or ``None`` when they are not known before run time."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if "axes" in attrs:
        axes = list(attrs["axes"])
    elif len(node.input) > 1 and node.input[1]:
        if node.input[1] not in consts:
            return None
        axes = [int(v) for v in numpy_helper.to_array(consts[node.input[1]]).reshape(-1)]
    else:
        axes = []
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return None
    return sorted({a % rank for a in axes})


def _is_4d_normalize(
    node: onnx.NodeProto, axes: list[int], rank: int, readers: dict[str, list[onnx.NodeProto]]
) -> bool:
    """``F.normalize(x, dim=1)`` on a 4-D ``x``: ``Div(x, Expand(Clip(ReduceL2(x, [1]))))`` (``Expand`` optional)."""
    if node.op_type != "ReduceL2" or rank != 4 or axes != [1]:
        return False
    value = node.output[0]
    for op in ("Clip", "Expand", "Div"):
        nxt = readers.get(value, [])
        if len(nxt) == 1 and op == "Expand" and nxt[0].op_type == "Div":
            op = "Div"  # no Expand: the Div reads the clipped norm
        if len(nxt) != 1 or nxt[0].op_type != op:
            return False
        if op == "Div":
            return list(nxt[0].input[:2]) == [node.input[0], value]
        value = nxt[0].output[0]
    return False


class _Writer:
    """Appends the nodes and constants of one rewrite, named after the node they replace."""

    def __init__(self, graph: onnx.GraphProto, base: str, dtype: np.dtype) -> None:
        self.graph, self.base, self.dtype = graph, base, dtype
        self.nodes: list[onnx.NodeProto] = []

    def const(self, tag: str, value: np.ndarray) -> str:
        name = f"{self.base}__{tag}_value"
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], tag: str, out: str | None = None, **attrs: Any) -> str:
        name = out or f"{self.base}__{tag}"
        self.nodes.append(helper.make_node(op, inputs, [name], name=f"{self.base}__{tag}", **attrs))
        return name


def _rewrite(
    node: onnx.NodeProto, shape: list[int], axes: list[int], keep: bool, graph: onnx.GraphProto, dtype: np.dtype
) -> list[onnx.NodeProto]:
    """The nodes computing ``node``'s output from its input with pooling, ``Conv`` and elementwise ops."""
    first, spatial_kind, channel_kind, by_count, last = REDUCTIONS[node.op_type]
    rank = len(shape)
    # read as 4-D [N, C, H, W]: [N, C] -> [N, C, 1, 1], [N, C, L] -> [N, C, 1, L]
    where = {2: {0: 0, 1: 1}, 3: {0: 0, 1: 1, 2: 3}, 4: {0: 0, 1: 1, 2: 2, 3: 3}}[rank]
    dims4 = [shape[0], shape[1], 1, shape[2]] if rank == 3 else [*shape, 1, 1][:4]
    reduced = {where[a] for a in axes if shape[a] != 1}  # an axis of size 1 sums, averages and maxes to itself
    out_shape = (
        [1 if i in axes else d for i, d in enumerate(shape)]
        if keep
        else [d for i, d in enumerate(shape) if i not in axes]
    )
    w = _Writer(graph, node.name or node.output[0], dtype)
    value = node.input[0]
    if rank != 4:
        value = w.node("Reshape", [value, w.const("shape4", np.array(dims4, np.int64))], "as4d")
    if first == "Square":
        value = w.node("Mul", [value, value], "square")
    elif first is not None:
        value = w.node(first, [value], f"first_{first.lower()}")
    spatial = sorted(reduced & {2, 3})
    if spatial == [2, 3]:
        value = w.node("GlobalAveragePool" if spatial_kind == "mean" else "GlobalMaxPool", [value], "pool")
    elif spatial:
        kernel = [dims4[2], 1] if spatial == [2] else [1, dims4[3]]
        value = w.node("AveragePool" if spatial_kind == "mean" else "MaxPool", [value], "pool", kernel_shape=kernel)
    scale = float(np.prod([dims4[a] for a in spatial])) if by_count and spatial else 1.0
    if 1 in reduced:
        channels = dims4[1]
        if channel_kind == "sum":
            ones = w.const("ones", np.ones([1, channels, 1, 1], dtype))
            value = w.node("Conv", [value, ones], "channel_sum")
            scale = scale if by_count else scale / channels
        else:  # ncnn pools no channel axis: move it to H, pool a [C, 1] window, move it back
            value = w.node("Transpose", [value], "to_nhcw", perm=[0, 2, 1, 3])
            value = w.node("MaxPool", [value], "channel_max", kernel_shape=[channels, 1])
            value = w.node("Transpose", [value], "to_nchw", perm=[0, 2, 1, 3])
    if scale != 1.0:
        value = w.node("Mul", [value, w.const("scale", np.array(scale, dtype))], "scale")
    if last is not None:
        value = w.node(last, [value], f"last_{last.lower()}")
    final_4d = [1 if i in reduced else d for i, d in enumerate(dims4)]
    if final_4d != out_shape:
        value = w.node("Reshape", [value, w.const("out_shape", np.array(out_shape, np.int64))], "reshape")
    if w.nodes:
        w.nodes[-1].output[0] = node.output[0]
    else:  # nothing reduced and no step: the value itself
        w.node("Identity", [value], "identity", out=node.output[0])
    return w.nodes


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


#: Every ``Reduce*`` op pnnx writes as an ncnn ``Reduction`` (the ones :data:`REDUCTIONS` lacks are never rewritten).
ALL_REDUCTIONS = (*REDUCTIONS, "ReduceProd", "ReduceLogSum", "ReduceLogSumExp")

_RIGHT = "right as written"


def _plan(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str | tuple]]:
    """Each main-graph node with what the repair does: ``""`` (not a reduction), the rewrite's arguments
    ``(shape, axes, keepdims, dtype)``, :data:`_RIGHT` (left: ncnn runs it right) or why it is left.
    """
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    dims = inferred_dims(model)
    consts = constant_tensors(graph)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for other in graph.node:
        for name in other.input:
            readers.setdefault(name, []).append(other)
    plan: list[tuple[onnx.NodeProto, str | tuple]] = []
    for node in graph.node:
        if node.op_type not in ALL_REDUCTIONS or node.domain not in ("", "ai.onnx"):
            plan.append((node, ""))
            continue
        shape = dims.get(node.input[0])
        static = [int(d) for d in shape] if shape is not None and None not in shape else None  # type: ignore[arg-type]
        axes = _axes(node, consts, len(static)) if static is not None else None
        keep = bool(next((a.i for a in node.attribute if a.name == "keepdims"), 1))
        if node.op_type not in REDUCTIONS:
            why: str | tuple = "no rewrite of this op"
        elif static is None or not 2 <= len(static) <= 4:
            why = "not a static 2-D to 4-D value"
        elif types.get(node.input[0]) not in _FLOATS:
            why = "not a float value"
        elif axes is None:
            why = "axes not known before run time"
        elif static[0] != 1:  # measured at batch 1, the only batch ncnn's blobs drop
            why = "a leading axis above 1"
        elif _is_4d_normalize(node, axes, len(static), readers):
            why = _RIGHT  # pnnx's Normalize
        elif not keep and len(axes) == len(static):  # a 0-d result: ncnn loads no Reshape to it
            listed = any(a.name == "axes" for a in node.attribute) or len(node.input) > 1
            right = node.op_type in _REDUCE_ALL_RIGHT and not (listed and node.op_type == "ReduceMax")
            why = _RIGHT if right else "a reduction of every axis to 0-d"
        else:
            why = (static, axes, keep, np.dtype(helper.tensor_dtype_to_np_dtype(types[node.input[0]])))
        plan.append((node, why))
    return plan


#: pnnx's reduce-all ``Reduction`` (a 0-d result) ran these right on ncnn (measured here); ``ReduceMax`` only without
#: ``axes`` (with every axis listed pnnx left a ``ReduceMax`` layer ncnn does not load).
_REDUCE_ALL_RIGHT = ("ReduceMean", "ReduceSum", "ReduceL2", "ReduceMax")


def reductions_left(model: onnx.ModelProto) -> list[str]:
    """The main graph's ``Reduce*`` nodes the repair leaves and ncnn is not known to run right, one
    ``"ReduceProd 'name' (why)"`` each (for a refusal by the target's run in ncnn to name them).
    """
    return [
        f"{node.op_type} {node.name or node.output[0]!r} ({why})"
        for node, why in _plan(model)
        if isinstance(why, str) and why not in ("", _RIGHT)
    ]


def reductions_as_pooling_and_conv(model: onnx.ModelProto) -> list[str]:
    """Write the main graph's ``Reduce*`` nodes over static 2-D..4-D float values as pooling, ``Conv`` and
    elementwise ops pnnx converts right for ncnn (in place; see the module docstring for which nodes).

    Returns:
        One line naming how many nodes changed (empty when none).
    """
    graph = model.graph
    if not any(n.op_type in REDUCTIONS and n.domain in ("", "ai.onnx") for n in graph.node):
        return []
    nodes: list[onnx.NodeProto] = []
    orphans: set[str] = set()  # the rewritten nodes' axes inputs (opset 18)
    changed = 0
    for node, what in _plan(model):
        if not isinstance(what, tuple):
            nodes.append(node)
            continue
        static, axes, keep, dtype = what
        nodes.extend(_rewrite(node, static, axes, keep, graph, dtype))
        orphans.update(node.input[1:])
        changed += 1
    if not changed:
        return []
    read = {name for n in nodes for name in n.input} | {v.name for v in (*graph.input, *graph.output)}
    orphans -= read
    del graph.node[:]
    graph.node.extend(n for n in nodes if not (n.op_type == "Constant" and n.output[0] in orphans))
    for tensor in [t for t in graph.initializer if t.name in orphans]:
        graph.initializer.remove(tensor)
    return [f"Reduce* written as pooling, Conv and elementwise ops on {changed} node(s)"]
