"""``lower`` for ONNX ``GridSample`` nodes: rewritten into the gather form when the method asks for it.

A default-domain ``GridSample`` (opset 16 spelling ``bilinear``/``bicubic``,
opset 20 spelling ``linear``/``cubic``; 4-D, or 5-D from opset 20) is the ``native`` form of
``F.grid_sample`` (:mod:`deform_onnx.ops.registry`): methods ``native``,
``grid_sample`` and ``auto`` at opset >= 16 keep it; ``gather`` (and ``auto``
below 16) replace it by :func:`deform_onnx.ops.grid_sample.lower.lower_gather`
with the node's ``mode``, ``padding_mode`` and ``align_corners``. Each node is
decided on its own (:func:`deform_onnx.ops.grid_sample.call.grid_sample_call`):
a 5-D node below opset 20, or one the target's runtime does not run (5-D,
cubic), is rewritten too. For runtimes without a usable GridSample
(TensorRT, old builds, converters).
"""

from __future__ import annotations

import onnx_ir as ir

from ...builder import TapeBuilder
from ..file_nodes import static_shape
from ..registry import resolve
from .call import grid_sample_call
from .lower import GridSampleSpec, check_shapes, lower_gather

#: Name prefix of the new nodes of an unnamed node.
PREFIX = "deform_onnx_grid_sample"


def nodes_to_lower(model: ir.Model, method: str, opset: int) -> list[ir.Node]:
    """The ``GridSample`` nodes of ``model`` (main graph and subgraphs) that ``method`` at ``opset`` rewrites.

    Raises:
        ValueError: unknown method, ``native``/``grid_sample`` at an opset below 16 while the model has GridSample,
            or a node no form can hold (:func:`~.call.grid_sample_call`; names the node).
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
    """The nodes ``lower(model, method=method)`` replaces at ``opset``: :func:`nodes_to_lower`; none when the
    opset is unknown (``None``: the model imports no default domain).
    """
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


def needs_shapes(node: ir.Node) -> bool:
    """Whether the node's input has no static shape or element type in the file (shape inference fills them)."""
    return static_shape(node.inputs[0]) is None or node.inputs[0].dtype is None  # type: ignore[union-attr]  # GridSample has its input


def lower_node(node: ir.Node, b: TapeBuilder, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the gather lowering of one found node with ``b``; returns its output and ``"gather"``.

    Raises:
        ValueError: unknown ranks of input and grid, or shapes the gather form cannot take (names the node).
    """
    spec = spec_for_node(node)
    x, grid = node.inputs[0], node.inputs[1]
    try:
        if b.static_shape(x) is None and b.static_shape(grid) is None:  # 4-D and 5-D differ: never guess
            raise ValueError(
                "the ranks of its input and grid are unknown (4-D and 5-D lower differently); "
                "give the graph's inputs shapes"
            )
        check_shapes(b, x, grid)
    except ValueError as e:
        raise ValueError(f"node {node.name or '<unnamed>'} (GridSample): {e}") from None
    return lower_gather(b, spec, x, grid), "gather"
