"""``lower`` for ONNX ``GridSample`` nodes: rewritten into the gather form when the method asks for it.

A default-domain ``GridSample`` (opset 16 spelling ``bilinear``/``bicubic``,
opset 20 spelling ``linear``/``cubic``; 4-D, or 5-D from opset 20) is the ``native`` form of
``F.grid_sample`` (:mod:`deform_onnx.ops.registry`): methods ``native``,
``grid_sample`` and ``auto`` at opset >= 16 keep it; ``gather`` (and ``auto``
below 16) replace it by :func:`deform_onnx.ops.grid_sample.lower.lower_gather`
with the node's ``mode``, ``padding_mode`` and ``align_corners``. Each node is
decided on its own (:func:`deform_onnx.ops.registry.grid_sample_call`):
a 5-D node below opset 20, or one the target's runtime does not run (5-D,
cubic), is rewritten too. For runtimes without a usable GridSample
(TensorRT, old builds, converters).
"""

from __future__ import annotations

import onnx_ir as ir

from ..registry import grid_sample_call, resolve
from .lower import GridSampleSpec, check_shapes, lower_gather


def nodes_to_lower(model: ir.Model, method: str, opset: int) -> list[ir.Node]:
    """The ``GridSample`` nodes of ``model`` (main graph and subgraphs) that ``method`` at ``opset`` rewrites.

    Raises:
        ValueError: unknown method, ``native``/``grid_sample`` at an opset below 16 while the model has GridSample,
            or a node no form can hold (:func:`~deform_onnx.ops.registry.grid_sample_call`; names the node).
    """
    found = [
        n
        for n in ir.traversal.RecursiveGraphIterator(model.graph)
        if n.op_type == "GridSample" and n.domain in ("", "ai.onnx")
    ]
    if not found:
        return []
    resolve("grid_sample", method, opset)  # method / opset errors first, once
    chosen = []
    for node in found:
        known = next((v.shape for v in node.inputs[:2] if v is not None and v.shape is not None), None)
        rank = len(known) if known is not None else 4  # unknown: lower_gather refuses rather than guess
        try:
            if grid_sample_call(method, opset, spec_for_node(node), rank).name == "gather":
                chosen.append(node)
        except ValueError as e:
            if str(e).startswith("node "):
                raise
            raise ValueError(f"node {node.name or '<unnamed>'} (GridSample): {e}") from None
    return chosen


def nodes_lowered(model: ir.Model, method: str, opset: int | None) -> list[ir.Node]:
    """The nodes ``lower(model, method=method)`` replaces at ``opset`` (:attr:`~deform_onnx.ops.registry.OpEntry.sources`):
    :func:`nodes_to_lower`; none when the opset is unknown (``None``: the model imports no default domain)."""
    return nodes_to_lower(model, method, opset) if opset is not None else []


def spec_for_node(node: ir.Node) -> GridSampleSpec:
    """The node's :class:`GridSampleSpec` (ONNX defaults: bilinear, zeros, align_corners 0).

    Raises:
        ValueError: bicubic mode or unknown attribute values; the message names the node.
    """
    attrs = {name: attr.value for name, attr in node.attributes.items()}
    try:
        return GridSampleSpec.from_onnx(
            attrs.get("mode", "bilinear"), attrs.get("padding_mode", "zeros"), int(attrs.get("align_corners", 0))
        )
    except ValueError as e:
        raise ValueError(f"node {node.name or '<unnamed>'} (GridSample): {e}") from None


def replace_all(nodes: list[ir.Node], opset: int, unique_name) -> None:
    """Replace each node by the gather lowering at ``opset``; ``unique_name(base)`` names the new values."""
    from ...builder import TapeBuilder

    for index, node in enumerate(nodes):
        b = TapeBuilder(opset, name_prefix=node.name or f"deform_onnx_grid_sample_{index}")
        replace(node, b)
        for n in b.tape.nodes:
            for i, value in enumerate(n.outputs):
                if value.name is None:
                    value.name = unique_name(f"{n.name}_out{i}")


def replace(node: ir.Node, builder) -> None:
    """Replace ``node`` by the gather lowering, emitted with ``builder`` (a TapeBuilder); the output value is kept."""
    spec = spec_for_node(node)
    x, grid = node.inputs[0], node.inputs[1]
    try:
        if builder.static_shape(x) is None and builder.static_shape(grid) is None:  # 4-D and 5-D differ: never guess
            raise ValueError(
                "the ranks of its input and grid are unknown (4-D and 5-D lower differently); "
                "give the graph's inputs shapes"
            )
        check_shapes(builder, x, grid)
    except ValueError as e:
        raise ValueError(f"node {node.name or '<unnamed>'} (GridSample): {e}") from None
    out = lower_gather(builder, spec, x, grid)
    ir.convenience.replace_nodes_and_values(
        node.graph,  # type: ignore[arg-type]  # a found node is in a graph
        insertion_point=node,
        old_nodes=[node],
        new_nodes=list(builder.tape.nodes),
        old_values=[node.outputs[0]],
        new_values=[out],
    )
