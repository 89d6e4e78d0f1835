"""Export-time rewrites of torch functions, keyed by qualified name: keep sizes symbolic while exporting.

Detector code turns feature-map sizes into tensors and back into Python
numbers (Deformable DETR's ``spatial_shapes = torch.as_tensor([(h, w), ...])``,
``value.split([H_ * W_ for H_, W_ in spatial_shapes])``, ``torch.linspace(0.5,
H_ - 0.5, H_)``). Both exporters lose the size on that round trip:
``torch.export`` specialises ``torch.as_tensor`` of symbolic sizes and
``torch.linspace`` with symbolic ``steps`` to the example's values (measured,
torch 2.14: "You marked H as dynamic but your code specialized it"), and
reading a number back out of a tensor is data-dependent; the TorchScript
tracer records both as constants. The file is then right at the export size only.

While exporting (:func:`while_exporting`, entered by :func:`deform_onnx.export`),
a ``TorchFunctionMode`` routes the torch functions named in :data:`REWRITES`
(keyed by qualified name, e.g. ``"torch.linspace"``, as mmdeploy's
``FUNCTION_REWRITER.register_rewriter(func_name=...)`` keys its rewrites,
open-mmlab/mmdeploy ``mmdeploy/core/rewriters/function_rewriter.py``) to a
replacement that computes the same values from the sizes at run time. Each
replacement is only taken when its arguments carry a symbolic size (a
``SymInt`` under ``torch.export``, a traced size under the TorchScript tracer);
with plain numbers the original function runs (a small integer tensor made of
plain ints, a static size tensor, is made by torch and remembers its ints:
:func:`.size_tensors.as_tensor`). The mode is popped on exit:
nothing stays patched, and eager PyTorch (the verification reference) is
untouched. The patterns live in one small module per family
(:mod:`.size_tensors`, :mod:`.size_ranges`); each cites the code it serves.

Size tensors remember their sizes: a tensor made from sizes (``torch.as_tensor``
of ``SymInt``) records them, the integer ops Deformable DETR applies to it
(indexing, iteration, ``*``, ``prod``, ``cumsum``, ``cat``, ``stack``, ``==``)
carry them along, and where a number is read back (``int()``, ``bool()``,
``.item()``, ``.tolist()``) or such a 0-d tensor is passed to another function
(``split``, ``reshape``, ``linspace``), the recorded ``SymInt`` is used
instead, so ``torch.export`` sees a size expression, never a data-dependent value.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

__all__ = ["FUNCTION_REWRITES", "REWRITES", "Rewrite", "register", "register_function", "while_exporting"]


@dataclass(frozen=True)
class Rewrite:
    """One export-time replacement: ``fn(mode, original, *args, **kwargs)`` or ``NotImplemented`` (run the original).

    Attributes:
        name: the qualified name of the torch function it replaces (``"torch.linspace"``).
        fn: the replacement.
        source: the model code whose pattern it serves (repository and function).
    """

    name: str
    fn: Callable
    source: str


#: qualified name -> :class:`Rewrite`; filled by the pattern modules on import.
REWRITES: dict[str, Rewrite] = {}


def register(name: str, source: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` as the export-time replacement of the torch function ``name``.

    Raises:
        ValueError: ``name`` already has a rewrite, or does not name a torch function.
    """

    def wrap(fn: Callable) -> Callable:
        if name in REWRITES:
            raise ValueError(f"{name} already has an export-time rewrite ({REWRITES[name].source})")
        _resolve(name)  # fail at import, not while exporting
        REWRITES[name] = Rewrite(name, fn, source)
        return fn

    return wrap


def _resolve(name: str):
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def is_traced_size(value) -> bool:
    """A 0-d tensor while the TorchScript tracer runs (how it hands out ``x.shape[i]``)."""
    return isinstance(value, torch.Tensor) and value.dim() == 0 and torch._C._get_tracing_state() is not None


def is_symbolic(value) -> bool:
    """A ``torch.export`` symbolic number (not one that is already a constant)."""
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) and not _constant(value)


def _constant(value) -> bool:
    try:
        return value.node.maybe_as_int() is not None if isinstance(value, torch.SymInt) else False
    except Exception:  # noqa: BLE001 - an older SymNode: treat as symbolic
        return False


#: An entry of a size tensor not yet filled in (``torch.empty`` before ``spatial_shapes[level, 0] = height``).
UNKNOWN = object()

#: Functions whose first argument is a number (a size), not an input tensor.
_FACTORIES = {torch.arange, torch.zeros, torch.ones, torch.full, torch.empty, torch.randn, torch.rand}


