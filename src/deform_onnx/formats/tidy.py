"""Fewer nodes for the backends: the decomposed program's no-op reshapes and copies dropped, view chains folded.

The decompositions run the ONNX lowerings as torch ops (:mod:`deform_onnx.builder.torch_ops`), and
``run_decompositions`` turns each ``Reshape``/``reshape`` into ``view`` (or ``clone`` + ``_unsafe_view``),
so the program holds chains of views and views to the shape their input already has: measured on the bundled
example net's gather form, 936 of 2266 nodes are views, 342 of them views of a view and 308 to the same
shape. Every backend pass of ExecuTorch (about 40: three retraces in ``to_edge_transform_and_lower``, the
edge and XNNPACK passes) and of litert-torch visits every node with fake tensors, so its time grows with the
node count (:func:`tidy`).
"""

from __future__ import annotations

import torch
from torch._prims_common import is_contiguous_or_false

__all__ = ["tidy"]

_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


def _val(node):
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (fake) tensors have the same shape, symbolic sizes compared as expressions (no guard)."""
    return a.dim() == b.dim() and all(str(x) == str(y) for x, y in zip(a.shape, b.shape))


def _is_output(node: torch.fx.Node) -> bool:
    return any(user.op == "output" for user in node.users)


def _dense_copy(node: torch.fx.Node) -> bool:
    """A ``clone`` of a contiguous tensor into the contiguous format: the same values, the same layout."""
    if node.target is not torch.ops.aten.clone.default or len(node.args) != 1:
        return False
    fmt = node.kwargs.get("memory_format")
    src = _val(node.args[0])
    return fmt in (None, torch.contiguous_format) and src is not None and is_contiguous_or_false(src)


def tidy(ep) -> int:
    """Drop the no-op views and copies of ``ep``'s graph and fold chains of views (in place); how many nodes went.

    - a ``view``/``_unsafe_view`` to the shape its input has: its input instead;
    - a ``clone`` of a contiguous tensor in the contiguous format, a ``lift_fresh_copy`` of a constant: its
      input instead (a functional program never writes to it);
    - a view of a view: one view of the first input (the same elements in the same order; the backend's
      retrace checks the view again).

    A node that is a program output is kept (the output's name is part of the program's signature). The
    values are the same tensor for tensor; the program's outputs are checked in its runtime after.
    """
    graph = ep.graph_module.graph
    before = len(graph.nodes)
    for node in list(graph.nodes):
        if node.op != "call_function" or _is_output(node):
            continue
        src = node.args[0] if node.args else None
        here, there = _val(node), _val(src)
        if here is None or there is None or not isinstance(src, torch.fx.Node):
            continue
        fresh = node.target is torch.ops.aten.lift_fresh_copy.default and src.op in ("placeholder", "get_attr")
        if fresh or (node.target in _VIEWS and _same_shape(here, there)) or _dense_copy(node):
            node.replace_all_uses_with(src)
            graph.erase_node(node)
        elif node.target in _VIEWS and src.op == "call_function" and src.target in _VIEWS:
            node.args = (src.args[0], *node.args[1:])
            if not src.users:
                graph.erase_node(src)
    removed = before - len(graph.nodes)
    if removed:
        ep.graph_module.recompile()
    return removed
