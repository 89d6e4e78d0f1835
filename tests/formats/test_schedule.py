"""formats.schedule: a topological order that computes each input right before its use, the same values.

The .pte side (XNNPACK partitions cut, each gather run right before the delegate that weights it) is checked
on the shared ``.pte`` of tests/formats/test_edge_formats.py, written with pieces cut at every outside read.
"""

from __future__ import annotations

import torch

from deform_onnx.formats.schedule import lazy_order, reorder


class Side(torch.nn.Module):
    """A short input traced before a long chain that the same node reads."""

    def forward(self, x):
        side = x * 2
        deep = x.sin().cos().tanh()
        return deep + side, x - 1


def test_lazy_order_computes_an_input_right_before_its_use_and_keeps_the_values():
    gm = torch.fx.symbolic_trace(Side())
    traced = [n.name for n in gm.graph.nodes]
    order = lazy_order(gm.graph)
    names = [n.name for n in order]
    assert sorted(names) == sorted(traced) and names[0] == "x" and names[-1] == "output"
    assert all(order.index(i) < order.index(n) for n in order for i in n.all_input_nodes)  # topological
    assert names.index("mul") == names.index("add") - 1 != traced.index("mul")  # moved next to its first use
    x = torch.randn(3, 4)
    want = Side()(x)
    reorder(gm)
    assert [n.name for n in gm.graph.nodes] == names
    for got, expected in zip(gm(x), want, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
