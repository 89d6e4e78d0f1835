"""formats.patterns: XNNPACK's example subgraphs skipped only where the program lacks an op every example holds.

The installed ExecuTorch's examples are built once here and each is checked to hold its anchor op (the rule
the skip rests on); the getters inside the block are checked on stand-ins (cheap): no examples for a kind the
program lacks, ExecuTorch's own for a kind it holds (planted: a program with ``_softmax`` gets the attention
examples), for another thread, and after the block.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading

import pytest
import torch

from deform_onnx.formats import patterns
from deform_onnx.formats.patterns import ANCHORS, Ops, unmatchable_skipped

pytestmark = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")


def _module(name: str):
    return importlib.import_module(f"{patterns._PACKAGE}.{name}")


def test_every_example_holds_its_anchor_op():
    for (module_name, function), prefix in ANCHORS.items():
        examples = getattr(_module(module_name), function)()
        graphs = list(examples.keys() if isinstance(examples, dict) else examples)
        assert graphs, (module_name, function)
        for gm in graphs:
            ops = Ops()
            ops(gm)
            assert not ops.lacks(prefix), (module_name, function, sorted(ops.names or ()))


def test_ops_pass_records_the_program_and_changes_nothing():
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Softmax(-1)))
    before = gm.code
    ops = Ops()
    assert not ops.lacks("anything")  # not run yet: nothing is skipped
    result = ops(gm)
    assert not result.modified and gm.code == before
    assert ops.lacks("aten.upsample_bilinear2d.")


def test_ops_names_edge_and_aten_overloads_alike():
    """Planted: a raw ATen ``_softmax`` (its ``_op`` is a C++ callable) counts as holding it, as the edge op does."""
    from executorch.exir.dialects._ops import ops as exir_ops

    for target in (torch.ops.aten._softmax.default, exir_ops.edge.aten._softmax.default):
        graph = torch.fx.Graph()
        graph.output(graph.call_function(target, (graph.placeholder("x"), -1, False)))
        ops = Ops()
        ops(torch.fx.GraphModule(torch.nn.Module(), graph))
        assert not ops.lacks("aten._softmax."), ops.names


@pytest.fixture
def stand_ins(monkeypatch):
    """ExecuTorch's getters replaced by cheap stand-ins that say they were called."""
    for (module_name, function), _ in ANCHORS.items():
        value = {"example": True} if function.endswith("_dict") else ["example"]
        monkeypatch.setattr(_module(module_name), function, lambda value=value: value)
    return {key: getattr(_module(key[0]), key[1]) for key in ANCHORS}


def _calls():
    return {key: getattr(_module(key[0]), key[1])() for key in ANCHORS}


def test_getters_skip_only_what_the_program_lacks(stand_ins):
    ops = Ops()
    ops.names = {"aten._softmax.default", "aten.mm.default"}  # planted: an attention the examples could match
    seen_elsewhere = {}
    with unmatchable_skipped(ops):
        inside = _calls()
        thread = threading.Thread(target=lambda: seen_elsewhere.update(_calls()))
        thread.start()
        thread.join()
    for key, prefix in ANCHORS.items():
        assert bool(inside[key]) == (prefix == "aten._softmax."), key
        assert seen_elsewhere[key]  # another thread: ExecuTorch's own
    assert {key: getattr(_module(key[0]), key[1]) for key in ANCHORS} == stand_ins  # restored


def test_pte_partitioner_records_the_program_before_it_partitions(monkeypatch):
    """The .pte's partitioner hands the program to its Ops before XNNPACK's configs match anything."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from deform_onnx.formats import schedule

    seen = []
    monkeypatch.setattr(XnnpackPartitioner, "get_matched_nodes_from_configs", lambda self, ep: seen.append(
        ops.names) or [])  # fmt: skip
    ops = Ops()
    ep = torch.export.export(torch.nn.Linear(2, 3).eval(), (torch.randn(1, 2),))
    assert schedule.partitioner(ops).generate_partitions(ep) == []
    assert seen == [{"aten.linear.default"}]
