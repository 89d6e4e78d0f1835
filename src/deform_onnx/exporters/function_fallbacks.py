"""A model's ``try: Function.apply(...) except: <PyTorch code>`` under the TorchScript tracer: drop the dead node.

Mask2Former and MaskDINO (``MSDeformAttn.forward``, ``ops/modules/ms_deform_attn.py``) call their CUDA kernel
as ``MSDeformAttnFunction.apply(...)`` inside ``try:`` and run ``ms_deform_attn_core_pytorch`` in a bare
``except:`` (on a CPU the extension raises "Not implemented on the CPU"). The tracer records a
``prim::PythonOp`` node when ``apply`` starts and completes it (its ``Subgraph`` attribute) only when
``forward`` returns; after the exception the half-made node stays in the graph, unused, and torch's ONNX pass
stops on it: "required keyword attribute 'Subgraph' is undefined" (torch 2.14.1,
``_jit_pass_onnx_autograd_function_process``). The node computes nothing the model used: the except path's
ops are traced after it. :func:`dead_nodes_dropped` removes it when ``apply`` raises, so the file holds the
path PyTorch ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["dead_nodes_dropped"]


def _nodes(nodes) -> Iterator:
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from _nodes(block.nodes())


def _drop_unfinished(graph) -> int:
    """Destroy the ``prim::PythonOp`` nodes without ``Subgraph`` whose outputs nothing uses; how many."""
    dead = [
        n for n in _nodes(graph.nodes())
        if n.kind() == "prim::PythonOp" and not n.hasAttribute("Subgraph") and not any(o.uses() for o in n.outputs())
    ]  # fmt: skip
    for node in dead:
        node.destroy()
    return len(dead)


@contextlib.contextmanager
def dead_nodes_dropped() -> Iterator[None]:
    """Inside the block, an ``autograd.Function.apply`` that raises while the TorchScript tracer runs leaves no
    node behind (the exception goes on to the model's ``except``). Undone on exit.
    """
    function = torch.autograd.Function
    saved = vars(function)["apply"]

    def apply(cls, *args, **kwargs):
        try:
            return saved.__get__(None, cls)(*args, **kwargs)
        except BaseException:
            state = torch._C._get_tracing_state()
            if state is not None:
                _drop_unfinished(state.graph())
            raise

    function.apply = classmethod(apply)  # restored below
    try:
        yield
    finally:
        function.apply = saved
