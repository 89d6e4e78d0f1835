"""Which nodes of a deformable model get Q/DQ: graph analysis of the sampling path.

A deformable layer has two sides. Its *values* (the sampled map and the
contraction of the samples with the weight) tolerate 8-bit rounding like any
convolution. Its *coordinates* do not: a quantized offset of scale ``s``
moves every sample by up to ``s/2`` pixels, and a quantized bilinear weight or
mask rescales each sample, errors that the following layers do not average out.
So, found by graph analysis (names of nodes are not trusted):

- **offset path** (kept float): for every sampler (``GridSample``; ``Gather``,
  ``GatherND``, ``GatherElements`` with computed indices; ``DeformConv``),
  the nodes upstream of its coordinate inputs (grid, indices; offset and mask
  of ``DeformConv``) that are not upstream of its data input: the offset and
  mask predictors, the base grid and sampling coordinates, the index and
  corner-weight arithmetic;
- **weight side** (kept float): nodes fed by the offset path that do not see
  sampled values (the mask's ``Sigmoid``, attention weights' ``Softmax``);
- **products** (kept float): the first nodes where the weight side meets
  sampled values (the mask product, the corner-weight product);
- the samplers themselves (no integer ``GridSample`` kernel exists in ONNX
  Runtime; ``Gather`` moves values, which the samples need in float);
- **quantized**: every other ``Conv``, ``MatMul`` and ``Gemm`` (the model's
  convolutions and projections, the lowering's contraction), and the layout
  ops (``Transpose``, ``Reshape``, ``Slice``) between a sampler's product and
  the contraction, so the columns move as uint8 (ONNX Runtime drops Q/DQ
  around those: ``DropQDQNodesRules``). A ``Gemm`` whose ``C`` is computed
  (the default lowering's accumulation) stays float: ONNX Runtime's QDQ Gemm
  rule takes only a constant bias (re-lower with the ``"integer contraction"``
  form, which :func:`deform_onnx.quantize` does for native files).
- **weight first** (the ``"weight first"`` form of the contraction,
  :func:`~deform_onnx.ops.deform_conv.integer_contraction.weight_first_contraction`):
  a ``MatMul`` whose first input is a constant and whose second input is
  sampled columns (through layout ops only) is quantized and listed in
  :attr:`Placement.weight_first`; its layout ops are not (the columns are
  quantized before them: :mod:`.weight_first`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import onnx

#: Ops quantized where placement allows (the contraction and the model's convolutions/projections).
LINEAR_OPS = ("Conv", "MatMul", "Gemm")
#: Layout ops that carry uint8 columns from a product to a contraction.
LAYOUT_OPS = ("Transpose", "Reshape", "Slice", "Squeeze", "Unsqueeze", "Flatten")
#: Sampler op -> (data input index, coordinate input indices).
SAMPLERS = {
    "GridSample": (0, (1,)),
    "Gather": (0, (1,)),
    "GatherND": (0, (1,)),
    "GatherElements": (0, (1,)),
    "DeformConv": (0, (2, 4)),
}


@dataclass
class Placement:
    """The decision per node (by node name), with a reason for each."""

    quantize: list[str] = field(default_factory=list)
    keep_float: dict[str, str] = field(default_factory=dict)  # node -> why
    why_quantized: dict[str, str] = field(default_factory=dict)
    offset_path: set[str] = field(default_factory=set)  # offset path + weight side (float unless asked)
    samplers: list[str] = field(default_factory=list)
    grids: list[tuple[str, str]] = field(default_factory=list)  # (sampler node, coordinate tensor)
    #: weight-first contractions (the ``"weight first"`` form): MatMul node -> (weight tensor, columns tensor)
    weight_first: dict[str, tuple[str, str]] = field(default_factory=dict)


def _graph_maps(graph: onnx.GraphProto):
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer[out] = i
        for inp in node.input:
            if inp:
                consumers[inp].append(i)
    return producer, consumers


def _upstream(graph, producer, tensors) -> set[int]:
    seen: set[int] = set()
    stack = [producer[t] for t in tensors if t in producer]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(producer[t] for t in graph.node[i].input if t in producer)
    return seen


def _downstream(graph, consumers, starts: set[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        for out in graph.node[i].output:
            stack.extend(consumers.get(out, ()))
    return seen


def _constant(graph, producer, tensor: str, inits: set[str]) -> bool:
    """Whether ``tensor`` is an initializer or computed from constants only (iterative: graphs are deep)."""
    stack, seen = [tensor], set()
    while stack:
        t = stack.pop()
        if t in seen or t in inits:
            continue
        seen.add(t)
        if t not in producer:
            return False  # a graph input
        node = graph.node[producer[t]]
        if node.op_type != "Constant" and not node.input:
            return False  # e.g. RandomNormal
        stack.extend(i for i in node.input if i)
    return True


def place(
    model: onnx.ModelProto, *, quantize_offset_path: bool = False, allow_computed_bias: bool = False
) -> Placement:
    """Decide Q/DQ placement for ``model`` (see the module docstring).

    Args:
        model: the float model (after ``quant_pre_process``; node names must be unique and non-empty).
        quantize_offset_path: also quantize the ``Conv``/``MatMul``/``Gemm`` of the offset path and
            weight side (for measuring what it costs; never the default).
        allow_computed_bias: quantize a ``Gemm`` whose ``C`` is computed and a ``MatMul`` whose weight
            is its first input (TensorRT quantizes weighted ops by their inputs; ONNX Runtime fuses
            neither, so for it they stay float).

    Returns:
        A :class:`Placement`.
    """
    g = _Graph.of(model)
    out = Placement()
    per_sampler = _samplers(g, out)
    sampler_ids = set(per_sampler)
    float_side, products = _offset_side(g, per_sampler)
    out.offset_path = {g.names[i] for i in float_side}
    for i in sampler_ids:
        out.keep_float[g.names[i]] = "sampler: no integer kernel; samples must stay exact"
    for i in products:
        out.keep_float[g.names[i]] = "mask / corner-weight product: rescales each sample"
    floats = _Floats(sampler_ids, products, float_side)
    linear = [
        i
        for i, node in enumerate(g.graph.node)
        if _linear(
            g, i, node, floats, out, quantize_offset_path=quantize_offset_path, allow_computed_bias=allow_computed_bias
        )
    ]
    layout = _layout_chains(g, linear, floats, out)
    out.quantize = [g.names[i] for i in sorted(set(linear) | layout)]
    return out


@dataclass(frozen=True)
class _Graph:
    """The model's graph with its lookups: initializer names, producer and consumers by tensor, node names."""

    graph: onnx.GraphProto
    inits: set[str]
    producer: dict
    consumers: dict
    names: list[str]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> _Graph:
        producer, consumers = _graph_maps(model.graph)
        return cls(model.graph, {t.name for t in model.graph.initializer}, producer, consumers,
                   [n.name for n in model.graph.node])  # fmt: skip

    def constant(self, tensor: str) -> bool:
        return _constant(self.graph, self.producer, tensor, self.inits)


