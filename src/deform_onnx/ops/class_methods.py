"""Per-call methods: a target's form for one shape class of an op, where it differs from the model's method.

A runtime target's default method is one form for the whole file; where its measurements show another
form faster on every shape of a class (:mod:`deform_onnx.targets.measured`, classes such as
:mod:`deform_onnx.ops.deform_conv.classes`), the target carries ``(op, class, method)`` entries
(:attr:`deform_onnx.targets.base.Target.class_methods`). Like the graph forms
(:mod:`deform_onnx.builder.forms`), they reach the lowerings through a context, not a parameter, set by
:meth:`deform_onnx.targets.Choice.emitting` only when the user gave no ``method`` (an explicit method is the
form of every call). :func:`lowering_for` is the one place that turns (op, method, opset, the call's class)
into a lowering; every entry point calls it (the TorchScript symbolic, the dynamo translation, the
torch.export decompositions through the same binding, and ``lower``'s file-node rewrite).

Ops are the registry's keys (:data:`deform_onnx.ops.registry.OPS`); an op without a class function never
asks, so it keeps the model's method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

from .registry import Lowering, resolve

__all__ = ["class_methods", "lowering_for"]

_ACTIVE: ContextVar[tuple[tuple[str, str, str], ...]] = ContextVar("deform_onnx_class_methods", default=())


@contextlib.contextmanager
def class_methods(entries: Iterable[tuple[str, ...]]) -> Iterator[None]:
    """Inside the block, a call of ``op`` in class ``shape_class`` takes ``method`` (``(op, shape_class, method)``
    entries; an inner block's entries come first).
    """
    token = _ACTIVE.set((*((op, cls, m) for op, cls, m, *_ in entries), *_ACTIVE.get()))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def lowering_for(op: str, default: Lowering, opset: int | None, shape_class: str | None) -> Lowering:
    """The lowering of one call of ``op``: the active entry's method for ``shape_class``, else ``default``.

    ``default`` is what the model's method resolves to (:func:`~deform_onnx.ops.registry.resolve`). An entry
    whose lowering the ``opset`` does not hold is passed over (a per-class form never raises the file's
    opset); ``shape_class`` ``None`` (not known statically) or ``opset`` ``None`` keep ``default``.
    """
    if shape_class is None or opset is None:
        return default
    for entry_op, cls, method in _ACTIVE.get():
        if entry_op != op or cls != shape_class:
            continue
        try:
            return resolve(op, method, opset)
        except ValueError:
            continue
    return default
