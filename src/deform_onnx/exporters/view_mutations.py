"""Chained in-place ops on a view under the TorchScript exporter: each one re-reads the view from its base.

DAT's ``_get_ref_points`` (``LeapLabTHU/DAT`` ``models/dat_blocks.py``) normalises its reference points in
place through a view: ``ref[..., 1].div_(W_key - 1.0).mul_(2.0).sub_(1.0)``. The tracer records
``%v = aten::select(%ref)``, ``%a = aten::div_(%v)``, ``%b = aten::mul_(%a)``, ``%c = aten::sub_(%b)``, and
torch's ONNX pass (``_jit_pass_onnx_remove_inplace_ops_for_onnx``) writes only the first mutation back into
``%ref``: the ``mul_`` and ``sub_`` are lost and the file's reference points are off by up to 0.875
(measured, torch 2.14.1; the same for ``v = ref[..., 1]; v.div_(a); v.mul_(b)``). PyTorch's answer is
"aliasing + mutation ... no plan to fully support" (pytorch/pytorch#95050). The pass does handle each
mutation made on a freshly taken view (``ref[..., 1].div_(a); ref[..., 1].mul_(b)``), so
:func:`rebased` rewrites the traced graph into that form before torch's ONNX passes run: an in-place op whose
``self`` is the output of another in-place op on a view (or a view some earlier in-place op already
mutated) gets its own copy of the view chain, taken from the same base at that point. A view taken from an
in-place op's output, a non-view ``self`` (``x = a + b; x.div_(2).mul_(3)``: handled by torch) and
scripted models (their graph is the user's own) are left as traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["rebase_view_mutations", "rebased"]

#: Single-output ATen ops whose output aliases their first input.
_VIEWS = frozenset(
    f"aten::{name}"
    for name in (
        "select slice narrow view view_as reshape reshape_as permute transpose t unsqueeze squeeze expand "
        "expand_as as_strided diagonal unfold alias"
    ).split()
)


def _in_place(node: Any) -> bool:
    kind = node.kind()
    return kind.startswith("aten::") and kind.endswith("_") and not kind.endswith("__")


def _nodes(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _nodes(inner)


def _view_chain(value: Any) -> list[Any] | None:
    """The view nodes from the base down to ``value`` (base first), or ``None`` when ``value`` is no view or a
    view of an in-place op's output.
    """
    chain = []
    node = value.node()
    while node.kind() in _VIEWS:
        chain.append(node)
        node = next(iter(node.inputs())).node()
    if not chain or _in_place(node):
        return None
    return chain[::-1]


def _mutated_before(value: Any, node: Any) -> bool:
    return any(
        use.user is not node and _in_place(use.user) and use.offset == 0 and use.user.isBefore(node)
        for use in value.uses()
    )


def rebase_view_mutations(graph: Any) -> int:
    """Give each in-place op on an already mutated view its own copy of the view chain (module docstring).

    Args:
        graph: a traced ``torch._C.Graph`` (changed in place).

    Returns:
        How many in-place ops now read a fresh view.
    """
    changed = 0
    for node in list(_nodes(graph.block())):
        if not _in_place(node):
            continue
        self_value = next(iter(node.inputs()))
        source = self_value.node()
        if _in_place(source):
            while _in_place(source):  # the view the chain of in-place ops started from
                source = next(iter(source.inputs())).node()
            if source.kind() not in _VIEWS:
                continue
            view = source.output()
        elif source.kind() in _VIEWS and _mutated_before(self_value, node):
            view = self_value
        else:
            continue
        chain = _view_chain(view)
        if chain is None:
            continue
        mapping: dict[Any, Any] = {}
        for original in chain:
            clone = graph.createClone(original, lambda v, m=mapping: m.get(v, v))
            clone.insertBefore(node)
            mapping[original.output()] = clone.output()
        node.replaceInput(0, mapping[view])
        changed += 1
    return changed


@contextlib.contextmanager
def rebased() -> Iterator[None]:
    """Inside the block, the TorchScript exporter's traced graph (not a scripted model's) passes through
    :func:`rebase_view_mutations` before torch's ONNX passes. Undone on exit.
    """
    from torch.onnx._internal.torchscript_exporter import utils

    original = utils._create_jit_graph

    def create_jit_graph(model, args):
        graph, params, torch_out, module = original(model, args)
        import torch

        if not isinstance(model, (torch.jit.ScriptFunction, torch.jit.ScriptModule)):
            rebase_view_mutations(graph)
        return graph, params, torch_out, module

    utils._create_jit_graph = create_jit_graph
    try:
        yield
    finally:
        utils._create_jit_graph = original
