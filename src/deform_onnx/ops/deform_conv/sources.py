"""``lower`` for deformable-convolution file nodes: find them, read each as a spec, replace it by a lowering.

The node kinds (``DeformConv``, mmcv's, OpenVINO's, TensorRT's plugins) are described once in
:mod:`.source_kinds` (one ``source_*.py`` module per kind); this module is their
side of the file-node interface (:mod:`deform_onnx.ops.file_nodes`): every known
node is lowered, whatever the method, by the lowering the method resolves to
(the same functions the exporters call), using onnx-ir.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...builder import TapeBuilder
from ...builder.written import form_of
from ..class_methods import lowering_for
from ..file_nodes import static_shape
from ..registry import resolve
from .classes import shape_class
from .source_kinds import ROLES, SourceOp, lookup
from .spec import DeformConvSpec

#: Name prefix of the new nodes of an unnamed node.
PREFIX = "deform_onnx"


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


def find_nodes(model: ir.Model) -> list[tuple[ir.Node, SourceOp]]:
    """Every known deformable-convolution node of the main graph and its subgraphs, with its kind.

    Raises:
        ValueError: such a node inside a model-local function (inline the
            functions first, e.g. with ``onnx.inliner.inline_local_functions``).
    """
    found = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        src = lookup(node.domain, node.op_type)
        if src is not None:
            found.append((node, src))
    for function in model.functions.values():
        for node in function:
            if lookup(node.domain, node.op_type) is not None:
                raise ValueError(
                    f"node {node.name or '<unnamed>'} ({node.op_type}) is inside function "
                    f"{function.name}: inline local functions first (onnx.inliner.inline_local_functions)"
                )
    return found


def nodes_lowered(model: ir.Model, method: str, opset: int | None) -> list[ir.Node]:
    """The nodes ``lower(model, method=method)`` replaces: every known deformable-convolution node,
    whatever the method and opset (:func:`find_nodes`).
    """
    return [node for node, _ in find_nodes(model)]


def _kind(node: ir.Node) -> SourceOp:
    src = lookup(node.domain, node.op_type)
    if src is None:
        raise ValueError(f"node {node.name or '<unnamed>'} ({node.op_type}) is no deformable-convolution node")
    return src


def describe(node: ir.Node) -> str:
    """The node's kind as ``lower``'s report names it (``DeformConv``, ``mmdeploy::MMCVDeformConv2d``)."""
    return _kind(node).describe()


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
    shapes = {role: static_shape(v) for role, v in values.items()}
    w_shape = shapes["weight"]
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


def needs_shapes(node: ir.Node) -> bool:
    """Whether a node's weight has no static shape in the file (e.g. computed by other nodes), or its input no shape.

    The input's shape picks the form (a map of unknown size takes the gather sampler under ``grid_sample``, and a
    target's class form needs the batch): a file without ``value_info`` (a TorchScript export) is typed first.
    """
    src = _kind(node)

    def role(name: str) -> ir.Value | None:
        i = src.role_index(name)
        return node.inputs[i] if i is not None and i < len(node.inputs) else None

    weight, x = role("weight"), role("input")
    shape = static_shape(weight)
    return (weight is not None and (shape is None or None in shape)) or (x is not None and static_shape(x) is None)


def builder(node: ir.Node, opset: int, prefix: str) -> TapeBuilder:
    """A builder that gives the input, offset and mask the weight's dtype when the file does not type them."""
    src = _kind(node)
    v = _node_inputs(node, src, f"node {node.name or '<unnamed>'} ({src.describe()})")
    hints = {}
    w_dtype = _np_dtype(v["weight"])  # type: ignore[arg-type]  # every DeformConv has a weight
    if w_dtype is not None:
        hints = {id(v[r]): w_dtype for r in ("input", "offset", "mask") if v[r] is not None}
    return _RewriteBuilder(opset, prefix, hints)


def lower_node(node: ir.Node, b: TapeBuilder, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the lowering ``method`` resolves to at ``opset`` for one node; returns its output and the form written.

    The form is read from the ops emitted (:func:`deform_onnx.builder.written.form_of`): under
    ``grid_sample`` a dynamic map is sampled with the gather sampler. A target's form for the node's shape
    class (:func:`deform_onnx.ops.class_methods.lowering_for`) replaces the method's where one is in force.
    """
    spec, v = spec_for_node(node, _kind(node))
    shape = static_shape(v["input"])
    batch = shape[0] if shape else None
    lowering = lowering_for(
        "deform_conv2d", resolve("deform_conv2d", method, opset), opset, shape_class(batch, spec.offset_groups)
    )
    out = lowering.fn(b, spec, v["input"], v["weight"], v["offset"], v["mask"], v["bias"])
    return out, form_of(n.op_type for n in b.tape.nodes)
