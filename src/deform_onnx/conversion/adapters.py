"""Down-conversion adapters that onnx's version converter lacks, one per (op, opset step).

The model is onnxscript's version converter (``version_converter/_version_converter.py``):
a registry keyed by op and the opset step, each adapter named ``<op>_<from>_<to>``
and taking the node plus a tape to build its replacement. Here ``from`` is the
opset where the op's schema changed (the node's version in the opset-18 build)
and ``to`` is the step below it; the replacement must be valid at every opset
down to the target the adapter is given (the driver checks the op's earlier
schema covers the target).

Each adapter states *why* it exists: what the newer schema has that the older
one lacks, and how the replacement expresses the same thing. An adapter that
cannot express a node (e.g. a run-time ``axes`` input where the old schema needs
constants) raises :class:`Unrepairable` with the reason; the caller then falls
back to the TorchScript exporter.

Checked against onnx 1.23: ``onnx.version_converter`` has no adapter from 18 for
``Split`` or ``Pad``, none from 15 for ``Shape`` and none from 16 for
``Identity``, and refuses the whole model when it meets one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnx_ir import tape as ir_tape


class Unrepairable(ValueError):
    """The node has no equivalent at the target opset (the message says why)."""


AdapterFn = Callable[[ir.Node, ir_tape.Tape, int], Sequence[ir.Value]]


@dataclass(frozen=True)
class Adapter:
    """One down-conversion step of one op.

    Attributes:
        op_type: ONNX op (default domain).
        from_opset: the opset where the op's schema changed (a node of that version).
        to_opset: ``from_opset - 1``: the step this adapter takes.
        reason: what the newer schema has that the older one lacks, and the fix.
        fn: ``fn(node, tape, target) -> new outputs`` (same count as ``node.outputs``).
    """

    op_type: str
    from_opset: int
    to_opset: int
    reason: str
    fn: AdapterFn

    @property
    def name(self) -> str:
        """``<op>_<from>_<to>``, onnxscript's naming of version adapters."""
        return f"{self.op_type.lower()}_{self.from_opset}_{self.to_opset}"


ADAPTERS: dict[tuple[str, int], Adapter] = {}


def register(op_type: str, from_opset: int, reason: str) -> Callable[[AdapterFn], AdapterFn]:
    """Register ``fn`` as the adapter of ``op_type`` from ``from_opset`` to ``from_opset - 1``.

    Raises:
        ValueError: an adapter for that step is already registered (one per step).
    """

    def decorator(fn: AdapterFn) -> AdapterFn:
        key = (op_type, from_opset)
        if key in ADAPTERS:
            raise ValueError(f"duplicate down-conversion adapter for {op_type} from opset {from_opset}")
        ADAPTERS[key] = Adapter(op_type, from_opset, from_opset - 1, reason, fn)
        return fn

    return decorator


def _clone(node: ir.Node, tape: ir_tape.Tape, inputs, drop: Sequence[str] = ()) -> Sequence[ir.Value]:
    """The same op with ``inputs`` and without the attributes in ``drop`` (older schema, same meaning)."""
    attrs = {name: a for name, a in node.attributes.items() if name not in drop}
    return tape.op_multi_out(node.op_type, list(inputs), attrs, num_outputs=len(node.outputs), name=node.name)


def _const_ints(tape: ir_tape.Tape, values) -> ir.Value:
    return tape.op("Constant", [], {"value": ir.tensor(np.asarray(values, dtype=np.int64))})


def _static_ints(value: ir.Value | None) -> list[int] | None:
    """The value's contents when it is a constant or initializer of integers, else ``None``."""
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant":
        attr = producer.attributes.get("value")
        tensor = attr.value if attr is not None else None
    if tensor is None:
        return None
    return [int(v) for v in np.asarray(tensor.numpy()).reshape(-1)]


def _inputs(node: ir.Node, count: int) -> list[ir.Value | None]:
    return list(node.inputs[:count]) + [None] * max(0, count - len(node.inputs))


def _given(node: ir.Node, value: ir.Value | None, what: str) -> ir.Value:
    """``value``, a required input of ``node``; absent only in an invalid node.

    Raises:
        Unrepairable: the input is missing.
    """
    if value is None:
        raise Unrepairable(f"{node.op_type} without its required input {what!r} (an invalid node)")
    return value