class SizeMode(TorchFunctionMode):
    """Routes :data:`REWRITES` and keeps the sizes recorded in size tensors (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self._funcs = {_resolve(name): rewrite for name, rewrite in REWRITES.items()}
        self._values: dict[int, tuple[weakref.ref, np.ndarray]] = {}
        #: qualified names of the :data:`REWRITES` that acted (replaced a call), in first-use order.
        self.applied: list[str] = []

    # --- recorded sizes -------------------------------------------------------------------------
    def record(self, tensor: torch.Tensor, values) -> torch.Tensor:
        """Remember ``values`` (a numpy object array of ints/``SymInt``, ``tensor``'s shape) for ``tensor``."""
        if not isinstance(values, np.ndarray):  # one element of an object array: a 0-d array of it
            cell = np.empty((), dtype=object)
            cell[()] = values
            values = cell
        if len(self._values) >= 4096:  # forget freed tensors now and then
            self._values = {k: v for k, v in self._values.items() if v[0]() is not None}
        self._values[id(tensor)] = (weakref.ref(tensor), values)
        return tensor

    def values(self, tensor, partial: bool = False):
        """The recorded sizes of ``tensor`` (numpy object array) or ``None``; with ``partial``, also an
        array with :data:`UNKNOWN` entries (a size tensor being filled in place).
        """
        if not isinstance(tensor, torch.Tensor):
            return None
        entry = self._values.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        if not partial and any(v is UNKNOWN for v in entry[1].flat):
            return None
        return entry[1]

    def scalar(self, value):
        """``value`` itself, or the recorded size of a 0-d size tensor."""
        found = self.values(value)
        if found is not None and found.ndim == 0:
            return found.item()
        return value

    def substitute(self, obj):
        """``obj`` with every recorded 0-d size tensor (also inside lists, tuples, slices) replaced by its size."""
        if isinstance(obj, torch.Tensor):
            return self.scalar(obj)
        if isinstance(obj, list) or type(obj) is tuple:  # not torch.Size (it holds sizes already)
            tensors = [o for o in obj if isinstance(o, torch.Tensor)]
            if tensors and not all(self.scalar(o) is not o for o in tensors):
                return obj  # a list of tensors (torch.stack([H_, x])): sizes only where all are sizes (split)
            out = [self.substitute(o) for o in obj]
            return out if isinstance(obj, list) else tuple(out)
        if isinstance(obj, slice):
            return slice(self.substitute(obj.start), self.substitute(obj.stop), self.substitute(obj.step))
        return obj

    # --- dispatch -------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rewrite = self._funcs.get(func)
        if rewrite is not None:
            out = rewrite.fn(self, func, *args, **kwargs)
            if out is not NotImplemented:
                if rewrite.name not in self.applied:
                    self.applied.append(rewrite.name)
                return out
        if self._values and _in_place(func) and args:  # a size tensor changed in place: its record is stale
            self._values.pop(id(args[0]), None)
        if self._values:
            from .size_tensors import propagate

            out = propagate(self, func, args, kwargs)
            if out is not NotImplemented:
                return out
            # A tensor op's input stays a tensor (``H_ - 0.5``); sizes are substituted where numbers go.
            keep = 0 if func in _FACTORIES else 1
            sized_args = tuple(args[:keep]) + tuple(self.substitute(a) for a in args[keep:])
            sized_kwargs = {k: self.substitute(v) for k, v in kwargs.items()}
            if any(a is not b for a, b in zip(sized_args, args)) or any(
                sized_kwargs[k] is not v for k, v in kwargs.items()
            ):
                try:
                    return func(*sized_args, **sized_kwargs)
                except TypeError:  # a function that takes tensors only (torch.maximum): the arguments as given
                    pass
        return func(*args, **kwargs)


def _in_place(func) -> bool:
    """Whether ``func`` changes its first argument (``add_``, ``__iadd__``, ``__setitem__``, ``copy_``)."""
    name = getattr(func, "__name__", "")
    if name.startswith("__"):
        return name in _IN_PLACE_OPERATORS
    return name.endswith("_")


_IN_PLACE_OPERATORS = {"__setitem__"} | {
    f"__i{op}__" for op in "add sub mul truediv floordiv mod pow and or xor lshift rshift matmul".split()
}


#: qualified name of a model-library function -> :class:`Rewrite` (``fn(original, *args, **kwargs)``).
FUNCTION_REWRITES: dict[str, Rewrite] = {}


def register_function(name: str, source: str) -> Callable[[Callable], Callable]:
    """Decorator: while exporting, every module-level binding of the function ``name``
    (``"package.module.function"``) in its package's loaded modules calls ``fn(original, *args, **kwargs)``.

    Nothing is imported: a library the model does not use is left alone.

    Raises:
        ValueError: ``name`` already has a rewrite.
    """

    def wrap(fn: Callable) -> Callable:
        if name in FUNCTION_REWRITES:
            raise ValueError(f"{name} already has an export-time rewrite ({FUNCTION_REWRITES[name].source})")
        FUNCTION_REWRITES[name] = Rewrite(name, fn, source)
        return fn

    return wrap


@contextlib.contextmanager
def _functions_rewritten() -> Iterator[list[str]]:
    """Swap in :data:`FUNCTION_REWRITES` (every binding of the original in its package), restore them on exit."""
    undo: list[tuple[object, str, object]] = []
    applied: list[str] = []
    try:
        for name, rewrite in FUNCTION_REWRITES.items():
            module_name, _, attr = name.rpartition(".")
            original = getattr(sys.modules.get(module_name), attr, None)
            if original is None:
                continue
            replacement = functools.wraps(original)(functools.partial(rewrite.fn, original))
            root = module_name.split(".")[0]
            for loaded, module in list(sys.modules.items()):
                if module is None or not (loaded == root or loaded.startswith(root + ".")):
                    continue
                for key, value in list(getattr(module, "__dict__", {}).items()):
                    if value is original:
                        setattr(module, key, replacement)
                        undo.append((module, key, original))
            applied.append(name)
        yield applied
    finally:
        for owner, key, original in reversed(undo):
            setattr(owner, key, original)


@contextlib.contextmanager
def while_exporting() -> Iterator[SizeMode]:
    """Apply :data:`REWRITES` to torch calls and :data:`FUNCTION_REWRITES` to model libraries inside the block
    (both exporters), undone on exit.
    """
    from . import aten_affine_grid, hf_transformers, size_ranges, size_tensors  # noqa: F401  (register the patterns)

    with _functions_rewritten(), SizeMode() as mode:
        yield mode
