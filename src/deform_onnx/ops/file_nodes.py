"""The one interface between ``lower`` and an op's file nodes: find them, then replace each by a lowering.

An op's sources module (:attr:`~deform_onnx.ops.registry.OpEntry.sources`) defines

- ``nodes_lowered(model, method, opset) -> list[ir.Node]``: the nodes of an onnx-ir model that
  ``lower(model, method=method)`` replaces at ``opset`` (``None``: the model imports no default
  domain); ``ValueError`` naming the node for one it cannot take (e.g. inside a model-local function);
- ``lower_node(node, b, method, opset) -> tuple[ir.Value, str]``: emit the node's replacement with
  ``b`` (a :class:`~deform_onnx.builder.TapeBuilder` at ``opset``) and return its output value and
  the form written (the lowering's name, or :func:`deform_onnx.builder.written.form_of` of the ops
  emitted where the method does not decide it alone); ``ValueError`` naming the node for attributes
  or inputs it cannot take;

and may define

- ``needs_shapes(node) -> bool``: whether ONNX shape inference must fill the node's input shapes first
  (default: an input without a shape or an element type);
- ``builder(node, opset, prefix) -> TapeBuilder``: the builder ``lower_node`` emits with (default:
  ``TapeBuilder(opset, name_prefix=prefix)``);
- ``describe(node) -> str``: the node's kind in ``lower``'s report (default ``domain::op_type``);
- ``PREFIX``: the name prefix of the new nodes of an unnamed node (default ``deform_onnx_<op_type>``).

:func:`replace_nodes` is the one loop over a module's nodes: a builder per node, the replacement
spliced in with the node's output value kept (its name, its consumers, graph outputs), every new value
named uniquely. :func:`static_shape` is the shape rule the modules share.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx_ir as ir


def static_shape(value: ir.Value | None) -> tuple[int | None, ...] | None:
    """Static shape from value_info, an initializer or a ``Constant`` producer; ``None`` if unknown."""
    import onnx_ir as ir

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


def describe(node: ir.Node) -> str:
    """``domain::op_type`` of a node (``op_type`` alone in the default domain)."""
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def needs_shapes(module: ModuleType, node: ir.Node) -> bool:
    """Whether shape inference must run before ``module`` lowers ``node`` (its ``needs_shapes``, or the default)."""
    own = getattr(module, "needs_shapes", None)
    if own is not None:
        return bool(own(node))
    return any(v is not None and (static_shape(v) is None or v.dtype is None) for v in node.inputs)


def replace_nodes(
    module: ModuleType, nodes: list[ir.Node], method: str, opset: int, unique_name: Callable[[str], str]
) -> list[tuple[str, str, str, str | None]]:
    """Replace each of ``nodes`` by what ``module.lower_node`` emits at ``opset``; ``unique_name(base)`` names new values.

    Returns:
        ``(node name, kind, form written, output value name)`` per node, in order (an unnamed node as
        ``<unnamed op_type #i>``; the output's name as it was before the node was replaced).

    Raises:
        ValueError: what ``lower_node`` raises (the message names the node).
    """
    import onnx_ir as ir

    from ..builder import TapeBuilder

    make = getattr(module, "builder", None)
    kind_of = getattr(module, "describe", describe)
    done = []
    for index, node in enumerate(nodes):
        prefix = node.name or f"{getattr(module, 'PREFIX', 'deform_onnx_' + node.op_type.lower())}_{index}"
        b = make(node, opset, prefix) if make is not None else TapeBuilder(opset, name_prefix=prefix)
        label, kind = node.name or f"<unnamed {node.op_type} #{index}>", kind_of(node)
        output = node.outputs[0].name
        out, form = module.lower_node(node, b, method, opset)
        new_nodes = list(b.tape.nodes)
        ir.convenience.replace_nodes_and_values(
            node.graph,  # type: ignore[arg-type]  # a found node is in a graph
            insertion_point=node,
            old_nodes=[node],
            new_nodes=new_nodes,
            old_values=[node.outputs[0]],
            new_values=[out],
        )
        for n in new_nodes:
            for i, value in enumerate(n.outputs):
                if value.name is None:
                    value.name = unique_name(f"{n.name}_out{i}")
        done.append((label, kind, form, output))
    return done
