"""ExecuTorch's retraces of a program that they would return unchanged, skipped while a ``.pte`` is lowered.

``to_edge_transform_and_lower`` (executorch 1.5.1, XNNPACK partitioner) calls
``ExportedProgram.run_decompositions`` three times on the program it is given: with ``{}`` (to functionalize
it), with the default table less the ops XNNPACK keeps, and, after the kept ops that XNNPACK takes are
renamed out of the table's reach, with the whole default table. Each call traces the whole program again
through AOTAutograd: with the writer's own decomposition (:func:`~deform_onnx.formats.torch_export.exported`),
four traces of every node, measured with py-spy as about a third of a DCNv2 layer's ``.pte`` write. The
program the writer hands over is already functional (the output of ``run_decompositions``, then the writer's
own rewrites of functional ops into functional ops), and so is each call's output; on a functional program
a trace with a table none of whose ops the graph calls decomposes nothing and gives the same program.
ExecuTorch itself skips its middle call in that case for partitioners without ``check_op_support``
(``contains_any_call_fn_target_op``); measured on a DCNv2 layer, the first and the last call are such
cases here (the written ``.pte`` is byte for byte the same: tests/formats/test_retrace.py).

:func:`idle_retraces_skipped` returns such a program as it is: only inside the block, only for the
program given and the programs a ``run_decompositions`` in the block returned, only with a table
(``None`` means the default one: traced as before), and only when every call of the graph is an operator
overload (or ``operator.getitem``) that the table does not hold. Anything else, a Python function in the
graph among them, is traced as before.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
import weakref
from collections.abc import Iterator

import torch

__all__ = ["idle", "idle_retraces_skipped"]

_lock = threading.Lock()
_depth = 0
_original = None
_this_thread = threading.local()


def idle(ep, table) -> bool:
    """Whether ``ep.run_decompositions(table)`` would decompose nothing: every call of ``ep``'s graph (its
    submodules' too) is an operator overload or ``operator.getitem`` and none is in ``table`` (``None``, the
    default table, is not looked into: ``False``).
    """
    if table is None:
        return False
    keys = set(table.materialize()) if hasattr(table, "materialize") else set(table)
    for module in ep.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op in ("call_method", "call_module"):
                return False
            if node.op != "call_function":
                continue
            overload = isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem
            if not overload or node.target in keys:
                return False
    return True


def _skipping(original):
    @functools.wraps(original)
    def run_decompositions(self, decomp_table=None, *args, **kwargs):
        known = getattr(_this_thread, "known", None)
        if known is None:  # another thread, or outside every block
            return original(self, decomp_table, *args, **kwargs)
        if self in known and not args and not kwargs and idle(self, decomp_table):
            return self
        out = original(self, decomp_table, *args, **kwargs)
        known.add(out)  # a trace's output is functional
        return out

    return run_decompositions


@contextlib.contextmanager
def idle_retraces_skipped(ep) -> Iterator[None]:
    """Inside the block, on this thread, ``run_decompositions`` of the functional program ``ep`` (or of one a
    call in the block returned) returns the program itself where the call would decompose nothing (:func:`idle`).

    ``ep`` must be functional (the output of ``run_decompositions``, rewritten into functional ops only).
    Re-entrant and thread-safe: the method is replaced while any block is open and restored when the last closes.
    """
    global _depth, _original
    cls = torch.export.ExportedProgram
    with _lock:
        if _depth == 0:
            _original = cls.run_decompositions
            cls.run_decompositions = _skipping(_original)  # type: ignore[method-assign]
        _depth += 1
    before = getattr(_this_thread, "known", None)
    _this_thread.known = weakref.WeakSet([ep])
    try:
        yield
    finally:
        _this_thread.known = before
        with _lock:
            _depth -= 1
            if _depth == 0:
                cls.run_decompositions = _original  # type: ignore[method-assign]
                _original = None
