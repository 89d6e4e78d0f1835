"""formats.retrace: a trace that would decompose nothing is skipped, only then, and the .pte is the same.

The rule (:func:`~deform_onnx.formats.retrace.idle`) on one small decomposed program; the block's bounds (the
program given and the traces' outputs, this thread, restored after); and ExecuTorch's lowering of a program
through the XNNPACK partitioner (its ``linear`` kept by the ``check_op_support`` path, a ``conv2d`` the
default table decomposes) with and without the skips: fewer traces, the same bytes.
"""

from __future__ import annotations

import importlib.util
import threading

import pytest
import torch

from deform_onnx.formats import retrace
from deform_onnx.formats.retrace import idle, idle_retraces_skipped


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.fc = torch.nn.Linear(3 * 16, 2)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1)).tanh()


@pytest.fixture(scope="module")
def program():
    """``_Small`` exported and functionalized (``run_decompositions({})``): its conv2d and linear kept."""
    return torch.export.export(_Small().eval(), (torch.randn(1, 2, 4, 4),)).run_decompositions({})


def _targets(ep) -> set:
    return {n.target for n in ep.graph.nodes if n.op == "call_function"}


def test_idle_only_when_the_table_holds_no_call(program):
    assert torch.ops.aten.conv2d.default in _targets(program)
    assert idle(program, {})
    assert idle(program, {torch.ops.aten.sin.default: lambda x: x})
    assert not idle(program, {torch.ops.aten.conv2d.default: lambda *a: a[0]})
    assert not idle(program, torch.export.default_decompositions())  # conv2d, linear: decomposed there
    assert not idle(program, None)  # the default table: not looked into


def test_a_python_function_in_the_graph_is_traced(program):
    """Planted: a call of a Python function (a trace would run it): not idle, whatever the table."""
    copy = torch.export.export(_Small().eval(), (torch.randn(1, 2, 4, 4),)).run_decompositions({})
    node = next(n for n in copy.graph.nodes if n.target is torch.ops.aten.tanh.default)
    assert idle(copy, {})
    node.target = lambda x: torch.tanh(x)
    assert not idle(copy, {})


def test_block_skips_only_idle_traces_of_known_programs(program):
    with idle_retraces_skipped(program):
        assert program.run_decompositions({}) is program
        decomposed = program.run_decompositions(torch.export.default_decompositions())  # not idle: traced
        assert decomposed is not program
        assert torch.ops.aten.conv2d.default not in _targets(decomposed)
        assert decomposed.run_decompositions({}) is decomposed  # a trace's output is known functional
        other = torch.export.export(_Small().eval(), (torch.randn(1, 2, 4, 4),))
        assert other.run_decompositions({}) is not other  # not given, not a trace's output: traced
    assert program.run_decompositions({}) is not program  # outside the block: traced


def test_block_restores_the_method_and_leaves_other_threads_alone(program):
    original = torch.export.ExportedProgram.run_decompositions
    seen = []
    with idle_retraces_skipped(program):
        with idle_retraces_skipped(program):
            assert torch.export.ExportedProgram.run_decompositions is not original
        worker = threading.Thread(target=lambda: seen.append(program.run_decompositions({}) is program))
        worker.start()
        worker.join()
        assert program.run_decompositions({}) is program
    assert torch.export.ExportedProgram.run_decompositions is original
    assert seen == [False]


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")
def test_pte_is_the_same_with_fewer_traces(monkeypatch):
    """ExecuTorch's lowering traces the program three times; with the skips fewer, and writes the same bytes."""
    from deform_onnx.formats.executorch import lower

    original = torch.export.ExportedProgram.run_decompositions
    traced = []

    def counted(self, decomp_table=None, *args, **kwargs):
        traced.append(1)
        return original(self, decomp_table, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    model, x = _Small().eval(), torch.randn(1, 2, 4, 4)  # no softmax: no XNNPACK attention examples built here
    data, counts = {}, {}
    for skip in (True, False):
        if not skip:
            monkeypatch.setattr(retrace, "idle", lambda ep, table: False)  # planted: every trace runs
        ep = torch.export.export(model, (x,)).run_decompositions({})
        traced.clear()
        data[skip] = lower(ep)
        counts[skip] = len(traced)
    assert counts[False] == 3
    assert counts[True] < counts[False]
    assert data[True] == data[False]