@register(
    "Split",
    18,
    "Split-18 may give the number of parts as attribute num_outputs (last part smaller when the size "
    "does not divide); Split-13 has no such attribute and splits equally only when the size divides: "
    "the sizes become an explicit split input (computed at run time when the axis is dynamic)",
)
def split_18_17(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``Split`` 18 -> 17: ``num_outputs`` becomes an explicit ``split`` input (the last part smaller)."""
    x_in, split = _inputs(node, 2)
    x = _given(node, x_in, "input")
    if split is not None or "num_outputs" not in node.attributes:
        return _clone(node, tape, [x, split] if split is not None else [x], drop=("num_outputs",))
    parts = node.attributes["num_outputs"].as_int()
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    dim = None
    if x.shape is not None:
        rank = len(x.shape)
        axis = axis % rank
        size_at_axis = x.shape[axis]
        dim = size_at_axis if isinstance(size_at_axis, int) else None
    if dim is not None:
        chunk = -(-dim // parts)  # Split-18: ceil(size / num_outputs), the last part takes the rest
        sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        if min(sizes) < 0:
            raise Unrepairable(f"Split of size {dim} into {parts} parts leaves a negative last part")
        sizes_value = _const_ints(tape, sizes)
    else:
        if x.shape is None:
            raise Unrepairable("Split with num_outputs on an input of unknown rank")
        # size along the axis at run time: Shape -> Gather (Shape-15's start/end do not exist below 15)
        size = tape.op("Gather", [tape.op("Shape", [x]), _const_ints(tape, [axis])], {"axis": 0})
        chunk_value = tape.op(
            "Div", [tape.op("Add", [size, _const_ints(tape, [parts - 1])]), _const_ints(tape, [parts])]
        )
        last = tape.op("Sub", [size, tape.op("Mul", [chunk_value, _const_ints(tape, [parts - 1])])])
        sizes_value = tape.op("Concat", [*([chunk_value] * (parts - 1)), last], {"axis": 0})
    return _clone(node, tape, [x, sizes_value], drop=("num_outputs",))


@register(
    "Pad",
    18,
    "Pad-18 may pad only some axes (input axes); Pad-13 takes pads for every axis: constant axes and "
    "pads are expanded to full-rank pads with zeros for the other axes",
)
def pad_18_17(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``Pad`` 18 -> 17: the ``axes`` input is folded into full-rank ``pads``."""
    data_in, pads, value, axes = _inputs(node, 4)
    data = _given(node, data_in, "data")
    if axes is None:
        return _clone(node, tape, [data, pads] + ([value] if value is not None else []))
    axes_list, pads_list = _static_ints(axes), _static_ints(pads)
    if axes_list is None or pads_list is None or data.shape is None:
        raise Unrepairable("Pad with run-time axes or pads (Pad-13 needs pads for every axis)")
    rank = len(data.shape)
    full = [0] * (2 * rank)
    for i, a in enumerate(axes_list):
        full[a % rank] = pads_list[i]
        full[a % rank + rank] = pads_list[i + len(axes_list)]
    inputs = [data, _const_ints(tape, full)] + ([value] if value is not None else [])
    return _clone(node, tape, inputs)


@register(
    "Shape",
    15,
    "Shape-15 may slice the shape (attributes start/end); Shape-13 returns the whole shape: "
    "a Slice of it takes the same range",
)
def shape_15_14(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``Shape`` 15 -> 14: ``start``/``end`` become a ``Slice`` of the full shape."""
    (x,) = _inputs(node, 1)
    start = node.attributes["start"].as_int() if "start" in node.attributes else 0
    end = node.attributes["end"].as_int() if "end" in node.attributes else None
    whole = _clone(node, tape, [x], drop=("start", "end"))
    if start == 0 and end is None:
        return whole
    ends = end if end is not None else np.iinfo(np.int64).max
    return [tape.op("Slice", [whole[0], _const_ints(tape, [start]), _const_ints(tape, [ends]), _const_ints(tape, [0])])]


@register(
    "Identity",
    16,
    "Identity-16 adds optional types to Identity-14: for a tensor it is the same op",
)
def identity_16_15(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``Identity`` 16 -> 15: the same op for tensors and sequences (optional types have no Identity before 16)."""
    (x_in,) = _inputs(node, 1)
    x = _given(node, x_in, "input")
    if x.type is not None and not isinstance(x.type, ir.TensorType):
        raise Unrepairable(f"Identity of a {x.type} (Identity-14 takes tensors and sequences only)")
    return _clone(node, tape, [x])


@register(
    "Concat",
    13,
    "Concat-13 adds bfloat16 to Concat-11 (onnx's converter has no adapter for it): for other types the same op",
)
def concat_13_12(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``Concat`` 13 -> 12: the same op for every type Concat-11 takes (bfloat16 is refused)."""
    inputs = [_given(node, x, "inputs") for x in node.inputs]
    if any(x.dtype == ir.DataType.BFLOAT16 for x in inputs):
        raise Unrepairable("Concat of bfloat16 tensors (Concat-11 takes no bfloat16)")
    return _clone(node, tape, inputs)


_REDUCE_18 = (
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
)


def _reduce_18_17(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    data, axes = _inputs(node, 2)
    noop = node.attributes["noop_with_empty_axes"].as_int() if "noop_with_empty_axes" in node.attributes else 0
    keep = {"keepdims": node.attributes["keepdims"].as_int()} if "keepdims" in node.attributes else {}
    axes_list = [] if axes is None else _static_ints(axes)
    if axes_list is None:
        raise Unrepairable(f"{node.op_type} with run-time axes ({node.op_type}-13 takes axes as an attribute)")
    if not axes_list and noop:
        return [tape.op("Identity", [data])]
    attrs: dict[str, int | Sequence[int]] = {
        **keep,
        **({"axes": axes_list} if axes_list else {}),
    }  # no axes: reduce over all, as in 18
    return [tape.op(node.op_type, [data], attrs, name=node.name)]


for _op in _REDUCE_18:
    register(
        _op,
        18,
        f"{_op}-18 takes axes as an input and has noop_with_empty_axes; {_op}-13 takes axes as an "
        "attribute and has no noop_with_empty_axes (onnx's converter moves axes but keeps that attribute, "
        "an invalid node): constant axes become the attribute, and an empty axes list with "
        "noop_with_empty_axes=1 becomes Identity",
    )(_reduce_18_17)


@register(
    "LayerNormalization",
    17,
    "LayerNormalization does not exist before opset 17: it is written out as ReduceMean (mean and "
    "variance over the normalised axes), Sub, Mul, Add, Sqrt, Div, then scale and bias, computed in "
    "float32 when stash_type=1 (the op's default) as the op specifies",
)
def layernormalization_17_16(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``LayerNormalization`` 17 -> 16: written out as mean, variance, normalise, scale and bias."""
    x_in, scale, bias = _inputs(node, 3)
    x = _given(node, x_in, "X")
    if len(node.outputs) > 1 and any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise Unrepairable("LayerNormalization whose Mean/InvStdDev outputs are used")
    if x.shape is None:
        raise Unrepairable("LayerNormalization of an input of unknown rank")
    rank = len(x.shape)
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else -1
    eps = node.attributes["epsilon"].as_float() if "epsilon" in node.attributes else 1e-5
    stash = node.attributes["stash_type"].as_int() if "stash_type" in node.attributes else 1
    axes = list(range(axis % rank, rank))
    dtype = x.dtype
    upcast = stash == 1 and dtype is not None and dtype != ir.DataType.FLOAT
    work = tape.op("Cast", [x], {"to": ir.DataType.FLOAT}) if upcast else x
    np_dtype = np.float32 if (upcast or dtype is None) else dtype.numpy()
    mean = tape.op("ReduceMean", [work], {"axes": axes, "keepdims": 1})
    centred = tape.op("Sub", [work, mean])
    var = tape.op("ReduceMean", [tape.op("Mul", [centred, centred])], {"axes": axes, "keepdims": 1})
    eps_value = tape.op("Constant", [], {"value": ir.tensor(np.asarray(eps, dtype=np_dtype))})
    y = tape.op("Div", [centred, tape.op("Sqrt", [tape.op("Add", [var, eps_value])])])
    if upcast:
        y = tape.op("Cast", [y], {"to": dtype})
    y = tape.op("Mul", [y, scale])
    if bias is not None:
        y = tape.op("Add", [y, bias])
    return [y] + [tape.op("Identity", [y]) for _ in node.outputs[1:]]  # unused extra outputs


@register(
    "BatchNormalization",
    15,
    "BatchNormalization-15 lets scale and bias (T1) and the running mean and variance (T2) have their "
    "own float types; BatchNormalization-14 takes scale and bias of the input's type: they are cast to it",
)
def batchnormalization_15_14(node: ir.Node, tape: ir_tape.Tape, target: int) -> Sequence[ir.Value]:
    """``BatchNormalization`` 15 -> 14: scale and bias cast to the input's type (their own float type from 15)."""
    x_in, scale, bias, mean, var = _inputs(node, 5)
    x = _given(node, x_in, "X")
    inputs = [x, scale, bias, mean, var]
    if x.dtype is None:
        raise Unrepairable("BatchNormalization of an input of unknown type")
    for i in (1, 2):  # scale, bias: T in opset 14
        given = inputs[i]
        if given is not None and given.dtype is not None and given.dtype != x.dtype:
            inputs[i] = tape.op("Cast", [given], {"to": x.dtype})
    return _clone(node, tape, inputs)
