"""Finding the deformable nodes of a model and replacing each by a lowering (onnx-ir)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from ..builder import TapeBuilder
from ..builder.written import form_of
from ..ops.deform_conv.sources import ROLES, SourceOp
from ..ops.deform_conv.sources import find_nodes as find_nodes
from ..ops.deform_conv.spec import DeformConvSpec
from ..ops.registry import Lowering


class _RewriteBuilder(TapeBuilder):
    """:class:`TapeBuilder` that falls back to the weight's dtype for values without type info.

    DeformConv (and mmcv's ops) use one element type for input, offset, mask
    and weight, so a value missing from value_info has the weight's dtype.
    """

    def __init__(self, opset: int, name_prefix: str, dtype_hints: dict[int, np.dtype]):
        super().__init__(opset, name_prefix=name_prefix)
        self._hints = dtype_hints

    def dtype(self, value):
        dt = super().dtype(value)
        return dt if dt is not None else self._hints.get(id(value))


def _shape(value: ir.Value | None) -> tuple[int | None, ...] | None:
    """Static shape from value_info, an initializer or a ``Constant`` producer; ``None`` if unknown."""
    if value is None:
        return None
    shape = value.shape
    if shape is None and value.const_value is not None:
        shape = value.const_value.shape  # type: ignore[assignment]
    producer = value.producer()
    if shape is None and producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            shape = attr.value.shape
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def _np_dtype(value: ir.Value) -> np.dtype | None:
    dt = value.dtype if value.dtype is not None else getattr(value.const_value, "dtype", None)
    try:
        return np.dtype(dt.numpy()) if dt is not None else None
    except (TypeError, ValueError):
        return None


def _node_inputs(node: ir.Node, src: SourceOp, where: str) -> dict[str, ir.Value | None]:
    inputs = list(node.inputs)
    if len(inputs) > len(src.roles):
        raise ValueError(f"{where}: {len(inputs)} inputs, but {src.describe()} takes at most {len(src.roles)}")
    inputs += [None] * (len(src.roles) - len(inputs))
    for i in range(src.required):
        if inputs[i] is None:
            raise ValueError(f"{where}: required input {i} ({src.roles[i]}) is missing")
    if len(node.outputs) != 1:
        raise ValueError(f"{where}: expected one output, got {len(node.outputs)}")
    values = dict.fromkeys(ROLES)
    values.update(zip(src.roles, inputs))
    return values


def spec_for_node(node: ir.Node, src: SourceOp) -> tuple[DeformConvSpec, dict[str, ir.Value | None]]:
    """The :class:`DeformConvSpec` and input values (by role) of one node.

    Raises:
        ValueError: unknown attributes, a 3-D deformable convolution, a
            weight without a static shape, or inconsistent shapes; the message
            names the node.
    """
    where = f"node {node.name or '<unnamed>'} ({src.describe()})"
    values = _node_inputs(node, src, where)
    attrs = src.read_attrs({name: attr.value for name, attr in node.attributes.items()}, where)
    w_shape = _shape(values["weight"])
    shapes = {role: _shape(v) for role, v in values.items()}
    for role in ("weight", "input", "offset", "mask"):
        s = shapes[role]
        if s is not None and len(s) != 4:
            raise ValueError(
                f"{where}: {role} has rank {len(s)}; only 2-D deformable convolution (4-D tensors, "
                "torchvision's deform_conv2d) is supported"
            )
    b_shape = shapes["bias"]
    if (
        b_shape is not None
        and w_shape is not None
        and w_shape[0] is not None
        and None not in b_shape
        and b_shape != (w_shape[0],)
    ):
        raise ValueError(f"{where}: bias has shape {list(b_shape)}, expected [{w_shape[0]}]")
    unknown = (None, None, None, None)
    try:
        spec = DeformConvSpec.from_shapes(
            shapes["input"] or unknown,
            w_shape,
            shapes["offset"] or unknown,
            (shapes["mask"] or unknown) if values["mask"] is not None else None,
            has_bias=values["bias"] is not None,
            stride=attrs.stride,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=attrs.groups,
            offset_groups=attrs.offset_groups,
            padding_end=attrs.padding_end,
            kernel=attrs.kernel,
            out_channels=b_shape[0] if b_shape is not None and len(b_shape) == 1 else None,
            bilinear_interpolation_pad=attrs.bilinear_interpolation_pad,
        )
    except ValueError as e:
        hint = ""
        if w_shape is None or None in w_shape:
            hint = " (the weight's shape is not static: make it an initializer or add its shape to value_info)"
        raise ValueError(f"{where}: {e}{hint}") from None
    return spec, values


def _needs_shapes(node: ir.Node, src: SourceOp) -> bool:
    """Whether a node's weight has no static shape in the file (e.g. computed by other nodes)."""
    i = src.role_index("weight")
    value = node.inputs[i] if i is not None and i < len(node.inputs) else None
    shape = _shape(value)
    return value is not None and (shape is None or None in shape)


def _infer_shapes(model: ir.Model) -> None:
    """Fill unknown shapes from ONNX shape inference with data propagation.

    A weight computed in the graph (``ConstantOfShape`` of a ``Shape``-built
    vector, a ``Reshape`` to constant sizes) has no value_info; ONNX's shape
    inference with ``data_prop`` follows such shape computations. Only shapes
    missing in ``model`` are set; nothing else changes.
    """
    proto = ir.to_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; the spec check then names the problem
        return
    shapes = {}
    for vi in inferred.graph.value_info:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            shapes[vi.name] = (
                vi.type.tensor_type.elem_type,
                [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims],
            )
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value.shape is None and value.name in shapes:
                elem, dims = shapes[value.name]
                if value.type is None and elem:
                    value.type = ir.TensorType(ir.DataType(elem))
                value.shape = ir.Shape(dims)


def _replace(node: ir.Node, src: SourceOp, lowering: Lowering, opset: int, names: set[str], index: int) -> str:
    """Replace ``node`` by ``lowering``'s ops; returns the form written (:func:`deform_onnx.builder.written.form_of`)."""
    spec, v = spec_for_node(node, src)
    prefix = node.name or f"deform_onnx_{index}"
    hints = {}
    w_dtype = _np_dtype(v["weight"])  # type: ignore[arg-type]  # every DeformConv has a weight
    if w_dtype is not None:
        hints = {id(v[r]): w_dtype for r in ("input", "offset", "mask") if v[r] is not None}
    b = _RewriteBuilder(opset, prefix, hints)
    out = lowering.fn(b, spec, v["input"], v["weight"], v["offset"], v["mask"], v["bias"])
    new_nodes = list(b.tape.nodes)
    for n in new_nodes:
        for i, value in enumerate(n.outputs):
            if value is not out and value.name is None:
                value.name = _unique(f"{n.name}_out{i}" if n.name else f"{prefix}/v", names)
    old = node.outputs[0]
    ir.convenience.replace_nodes_and_values(
        node.graph,  # type: ignore[arg-type]  # a found node is in a graph
        insertion_point=node,
        old_nodes=[node],
        new_nodes=new_nodes,
        old_values=[old],
        new_values=[out],
    )
    return form_of(n.op_type for n in new_nodes)


def _unique(name: str, names: set[str]) -> str:
    candidate, k = name, 1
    while candidate in names:
        candidate = f"{name}_{k}"
        k += 1
    names.add(candidate)
    return candidate


def _all_names(model: ir.Model) -> set[str]:
    names = {v.name for v in model.graph.inputs if v.name}
    names |= set(model.graph.initializers)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        names.add(node.name or "")
        names.update(o.name for o in node.outputs if o.name)
    return names


def _used_domains(model: ir.Model) -> set[str]:
    used = {n.domain for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    for function in model.functions.values():
        used.add(function.domain)
        used.update(n.domain for n in function)
    return used
