"""XNNPACK's example subgraphs built only when the program could hold them.

Two of the passes XNNPACK runs on each of its partitions (executorch 1.5.1: ``ConvertToUpsampleBilinear2d`` and
``ConvertToSDPAPass``) replace subgraphs that match example programs ExecuTorch builds on first use, once per
process (``executorch.backends.xnnpack.partition.graphs``: ``torch.export`` and ``to_edge`` of four
interpolations and of the attention forms): seconds of the first ``.pte`` a process writes, the same for every
program. A subgraph matches only a partition that holds every op of it; every interpolation example holds
``upsample_bilinear2d`` and every attention example ``_softmax`` (tests/formats/test_patterns.py checks the
installed ExecuTorch's examples). :class:`Ops`, called by the ``.pte``'s partitioner before it partitions
(:func:`deform_onnx.formats.schedule.partitioner`), records the ops of the edge program the partitions are cut
from (as a transform pass of ``to_edge_transform_and_lower`` it cost a pass manager run and two edge
verifications); inside :func:`unmatchable_skipped` the example getters give no examples of a kind whose op the
program lacks, so those passes find nothing, as they would have found nothing, without building the examples. Where the program holds the op, or the getters are not
where this module looks (another ExecuTorch), the examples are built and matched as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["ANCHORS", "Ops", "unmatchable_skipped"]

#: Per example getter (module of ``executorch.backends.xnnpack.partition.graphs``, function): the op that
#: every example it gives holds (a name prefix of the edge op's ATen overload).
ANCHORS: dict[tuple[str, str], str] = {
    ("bilinear_2d", "get_graphs_dict"): "aten.upsample_bilinear2d.",
    ("bilinear_2d", "get_graphs"): "aten.upsample_bilinear2d.",
    ("sdpa", "get_graphs"): "aten._softmax.",
}
_PACKAGE = "executorch.backends.xnnpack.partition.graphs"


class Ops:
    """Records the op names of the edge program (all its graphs) and changes nothing; callable as a pass."""

    def __init__(self) -> None:
        #: ``str`` of each call's ATen overload (``"aten.mm.default"``); ``None`` until the pass ran
        self.names: set[str] | None = None

    def __call__(self, gm: torch.fx.GraphModule):
        """Record ``gm``'s op names (and its submodules'); the graph is returned unchanged."""
        from torch.fx.passes.infra.pass_base import PassResult

        names: set[str] = set()
        for module in gm.modules():
            if isinstance(module, torch.fx.GraphModule):
                calls = (n.target for n in module.graph.nodes if n.op == "call_function")
                names.update(_name(target) for target in calls)
        self.names = names
        return PassResult(gm, False)

    def lacks(self, prefix: str) -> bool:
        """Whether the pass ran and saw no op whose name starts with ``prefix``."""
        return self.names is not None and not any(name.startswith(prefix) for name in self.names)


def _name(target) -> str:
    """An edge op's ATen overload name (``EdgeOpOverload._op``), or the target's own (an ATen overload, a function)."""
    aten = getattr(target, "_op", None)
    return str(aten if isinstance(aten, torch._ops.OpOverload) else target)


_lock = threading.Lock()
_installed: list[tuple[object, str, object]] = []
_depth = 0
_this_thread = threading.local()


def _getter(original, prefix: str):
    empty: object = {} if original.__name__.endswith("_dict") else []

    def examples():
        ops = getattr(_this_thread, "ops", None)
        if ops is not None and ops.lacks(prefix):
            return type(empty)()
        return original()

    examples.__name__, examples.__doc__ = original.__name__, original.__doc__
    return examples


def _install() -> None:
    import importlib

    for (module_name, function), prefix in ANCHORS.items():
        try:
            module = importlib.import_module(f"{_PACKAGE}.{module_name}")
        except ImportError:
            continue
        original = getattr(module, function, None)
        if callable(original):
            _installed.append((module, function, original))
            setattr(module, function, _getter(original, prefix))


@contextlib.contextmanager
def unmatchable_skipped(ops: Ops) -> Iterator[None]:
    """Inside the block, on this thread, the example getters of :data:`ANCHORS` give no examples when ``ops``
    lacks their op; other threads, and a program that holds the op, get ExecuTorch's own. Re-entrant: the
    getters are replaced while any block is open and restored when the last one closes.
    """
    global _depth
    with _lock:
        if _depth == 0:
            _install()
        _depth += 1
    before = getattr(_this_thread, "ops", None)
    _this_thread.ops = ops
    try:
        yield
    finally:
        _this_thread.ops = before
        with _lock:
            _depth -= 1
            if _depth == 0:
                while _installed:
                    module, function, original = _installed.pop()
                    setattr(module, function, original)