@dataclass(frozen=True)
class _Floats:
    """Node indices that stay float: the samplers, the mask / corner-weight products, the offset and weight side."""

    samplers: set[int]
    products: set[int]
    float_side: set[int]


def _samplers(g: _Graph, out: Placement) -> dict[int, set[int]]:
    """Sampler node index -> its offset path (the nodes its coordinates depend on and its data does not)."""
    per_sampler: dict[int, set[int]] = {}
    for i, node in enumerate(g.graph.node):
        if node.op_type not in SAMPLERS:
            continue
        data, coords = SAMPLERS[node.op_type]
        coord_names = [node.input[c] for c in coords if c < len(node.input) and node.input[c]]
        if node.op_type.startswith("Gather") and all(g.constant(t) for t in coord_names):
            continue  # constant indices: a slice, not a sampler
        if node.op_type.startswith("Gather") and _integer_data(g.graph, g.producer, node.input[data]):
            continue  # shape arithmetic (Gather of a Shape)
        per_sampler[i] = _upstream(g.graph, g.producer, coord_names) - _upstream(
            g.graph, g.producer, [node.input[data]]
        )
        out.samplers.append(node.name)
        out.grids.extend((node.name, t) for t in coord_names)
    return per_sampler


def _offset_side(g: _Graph, per_sampler: dict[int, set[int]]) -> tuple[set[int], set[int]]:
    """``(float side, products)``: each layer's offset path and weight side, and the products of its samples."""
    # One deformable layer = the samplers whose offset paths overlap (kernel rows, MSDA levels share a predictor).
    layers: list[tuple[set[int], set[int]]] = []  # (samplers, offset path)
    for i, path in per_sampler.items():
        merged = ({i}, set(path))
        for layer in [lay for lay in layers if lay[1] & path]:
            layers.remove(layer)
            merged = (merged[0] | layer[0], merged[1] | layer[1])
        layers.append(merged)
    float_side: set[int] = set()
    products: set[int] = set()
    for samplers_l, offset_l in layers:
        sampled_l = _downstream(g.graph, g.consumers, samplers_l)
        weight_l = _downstream(g.graph, g.consumers, offset_l) - sampled_l - offset_l
        float_side |= offset_l | weight_l
        products |= {
            i
            for i in sampled_l - samplers_l
            if any(g.producer.get(t) in offset_l | weight_l for t in g.graph.node[i].input)
        }
    return float_side, products - float_side


