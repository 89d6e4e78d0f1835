"""Work torch's ONNX exporter (torch 2.14, onnxscript 0.7) repeats on every export, done once or skipped.

Measured on the dynamo path of :func:`deform_onnx.export` (the commit messages have the figures):

- :func:`cached_torchlib_registry`: ``torch.onnx.export(dynamo=True)`` builds its ATen-to-ONNX registry
  (``ONNXRegistry.from_torchlib``) afresh for every export: onnxscript re-derives every torchlib
  function's IR signature from its source (``function_ir`` parses the function's AST) and torch infers an
  ONNX signature for each. Nothing of it depends on the model. The registry is built once per opset and
  state of the torchlib tables and op namespaces (:func:`_registry_key`), and each export gets a copy
  with its own lists, so the custom translation table registered into it stays with that export.
- :func:`prefiltered_multi_output_patterns`: onnxscript's optimizer (``optimize=True``) tries each rewrite
  rule at every node. For a pattern with several output nodes (``SlicesSplit``: two ``Slice`` of one
  input) its matcher indexes the whole graph before it compares the node with the pattern's first output
  node, so that rule costs nodes x nodes although it can only match at a ``Slice``: most of the optimizer's
  time on a large graph (transformers' Deformable DETR), with no match on any model measured. The node is
  compared with the first output node first; a node that fails that comparison fails every combination
  the matcher would try (each starts with it), so the matches, and the file, are the same.

Both are context managers entered around ``torch.onnx.export`` (:func:`deform_onnx.exporters.calls.export_dynamo`)
and undone on exit; with other versions of torch or onnxscript whose internals differ, they change nothing.
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
    with _swapped(cls, "from_torchlib", patched):
        yield


@contextlib.contextmanager
def prefiltered_multi_output_patterns() -> Iterator[None]:
    """While inside, onnxscript's matcher compares a node with a multi-output pattern's first output node
    before it indexes the graph (see the module docstring); single-output patterns are untouched.
    """
    try:
        from onnxscript.rewriter import _basics, _matcher

        _matcher.SimplePatternMatcher  # noqa: B018 - the class this patches (AttributeError: another onnxscript)
    except (ImportError, AttributeError):
        yield
        return
    cls = _matcher.SimplePatternMatcher
    original = getattr(cls, "match", None)
    node_pattern = getattr(getattr(_matcher, "_pattern_ir", None), "NodePattern", None)
    if original is None or not callable(getattr(node_pattern, "matches", None)) or hasattr(original, "_prefilter"):
        # another onnxscript (the check reads NodePattern.matches), or already inside
        yield
        return

    def match(self, model, graph_or_function, node, *args, **kwargs):
        firsts: list = getattr(self.pattern, "output_nodes", [])
        # a tracer records every failed combination: leave its run as it is
        multi = len(firsts) > 1 and kwargs.get("tracer") is None
        if multi and not firsts[0].matches(node, _basics.MatchResult()):
            failed = _basics.MatchResult()
            failed.fail("the node does not match the pattern's first output node")
            return failed
        return original(self, model, graph_or_function, node, *args, **kwargs)

    match._prefilter = True  # type: ignore[attr-defined]  # marks the patch (nested exports)
    with _swapped(cls, "match", match):
        yield


@contextlib.contextmanager
def _swapped(cls: type, name: str, value: object) -> Iterator[None]:
    """``cls.name`` is ``value`` while inside (a class attribute of torch's or onnxscript's), restored on exit
    (an attribute ``cls`` inherited is inherited again).
    """
    missing = object()
    original = cls.__dict__.get(name, missing)
    setattr(cls, name, value)
    try:
        yield
    finally:
        if original is missing:
            delattr(cls, name)
        else:
            setattr(cls, name, original)


@contextlib.contextmanager
def reused() -> Iterator[None]:
    """Both: around ``torch.onnx.export(..., dynamo=True)``."""
    with cached_torchlib_registry(), prefiltered_multi_output_patterns():
        yield
