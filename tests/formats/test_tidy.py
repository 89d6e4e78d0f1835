"""formats.tidy: the decomposed program's no-op views and copies dropped, view chains folded, values unchanged.

The expected values are the model's own PyTorch outputs on the same tensors (exactly: the tidied program
computes the same ops on the same elements).
"""

from __future__ import annotations

import torch

from deform_onnx.formats.tidy import tidy


class Chains(torch.nn.Module):
    """View chains, a view to the same shape, a dense clone, a constant, a permuted copy and a view output."""

    def forward(self, x):
        n = x.shape[0]
        a = x.reshape(n, 12).reshape(n * 3, 4).reshape(-1)  # a chain of views
        b = (a * 2).reshape(a.shape).clone()  # a view to its own shape, a copy of a contiguous tensor
        c = b.reshape(-1, 4) + torch.tensor([1.0, 2.0, 3.0, 4.0])  # a constant (lift_fresh_copy)
        d = x.transpose(0, 1).reshape(-1, 4)  # not viewable: the copy before the view stays
        return c, d, (c * d).reshape(n, 12)  # an output that is a view: kept


def _nodes(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_tidy_drops_noops_and_keeps_the_values():
    x = torch.randn(2, 3, 4)
    ep = torch.export.export(Chains(), (x,), strict=False).run_decompositions({})
    before = _nodes(ep)
    removed = tidy(ep)
    after = _nodes(ep)
    assert removed == len(before) - len(after) > 0
    views = [t for t in after if "view" in t]
    assert len(views) < len([t for t in before if "view" in t])
    assert "aten.lift_fresh_copy.default" not in after
    assert "aten.clone.default" in after  # the permuted tensor's copy is needed for its view
    assert after[-1] in ("aten.view.default", "aten._unsafe_view.default")  # the output view is kept
    for got, want in zip(ep.module()(x), Chains()(x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_tidy_with_a_dynamic_dimension():
    """Symbolic sizes: a view to the same symbolic shape goes, a chain folds; the program runs at another size."""
    n = torch.export.Dim("n", min=2, max=16)
    ep = torch.export.export(Chains(), (torch.randn(2, 3, 4),), dynamic_shapes=({0: n},), strict=False)
    ep = ep.run_decompositions({})
    assert tidy(ep) > 0
    x = torch.randn(5, 3, 4)
    for got, want in zip(ep.module()(x), Chains()(x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
