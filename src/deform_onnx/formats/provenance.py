"""torch.fx's node provenance shared instead of deep-copied while a program is exported and lowered.

torch.fx records where each node came from in ``node.meta["from_node"]``: a list of
:class:`torch.fx.traceback.NodeSource`, each holding its own ``from_node`` history. Every pass that retraces a
program (``run_decompositions``, ExecuTorch's and XNNPACK's passes, litert-torch's) makes, for every node, a
``NodeSource`` whose constructor deep-copies the node's whole history (torch 2.14:
``copy.deepcopy(node.meta["from_node"])``), and the history is one level deeper after each pass, so a chain of
passes copies it again and again: measured with cProfile on a 64-channel DCNv2 layer's ``.pte``, about a sixth
of the lowering went to these copies (``copy.deepcopy`` under ``NodeSource.__init__``).

:func:`shared_provenance` makes the constructor keep the history it is given: a new list of the same
ancestor objects instead of a deep copy of them. Neither torch, ExecuTorch nor litert-torch changes a
``NodeSource`` once built (the constructor and deserialization set ``from_node`` on new objects only), so the
histories read the same, and so do the debug handles ExecuTorch derives from them (each node's oldest
ancestor); the written file is byte for byte the same (tests/formats/test_provenance.py).

``NodeSource`` is not a backward-compatible torch API, so the change is feature-detected: when the class, its
constructor's parameters or a probe of its behaviour differ from what is expected here, nothing is changed and
the copies are made as before (slower, not wrong).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["shared_provenance", "supported"]

_lock = threading.Lock()
_depth = 0
_original: Any = None


def _node_source() -> Any:
    from torch.fx import traceback

    return getattr(traceback, "NodeSource", None)


def _sharing(original):
    def init(self, node=None, pass_name: str = "", action=None) -> None:
        meta = getattr(node, "meta", None)
        history = meta.get("from_node") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not isinstance(history, list):
            original(self, node, pass_name, action)
            return
        meta["from_node"] = []  # the constructor deep-copies an empty history (the key keeps its place)
        try:
            original(self, node, pass_name, action)
        finally:
            meta["from_node"] = history
        self.from_node = list(history)  # the same ancestors, in a list of its own

    init.__name__, init.__qualname__, init.__doc__ = original.__name__, original.__qualname__, original.__doc__
    return init


def _probe(cls, init) -> bool:
    """Whether ``init`` builds what the class's own constructor builds, on a node with a two-level history."""
    import torch

    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    root = cls(None)
    node.meta["from_node"] = [root]
    copied, shared = cls.__new__(cls), cls.__new__(cls)
    cls.__init__(copied, node, "probe")
    init(shared, node, "probe")
    same = copied.to_dict() == shared.to_dict() and node.meta["from_node"] == [root]
    return same and shared.from_node[0] is root and shared.from_node is not node.meta["from_node"]


@functools.cache
def supported() -> bool:
    """Whether this torch's ``NodeSource`` is the one :func:`shared_provenance` knows (checked once)."""
    cls = _node_source()
    if cls is None or not hasattr(cls, "to_dict"):
        return False
    try:
        names = list(inspect.signature(cls.__init__).parameters)
        if names != ["self", "node", "pass_name", "action"]:
            return False
        return _probe(cls, _sharing(cls.__init__))
    except Exception:  # noqa: BLE001 - any surprise: leave torch as it is
        return False


@contextlib.contextmanager
def shared_provenance() -> Iterator[bool]:
    """Inside the block, ``NodeSource`` shares a node's history instead of deep-copying it; yields whether it does.

    Re-entrant and thread-safe (the first block to enter changes the class, the last to leave restores it);
    where :func:`supported` is false it changes nothing and yields ``False``.
    """
    global _depth, _original
    if not supported():
        yield False
        return
    cls = _node_source()
    with _lock:
        if _depth == 0:
            _original = cls.__init__
            cls.__init__ = _sharing(_original)
        _depth += 1
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                cls.__init__ = _original
                _original = None
