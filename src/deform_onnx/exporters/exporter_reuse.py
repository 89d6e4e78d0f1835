"""Work torch's ONNX exporter (torch 2.14, onnxscript 0.7) repeats on every export, done once.

Measured on the dynamo path of :func:`deform_onnx.export` (the commit messages have the figures):

- :func:`cached_torchlib_registry`: ``torch.onnx.export(dynamo=True)`` builds its ATen-to-ONNX registry
  (``ONNXRegistry.from_torchlib``) afresh for every export: onnxscript re-derives every torchlib
  function's IR signature from its source (``function_ir`` parses the function's AST) and torch infers an
  ONNX signature for each. Nothing of it depends on the model. The registry is built once per opset and
  state of the torchlib tables and op namespaces (:func:`_registry_key`), and each export gets a copy
  with its own lists, so the custom translation table registered into it stays with that export.

Entered around ``torch.onnx.export`` (:func:`deform_onnx.exporters.calls.export_dynamo`) and undone on exit;
with another torch whose internals differ, it changes nothing.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

#: (registry class, opset, :func:`_registry_key`) -> the registry built then (copies are handed out), and the
#: objects whose ids the key holds (kept alive, so that no other object takes one of their ids).
_REGISTRIES: dict[tuple, tuple[object, tuple]] = {}


def _torchlib_tables():
    """The torchlib tables: torch's own and onnxscript's default registry (``None`` when either moved)."""
    try:
        from onnxscript.function_libs.torch_lib import ops as _ops  # noqa: F401  (registers onnxscript's torchlib)
        from onnxscript.function_libs.torch_lib.registration import default_registry
        from torch.onnx._internal.exporter._torchlib import _torchlib_registry
    except ImportError:
        return None
    return _torchlib_registry, default_registry


def _registry_key(tables) -> tuple[tuple, tuple] | None:
    """What ``ONNXRegistry.from_torchlib`` reads besides the opset, cheaply: which functions each table
    holds (by identity) and which torch op each onnxscript entry resolves to now (a library loaded later,
    torchvision's ops say, makes more of them resolve). ``None``: not readable here (no caching).
    """
    from torch.onnx._internal.exporter import _registration

    torch_table, onnxscript_table = tables
    try:
        torch_ops = tuple(torch_table.get_torchlib_ops())
        entries = [(name, tuple(f.overloads), tuple(f.complex)) for name, f in onnxscript_table.items()]
        targets = tuple(_registration._get_overload(name) for name, _, _ in entries)
    except Exception:  # noqa: BLE001 - another layout of these private tables: build as torch does
        return None
    objects = (torch_ops, entries, targets)
    key = (
        tuple(map(id, torch_ops)),
        tuple((name, tuple(map(id, overloads)), tuple(map(id, complex_))) for name, overloads, complex_ in entries),
        tuple(map(id, targets)),
    )
    return key, objects


def _fresh_copy(registry):
    """A registry equal to ``registry`` whose per-op lists are its own (``register_op`` inserts into them)."""
    twin = copy.copy(registry)
    twin.functions = {target: list(decomps) for target, decomps in registry.functions.items()}
    return twin


@contextlib.contextmanager
def cached_torchlib_registry() -> Iterator[None]:
    """While inside, ``ONNXRegistry.from_torchlib(opset)`` returns a copy of the registry built for the same
    opset and torchlib state (see the module docstring); the first call for each builds it as torch does.
    """
    from torch.onnx._internal.exporter import _registration

    cls = _registration.ONNXRegistry
    original = cls.__dict__.get("from_torchlib")
    tables = _torchlib_tables()
    if not isinstance(original, classmethod) or tables is None or getattr(original, "_deform_onnx_cached", False):
        yield  # another torch, or already inside
        return
    build = original.__func__

    def from_torchlib(klass, opset_version=_registration._constants.TORCHLIB_OPSET):
        read = _registry_key(tables)
        if read is None:
            return build(klass, opset_version)
        key, objects = read
        slot = (klass, opset_version, key)
        if slot not in _REGISTRIES:
            for stale in [s for s in _REGISTRIES if s[2] != key]:  # built from tables that changed since
                del _REGISTRIES[stale]
            _REGISTRIES[slot] = (build(klass, opset_version), objects)
        return _fresh_copy(_REGISTRIES[slot][0])

    patched = classmethod(from_torchlib)
    patched._deform_onnx_cached = True  # type: ignore[attr-defined]  # marks the patch (nested exports)
    setattr(cls, "from_torchlib", patched)  # noqa: B010 - a class attribute of torch's, restored below
    try:
        yield
    finally:
        setattr(cls, "from_torchlib", original)  # noqa: B010


@contextlib.contextmanager
def reused() -> Iterator[None]:
    """Around ``torch.onnx.export(..., dynamo=True)``: :func:`cached_torchlib_registry`."""
    with cached_torchlib_registry():
        yield
