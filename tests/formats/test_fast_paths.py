"""formats.fast_paths: a ``where``'s one-element constant branch as ``full_like`` of the other, values unchanged.

The expected values are the model's own PyTorch outputs on the same tensors (exactly: the rewritten program
selects the same elements).
"""

from __future__ import annotations

import pytest
import torch

from deform_onnx.formats.fast_paths import full_where_branches
from deform_onnx.formats.tidy import tidy


class Guard(torch.nn.Module):
    """The samplers' NaN guard (constant as the second branch), the same with the constant first, and a where
    whose constant branch broadcasts a smaller other branch (left as it is)."""

    def forward(self, p, row):
        clipped = p.clamp(-1.0, 5.0)
        guarded = torch.where(p == p, clipped, torch.tensor(-1.0))
        flipped = torch.where(p != p, torch.tensor(7.0), clipped)
        wide = torch.where(p > 0, row, torch.tensor(0.5))  # row [4] against p [3, 4]: not full_like of row
        return guarded, flipped, wide


def _wheres(ep) -> list[list[str]]:
    return [
        [str(a.target) if isinstance(a, torch.fx.Node) and a.op == "call_function" else "input" for a in n.args[1:]]
        for n in ep.graph.nodes
        if n.target is torch.ops.aten.where.self
    ]


@pytest.mark.parametrize("dynamic", [False, True])
def test_constant_branches_become_full_like_and_the_values_stay(dynamic):
    p, row = torch.randn(3, 4) * 4, torch.randn(4)
    p[0, 1] = float("nan")
    shapes = ({0: torch.export.Dim("n", min=2, max=8)}, None) if dynamic else None
    ep = torch.export.export(Guard(), (p, row), dynamic_shapes=shapes, strict=False).run_decompositions({})
    tidy(ep)  # as the .pte writer's program is: its constants' copies dropped
    assert full_where_branches(ep) == 2
    full = "aten.full_like.default"
    assert _wheres(ep) == [["aten.clamp.default", full], [full, "aten.clamp.default"], ["input", "input"]]
    p2 = torch.randn(6 if dynamic else 3, 4) * 4
    p2[-1, 0] = float("nan")
    for got, want in zip(ep.module()(p2, row), Guard()(p2, row), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_nan_guards_test_isnan_and_select_the_same_elements():
    """``where(p == p, ...)`` and ``where(p != p, ...)`` test ``isnan(p)`` (no ``eq``/``ne`` left); the outputs equal
    PyTorch's exactly on NaN and numbers; with the rewritten guard's branches planted back unswapped they do not."""
    from deform_onnx.formats.fast_paths import isnan_guards

    p, row = torch.randn(3, 4) * 4, torch.randn(4)
    p[0, 1] = p[2, 3] = float("nan")
    ep = torch.export.export(Guard(), (p, row), strict=False).run_decompositions({})
    assert isnan_guards(ep) == 2
    targets = [n.target for n in ep.graph.nodes]
    assert targets.count(torch.ops.aten.isnan.default) == 2
    assert torch.ops.aten.eq.Tensor not in targets and torch.ops.aten.ne.Tensor not in targets
    want = Guard()(p, row)
    for got, w in zip(ep.module()(p, row), want, strict=True):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    guard = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.where.self)
    guard.args = (guard.args[0], guard.args[2], guard.args[1])  # planted: the eq guard's branches not swapped
    ep.graph_module.recompile()
    assert not torch.equal(ep.module()(p, row)[0], want[0])