def _linear(
    g: _Graph, i: int, node, floats: _Floats, out: Placement, *, quantize_offset_path: bool, allow_computed_bias: bool
) -> bool:
    """Whether the weighted op ``node`` (index ``i``) is quantized; records why it is, or why it stays float."""
    if node.op_type not in LINEAR_OPS or i in floats.samplers or i in floats.products:
        return False
    if i in floats.float_side and not quantize_offset_path:
        out.keep_float[node.name] = "offset path: its rounding moves the samples"
        return False
    weight_first = node.op_type == "MatMul" and g.constant(node.input[0]) and not g.constant(node.input[1])
    if weight_first and not allow_computed_bias:
        if _columns(g.graph, g.producer, node.input[1], floats.products | floats.samplers):
            out.weight_first[node.name] = (node.input[0], node.input[1])
            out.why_quantized[node.name] = (
                "contraction of sampled columns, weight first (uint8 per-tensor weight of normalised rows, "
                "int8 columns: MatMulIntegerToFloat, no transposes)"
            )
            return True
        out.keep_float[node.name] = (
            "weight is MatMul's first input: ONNX Runtime fuses no int8 first input on x86 "
            "(QDQIsInt8Allowed), so Q/DQ would only add work"
        )
        return False
    computed_c = node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] and not g.constant(node.input[2])
    if computed_c and not allow_computed_bias:
        out.keep_float[node.name] = (
            "Gemm with a computed C (accumulation): ONNX Runtime's QDQ Gemm needs a constant bias"
        )
        return False
    out.why_quantized[node.name] = (
        "offset path, quantized on request" if i in floats.float_side else "model convolution / projection"
    )
    return True


def _layout_chains(g: _Graph, linear: list[int], floats: _Floats, out: Placement) -> set[int]:
    """Layout ops carrying the columns from a product (or sampler) into a quantized contraction."""
    sampled = _downstream(g.graph, g.consumers, floats.samplers)
    layout: set[int] = set()
    for i in linear:
        if i not in sampled or g.names[i] in out.weight_first:
            continue
        chain: list[int] = []
        j = g.producer.get(g.graph.node[i].input[0])
        while (
            j is not None and g.graph.node[j].op_type in LAYOUT_OPS and j not in floats.float_side and j not in layout
        ):
            chain.append(j)
            j = g.producer.get(g.graph.node[j].input[0])
        if j in floats.products or j in floats.samplers or j in layout:  # the columns of a deformable layer
            out.why_quantized[g.names[i]] = "contraction of sampled columns"
            for k in chain:
                layout.add(k)
                out.why_quantized[g.names[k]] = "layout op of the columns: moves uint8"
    return layout


def _columns(graph, producer, tensor: str, sources: set[int]) -> bool:
    """Whether ``tensor`` is a sampler's (or its product's) output, through layout ops only."""
    i = producer.get(tensor)
    while i is not None and i not in sources and graph.node[i].op_type in LAYOUT_OPS:
        i = producer.get(graph.node[i].input[0])
    return i is not None and i in sources


def _integer_data(graph, producer, tensor: str) -> bool:
    """Whether ``tensor`` comes from shape arithmetic (a ``Shape`` upstream with no float op between)."""
    i = producer.get(tensor)
    while i is not None:
        node = graph.node[i]
        if node.op_type in ("Shape", "Size"):
            return True
        if node.op_type not in ("Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Cast", "Reshape"):
            return False
        i = producer.get(node.input[0]) if node.input else None
    return False
