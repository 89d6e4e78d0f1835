"""Repair ``"constant operand last"``: elementwise ops with a constant operand, in the order onnx2tf reads right.

onnx2tf (1.29.24) turns an NCHW graph into an NHWC one and takes a value whose non-batch axes are all
equal (``[N, H, W]`` with ``H == W``: a square image) for a transposed one (see
:mod:`deform_onnx.ops.grid_sample.flat`); a binary op then transposes its constant operand to match.
Measured here (onnx2tf 1.29.24 -> LiteRT 2.1, ``tests/targets/test_tflite_warp.py``), on a ``Gather`` of a
``[1, 2, 16, 16]`` input's channel 0 plus a ``[16, 16]`` constant (``xs + flow[:, 0]``: a base grid plus
the flow, as optical-flow warps write it): ``Add(constant, value)`` adds ``xs.T`` (a plain flow warp on a
square image came out 3.6 off PyTorch); so does a constant of the value's full rank (``[1, 16, 16]``) in
either order; ``Add(value, constant)`` with the ``[16, 16]`` constant converts right.

``value + c`` where ``c`` is the constant's broadcast core converts right (0.0 off; a 5-D flow warp on a
4x4x4 volume 1.9 off before, 3.6e-7 after): ``c`` is the constant cut to size 1 along every axis it does
not change along (a base grid ``xs`` of ``[H, W]`` becomes ``[W]``, ``ys`` becomes ``[H, 1]``), its leading
1-axes dropped -- the same values by ONNX's multidirectional broadcasting, since the other operand has
the output's full shape. So, for ``Add``, ``Mul``, ``Sub``, ``Div``, ``Max``, ``Min`` and ``Equal`` with
one operand computed from constants only (onnx2tf's onnxsim folds it) and the other from a graph input:

- the constant operand becomes its broadcast core (a new initializer; its value from onnx's reference
  evaluator);
- a commutative op gets the value first; ``Sub(c, v)`` becomes ``Add(Neg(v), c)`` (IEEE ``c - v``
  equals ``-v + c`` exactly); ``Div(c, v)`` keeps its order.

Shapes must be static (the target runs static shapes); a value of unknown shape is left alone.

Target ``mnn`` applies it too: MNN 3.6.1 (measured here, ``tests/targets/test_mnn_constant_first.py``) gives
wrong values from a ``GridSample`` whose image is ``Add`` / ``Sub`` / ``Mul`` / ``Div`` of a 4-D constant
(``[1, C, H, W]`` or ``[1, C, 1, 1]``; a 0-D one is right) first and a ``Conv`` or ``GridSample`` output
second (a graph input there is right); with the value first, or read by a ``Conv``, a ``Transpose`` or as a
graph output, it is right (``scripts/repro/mnn_constant_first.py``). BasicVSR++ writes it:
``feat_prop = zeros + backbone(feat)`` then ``flow_warp(feat_prop, flow)``. ``Div(c, v)`` stays wrong there.

Repair ``"GELU divisor as [1]"`` (:func:`gelu_divisor_1d`): onnx2tf fuses exact GELU (``x / sqrt(2) -> Erf ->
+ 1 -> * x -> * 0.5``, the graph both torch exporters write for ``nn.GELU()``) into TFLite's builtin ``GELU``
only when its test ``divisor == 1.4142135`` holds (``onnx2tf/ops/Div.py``, PINTO0309/onnx2tf#465). With the
exporters' 0-d divisor, numpy 1.26 (onnx2tf's venv) compares the float32 scalar with the Python float in
float64 and the test fails; the ``Erf`` is then ``tf.math.erf``, a Select TensorFlow op that LiteRT's
interpreter refuses ("Select TensorFlow op(s) ... not supported": InternImage's and FlashInternImage's GELUs,
measured here with onnx2tf 1.29.24 and LiteRT 2.1.0). The divisor written with shape ``[1]`` passes the test
(numpy compares an array in its own dtype) and divides every element alike.

Repair ``"square input read by Max"`` (:func:`square_input_read_by_max`): onnx2tf makes every 3-D..5-D graph input
channels-last (``onnx2tf/ops/Input.py``) and records whether it moved it by comparing the ONNX and TensorFlow shapes;
for ``[1, C, H, W]`` with ``C == H == W`` they are equal, so the input is recorded as untransposed, and an op that
reads the record (``Reshape``, ``Transpose``, ``Gather``, ...) takes the channels-last data for channels-first.
The gather form's table starts with a ``Reshape`` of ``x``: a DCNv2 layer came out 2.2 off PyTorch in LiteRT at
``[1, 8, 8, 8]`` and 3.1 off at ``[1, 64, 64, 64]`` (measured here, onnx2tf 1.29.24 -> LiteRT 2.1). Every op's
output whose non-batch axes are all equal is recorded as transposed instead (``inverted_operation_enable_disable``
in ``onnx2tf/utils/common_functions.py``), which ``Max(x, x)`` of such an input is; so every node that reads the
input reads ``Max(x, x)`` (the same values, NaN included; one elementwise pass over the input). Other inputs are
left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.protos import constant_tensors, drop_unused_nodes
from .repair_stack import _static_shapes

__all__ = ["constant_operand_last", "gelu_divisor_1d", "output_names_without_colon", "square_input_read_by_max"]

_COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Equal"})
_BINARY = _COMMUTATIVE | {"Sub", "Div"}


def _input_dependent(graph: onnx.GraphProto) -> set[str]:
    """Every value computed from a graph input (the rest are constants onnxsim folds)."""
    dynamic = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    for node in graph.node:  # topologically sorted
        if any(x in dynamic for x in node.input if x):
            dynamic.update(node.output)
    return dynamic


def _constant_values(model: onnx.ModelProto, names: set[str]) -> dict[str, np.ndarray]:
    """The values of ``names`` (each computed from constants only), by running their producers in onnx's
    reference evaluator; a value it cannot compute is left out.
    """
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    needed: set[str] = set()
    stack = [n for n in names if n in producer]
    while stack:
        node = producer[stack.pop()]
        if node.name + node.output[0] in needed:
            continue
        needed.add(node.name + node.output[0])
        stack += [x for x in node.input if x in producer]
    nodes = [n for n in g.node if n.name + n.output[0] in needed]
    values = {t.name: numpy_helper.to_array(t) for t in g.initializer if t.name in names}
    wanted = [n for n in names if n in producer]
    if not wanted:
        return values
    used = {x for n in nodes for x in n.input}
    inits = [t for t in g.initializer if t.name in used]
    sub = helper.make_model(
        helper.make_graph(nodes, "constants", [], [helper.make_value_info(n, onnx.TypeProto()) for n in wanted], inits),
        opset_imports=list(model.opset_import),
    )
    try:
        results = ReferenceEvaluator(sub).run(None, {})
    except Exception:  # noqa: BLE001 - a value the evaluator cannot compute is left as written
        return values
    values.update(zip(wanted, (np.asarray(r) for r in results)))
    return values


def _broadcast_core(value: np.ndarray) -> np.ndarray:
    """``value`` with every axis along which it does not change cut to size 1, then its leading 1-axes dropped:
    the same values wherever it broadcasts against an operand of the full shape.
    """
    for axis in range(value.ndim):
        first = np.take(value, [0], axis=axis)
        if value.shape[axis] > 1 and np.array_equal(np.broadcast_to(first, value.shape), value):
            value = first
    while value.ndim and value.shape[0] == 1:
        value = value[0]
    return value


def constant_operand_last(model: onnx.ModelProto) -> list[str]:
    """Put the constant operand of each binary elementwise op last, without leading 1-axes; edits ``model`` in place.

    Returns:
        One line saying how many nodes changed (empty when none).
    """
    g = model.graph
    shapes = _static_shapes(model)
    dynamic = _input_dependent(g)
    picked = []
    for node in g.node:
        if node.op_type not in _BINARY or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        a, b = node.input
        const_first = a not in dynamic
        if const_first == (b not in dynamic) or any(x not in shapes for x in (a, b, node.output[0])):
            continue
        value, const = (b, a) if const_first else (a, b)
        # the value has the output's shape: then the constant's broadcast core gives the same output shape
        if int(np.prod(shapes[const])) > 1 and shapes[value] == shapes[node.output[0]]:
            picked.append((node, value, const, const_first))
    values = _constant_values(model, {const for _, _, const, _ in picked})
    by_node = {id(p[0]): p for p in picked}
    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in g.node:
        match = by_node.get(id(node))
        if match is None or match[2] not in values:
            nodes.append(node)
            continue
        _, value, const, const_first = match
        core = _broadcast_core(values[const])
        if core.shape == values[const].shape and (not const_first or node.op_type == "Div"):
            nodes.append(node)  # already in the form onnx2tf reads right (or no exact rewrite)
            continue
        name = f"{node.name or node.output[0]}__core"
        g.initializer.append(numpy_helper.from_array(core.astype(values[const].dtype), name))
        if not const_first or node.op_type in _COMMUTATIVE:
            node.input[:] = [value, name]
        elif node.op_type == "Sub":
            neg = f"{node.name or node.output[0]}__neg"
            nodes.append(helper.make_node("Neg", [value], [neg], name=neg))
            node.op_type = "Add"
            node.input[:] = [neg, name]
        else:
            node.input[:] = [name, value]
        nodes.append(node)
        changed += 1
    if changed:
        del g.node[:]
        g.node.extend(nodes)
        drop_unused_nodes(model)  # the old constants
    return [f"{changed} elementwise op(s) with a constant operand written value first"] if changed else []


def gelu_divisor_1d(model: onnx.ModelProto) -> list[str]:
    """Write each 0-d constant divisor of a ``Div`` that feeds an ``Erf`` with shape ``[1]``; edits ``model`` in place.

    Only where the dividend's rank is known and at least 1 (then ``[1]`` broadcasts to the same output shape).

    Returns:
        One line saying how many divisors changed (empty when none).
    """
    g = model.graph
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for x in node.input:
            consumers.setdefault(x, []).append(node)
    constants = constant_tensors(g)
    shapes = _static_shapes(model)
    changed = 0
    for node in g.node:
        if node.op_type != "Div" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        divisor = constants.get(node.input[1])
        rank = len(shapes.get(node.input[0], ()))
        erf = [c for c in consumers.get(node.output[0], []) if c.op_type == "Erf"]
        if divisor is None or tuple(divisor.dims) != () or not rank or not erf:
            continue
        name = f"{node.name or node.output[0]}__divisor"
        g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(divisor).reshape(1), name))
        node.input[1] = name
        changed += 1
    if not changed:
        return []
    drop_unused_nodes(model)  # the old constants
    return [f"{changed} GELU divisor(s) written with shape [1] (onnx2tf fuses them into TFLite's GELU)"]


def square_input_read_by_max(model: onnx.ModelProto) -> list[str]:
    """Make every main-graph node that reads a square 3-D..5-D graph input read ``Max(x, x)`` instead (in place).

    Square: a static shape whose non-batch axes are all equal (``[1, 8, 8, 8]``). ``Max(x, x)`` is ``x``
    (NaN included). Returns one line naming the inputs changed (empty when none).
    """
    g = model.graph
    fed = {t.name for t in g.initializer}
    square = []
    for v in g.input:
        dims = v.type.tensor_type.shape.dim
        if v.name in fed or not 3 <= len(dims) <= 5 or not all(d.HasField("dim_value") for d in dims):
            continue
        if len({d.dim_value for d in dims[1:]}) == 1:
            square.append(v.name)
    readers = [n for n in g.node if any(x in square for x in n.input)]
    square = [s for s in square if any(s in n.input for n in readers)]
    if not square:
        return []
    read = {s: f"{s}__read" for s in square}
    for node in readers:
        for i, x in enumerate(node.input):
            if x in read:
                node.input[i] = read[x]
    first = [helper.make_node("Max", [s, s], [read[s]], name=read[s]) for s in square]
    nodes = [*first, *g.node]
    del g.node[:]
    g.node.extend(nodes)
    return [f"square input(s) {', '.join(square)} read through Max(x, x) (onnx2tf records them channels-first)"]


def output_names_without_colon(model: onnx.ModelProto) -> list[str]:
    """Repair ``"output names without ':'"``: each graph output whose name holds a ``:`` gets it as ``_``.

    onnx2tf 1.29.24 names its TensorFlow tensors with ``:`` written ``__`` and then misses such an output when it
    picks the model's outputs: S2ANet's TorchScript file (target ``tflite``, opset 13) returns its aligned feature
    as ``onnx::Conv_864`` (the exporter's name of a value that is also read by a ``Conv``), and the ``.tflite``
    onnx2tf wrote had 3 outputs of 4 (measured here, LiteRT 2.1.0: the feature was missing and another output
    stood under its name; two outputs named ``onnx::...`` were both lost). The names are the exporter's own
    (``output_names=`` names without ``:`` are kept); the values are unchanged.
    """
    from ..exporting.output_names import rename_proto

    old = [o.name for o in model.graph.output]
    if not any(":" in n for n in old):
        return []
    taken = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    taken |= {i.name for i in model.graph.initializer}
    new = []
    for name in old:
        if ":" in name:
            base = name.replace(":", "_")
            name, k = base, 1
            while name in taken or name in new:
                name, k = f"{base}_{k}", k + 1
        new.append(name)
    rename_proto(model, new)
    if [o.name for o in model.graph.output] != new:
        return []  # an output that is a graph input or initializer: rename_proto leaves the names
    changed = [f"{a!r} as {b!r}" for a, b in zip(old, new, strict=True) if a != b]
    return [f"graph output(s) renamed without ':' ({', '.join(changed)})"]
