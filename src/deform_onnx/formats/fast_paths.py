"""The same values through ExecuTorch's faster portable kernel paths: rewrites of a ``.pte``'s program before lowering.

The portable kernels run what XNNPACK does not take (the samplers' NaN guard, their gathers). Some of them
have a fast path for inputs of one shape and a slow one that broadcasts element by element:

- :func:`full_where_branches`: a ``where`` whose branch is a one-element constant (every standard-op sampler's
  NaN guard, ``Where(Equal(p, p), clipped, -1)``: :func:`~deform_onnx.sampler.gather.nan_guard`) takes that
  branch as ``full_like`` of the other branch. Measured with executorch 1.5.1 on a guard of 2x9x4096 values
  (ExecuTorch's etdump): the portable ``where`` ran about 14x faster with three inputs of one shape, and
  ``full_like`` costs about a fifth of that ``where``.
"""

from __future__ import annotations

import contextlib

import torch
from torch._guards import detect_fake_mode

__all__ = ["full_where_branches"]


def _constant(ep, node) -> torch.Tensor | None:
    """The tensor a placeholder of ``ep`` stands for when it is a constant (lifted, buffer or parameter)."""
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return None
    sig = ep.graph_signature
    for table in (sig.inputs_to_lifted_tensor_constants, sig.inputs_to_buffers, sig.inputs_to_parameters):
        key = table.get(node.name)
        if key is not None:
            value = ep.constants.get(key, ep.state_dict.get(key))
            return value if isinstance(value, torch.Tensor) else None
    return None


def full_where_branches(ep) -> int:
    """Give each ``where`` of ``ep`` with a one-element constant branch that branch as ``full_like``; how many.

    Only where the other branch has the result's shape and dtype (``full_like`` of it is then the broadcast
    constant, value for value); the condition is left as it is. In place.
    """
    graph = ep.graph_module.graph
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.where.self or len(node.args) != 3:
            continue
        out = node.meta.get("val")
        for at in (1, 2):
            const, other = node.args[at], node.args[3 - at]
            value = _constant(ep, const)
            like = other.meta.get("val") if isinstance(other, torch.fx.Node) else None
            if value is None or value.numel() != 1 or not isinstance(like, torch.Tensor):
                continue
            if not isinstance(out, torch.Tensor) or like.dtype != out.dtype or like.shape != out.shape:
                continue
            with graph.inserting_before(node):
                full = graph.call_function(torch.ops.aten.full_like.default, (other, value.item()))
            with detect_fake_mode([like]) or contextlib.nullcontext():  # the program's fake tensors
                full.meta["val"] = torch.ops.aten.full_like.default(like, value.item())
            args = list(node.args)
            args[at] = full
            node.args = tuple(args)
            done += 1
            break
    if done:
        ep.graph_module.recompile()
    return done
