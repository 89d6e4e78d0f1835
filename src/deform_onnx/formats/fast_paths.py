"""The same values through ExecuTorch's faster portable kernel paths: rewrites of a ``.pte``'s program before lowering.

The portable kernels run what XNNPACK does not take (the samplers' NaN guard, their gathers). Some of them
have a fast path for inputs of one shape and a slow one that broadcasts element by element:

- :func:`full_where_branches`: a ``where`` whose branch is a one-element constant (every standard-op sampler's
  NaN guard, ``Where(Equal(p, p), clipped, -1)``: :func:`~deform_onnx.sampler.gather.nan_guard`) takes that
  branch as ``full_like`` of the other branch. Measured with executorch 1.5.1 on a guard of 2x9x4096 values
  (ExecuTorch's etdump): the portable ``where`` ran about 14x faster with three inputs of one shape, and
  ``full_like`` costs about a fifth of that ``where``.
- :func:`isnan_guards`: the NaN guard's ``where(eq(p, p), a, b)`` as ``where(isnan(p), b, a)``: one pass over
  ``p`` of the portable ``isnan`` kernel instead of its ``eq`` of two inputs (the ONNX graphs keep ``Equal``:
  MNN rejects ``IsNaN``). Measured with executorch 1.5.1 on a 64-channel DCNv2 layer at 64x64 (etdump): the
  two guards' ``isnan`` took about 40% of the time of their ``eq``.
"""

from __future__ import annotations

import contextlib

import torch
from torch._guards import detect_fake_mode

__all__ = ["full_where_branches", "isnan_guards"]


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


def isnan_guards(ep) -> int:
    """Rewrite each ``where(eq(p, p), a, b)`` of ``ep`` (a float ``p``) as ``where(isnan(p), b, a)``; how many.

    ``eq(p, p)`` is false exactly where ``p`` is NaN, so each element selects the same branch; ``ne(p, p)``
    likewise, without the swap. The test goes when nothing else reads it. In place.
    """
    graph = ep.graph_module.graph
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.where.self or len(node.args) != 3:
            continue
        cond, a, b = node.args
        tests = (torch.ops.aten.eq.Tensor, torch.ops.aten.ne.Tensor)
        if not (isinstance(cond, torch.fx.Node) and cond.target in tests and len(cond.args) == 2):
            continue
        p = cond.args[0]
        value = p.meta.get("val") if isinstance(p, torch.fx.Node) else None
        if cond.args[1] is not p or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        with graph.inserting_before(node):
            nan = graph.call_function(torch.ops.aten.isnan.default, (p,))
        with detect_fake_mode([value]) or contextlib.nullcontext():  # the program's fake tensors
            nan.meta["val"] = torch.ops.aten.isnan.default(value)
        node.args = (nan, b, a) if cond.target is torch.ops.aten.eq.Tensor else (nan, a, b)
        if not cond.users:
            graph.erase_node(cond)
        done += 1
    if done:
        ep.graph_module.recompile()
    return done
