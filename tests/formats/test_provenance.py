"""formats.provenance: node histories shared, not deep-copied, read the same; an unknown NodeSource is left alone.

The lowerings run inside :func:`~deform_onnx.formats.provenance.shared_provenance` (every .pte / .tflite test
goes through it); here the rule itself, on one small program retraced twice (``run_decompositions``), with and
without sharing: the same history on every node, the same debug handles ExecuTorch derives from them, and
the ancestors shared rather than copied. A constructor of another shape (a torch that changed
``NodeSource``) is not touched.
"""

from __future__ import annotations

import contextlib
import importlib.util

import pytest
import torch
from torch.fx import traceback

from deform_onnx.formats import provenance
from deform_onnx.formats.provenance import shared_provenance


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.linear(self.conv(x).flatten(1), torch.ones(2, 3 * 16)).softmax(-1)


def _retraced(share: bool):
    ep = torch.export.export(_Small().eval(), (torch.randn(1, 2, 4, 4),))
    with shared_provenance() if share else contextlib.nullcontext():
        for _ in range(3):  # each retrace adds a level to every node's history
            ep = ep.run_decompositions()
    return ep


def _history(source) -> tuple:
    """A history as data, without ``graph_id`` (the id() of a graph object, different in every run)."""
    return (source.name, source.target, source.pass_name, tuple(_history(s) for s in source.from_node))


@pytest.fixture(scope="module")
def programs():
    """The small program retraced three times with copied histories, and with shared ones."""
    return _retraced(False), _retraced(True)


def test_shared_histories_read_as_the_copied_ones(programs):
    assert provenance.supported()
    copied, shared = programs
    a = [(n.name, tuple(_history(s) for s in n.meta.get("from_node", []))) for n in copied.graph.nodes]
    b = [(n.name, tuple(_history(s) for s in n.meta.get("from_node", []))) for n in shared.graph.nodes]
    assert a == b
    assert max(_depth(n) for n in shared.graph.nodes) >= 3  # the retraces are recorded


def _depth(node) -> int:
    depth, sources = 0, node.meta.get("from_node", [])
    while sources:
        depth, sources = depth + 1, sources[-1].from_node
    return depth


def _reachable(ep) -> set[int]:
    """The ids of every NodeSource in ``ep``'s node histories."""
    found, stack = set(), [s for n in ep.graph.nodes for s in n.meta.get("from_node", [])]
    while stack:
        source = stack.pop()
        found.add(id(source))
        stack.extend(source.from_node)
    return found


def test_shared_ancestors_are_not_copied():
    """A retrace inside the block holds the earlier program's NodeSource objects themselves; outside, copies."""
    first = torch.export.export(_Small().eval(), (torch.randn(1, 2, 4, 4),)).run_decompositions()
    earlier = _reachable(first)
    with shared_provenance() as sharing:
        assert sharing
        shared = first.run_decompositions()
    copied = first.run_decompositions()
    assert _reachable(shared) & earlier
    assert not _reachable(copied) & earlier


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")
def test_debug_handles_are_the_same(programs):
    from executorch.exir.passes.debug_handle_generator_pass import DebugHandleGeneratorPass

    handles = []
    for ep in programs:
        gm = ep.graph_module
        DebugHandleGeneratorPass()(gm)
        handles.append([(n.name, n.meta.get("debug_handle")) for n in gm.graph.nodes])
    assert handles[0] == handles[1]
    assert len({h for _, h in handles[0] if h}) > 1


def test_block_restores_the_constructor_and_nests():
    original = traceback.NodeSource.__init__
    with shared_provenance():
        with shared_provenance():
            assert traceback.NodeSource.__init__ is not original
        assert traceback.NodeSource.__init__ is not original
    assert traceback.NodeSource.__init__ is original


def test_an_unknown_nodesource_is_left_alone(monkeypatch):
    """Planted: a NodeSource constructor of another shape (a later torch) is not replaced; copies as before."""

    def other(self, node, pass_name="", action=None, extra=None):
        original(self, node, pass_name, action)

    original = traceback.NodeSource.__init__
    monkeypatch.setattr(traceback.NodeSource, "__init__", other)
    provenance.supported.cache_clear()
    try:
        with shared_provenance() as sharing:
            assert not sharing
            assert traceback.NodeSource.__init__ is other
    finally:
        provenance.supported.cache_clear()


def test_a_constructor_that_loses_history_fails_the_probe(monkeypatch):
    """Planted: a sharing constructor that drops the history would read differently: the probe refuses it."""
    monkeypatch.setattr(provenance, "_sharing", lambda original: lambda self, node=None, pass_name="", action=None: (
        original(self, None, pass_name, action)))  # fmt: skip
    provenance.supported.cache_clear()
    try:
        assert not provenance.supported()
    finally:
        provenance.supported.cache_clear()
