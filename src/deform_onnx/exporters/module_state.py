"""The model's own state is the same after an export as before it, however many captures were made.

Models cache tensors between calls: RIFE's ``model/warplayer.py`` (hzwer/ECCV2022-RIFE#33; case c35)
keeps a module-level ``backwarp_tenGrid = {}`` of base grids keyed by ``(device, flow size)``, and
modules keep caches as attributes. An export runs the model several times: ``torch.export`` captures
(the guard check, then torch's exporter, which tries up to three capture strategies), the TorchScript
trace, and eager runs for the reference. A capture fills such a cache with a ``FakeTensor`` under a
symbolic key; the next capture finds it there ("We found a fake tensor in the exported program
constant's list", measured on torch 2.14) and the user's cache is left holding it.

:func:`kept` takes a :class:`Snapshot` of that state when the export starts and restores it after every
capture and trace and when the export ends. The state is: each module's attributes and buffers, the
containers (dict, list) among its attributes and one level into plain objects it holds (a cache
object's dict), and the module-level containers that the model's own code reaches (the functions and
classes its ``forward`` and methods name, followed through the modules and functions they name;
framework packages are not walked). Only entries that hold tensors are put back: a library's registry
of types, filled on the first call, is left alone.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

#: Packages whose code is not walked for module-level caches (their state is not the model's).
FRAMEWORKS = ("torch", "torchvision", "deform_onnx", "numpy", "onnx", "onnxruntime", "onnxscript", "transformers")
#: Functions followed from the model's methods, at most (the walk is breadth-first).
_MAX_FUNCTIONS = 2000


def has_tensor(value, depth: int = 0) -> bool:
    """Whether ``value`` is a tensor or a (nested, up to 3 levels) tuple/list/dict holding one."""
    if isinstance(value, torch.Tensor):
        return True
    if depth >= 3:
        return False
    if isinstance(value, (tuple, list)):
        return any(has_tensor(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(has_tensor(v, depth + 1) for v in value.values())
    return False


def _framework(obj) -> bool:
    name = getattr(obj, "__module__", None) or getattr(obj, "__name__", "") or ""
    root = name.split(".")[0]
    return root in FRAMEWORKS or root in sys.stdlib_module_names or root == "builtins"


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def reached_containers(model: torch.nn.Module) -> list[tuple[dict, str]]:
    """``(module globals, name)`` of every module-level dict or list the model's own code names.

    Walks the methods of every class in the model's module tree (except framework classes,
    :data:`FRAMEWORKS`) and every function they name (globals, attributes of modules they name, closures),
    recursively; ``rife.warp`` imported into ``IFNet``'s module leads to ``warplayer``'s globals.
    """
    functions: list[types.FunctionType] = []
    for module in model.modules():
        for cls in type(module).__mro__:
            if _framework(cls):
                continue
            for value in vars(cls).values():
                value = getattr(value, "__func__", value)  # staticmethod / classmethod
                value = getattr(value, "fget", value)  # property
                if isinstance(value, types.FunctionType):
                    functions.append(value)
    found: dict[tuple[int, str], tuple[dict, str]] = {}
    seen: set[int] = set()
    while functions and len(seen) < _MAX_FUNCTIONS:
        fn = functions.pop(0)
        if id(fn) in seen or _framework(fn):
            continue
        seen.add(id(fn))
        scope = fn.__globals__
        names = {n for code in _codes(fn.__code__) for n in code.co_names}

        def visit(owner: dict, name: str) -> None:
            value = owner.get(name)
            if isinstance(value, (dict, list)) and not name.startswith("__"):
                found[(id(owner), name)] = (owner, name)
            elif isinstance(value, types.FunctionType):
                functions.append(value)
            elif isinstance(value, type) and not _framework(value):
                functions.extend(v for v in vars(value).values() if isinstance(v, types.FunctionType))

        for name in names:
            visit(scope, name)
            value = scope.get(name)
            if isinstance(value, types.ModuleType) and not _framework(value):  # warplayer.backwarp_tenGrid
                for attr in names & set(vars(value)):
                    visit(vars(value), attr)
        for cell in fn.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(content, types.FunctionType):
                functions.append(content)
    return list(found.values())


def _copy(value):
    return dict(value) if isinstance(value, dict) else list(value)


@dataclass
class Snapshot:
    """The state :func:`kept` restores (see the module docstring)."""

    attributes: list[tuple[object, dict]] = field(default_factory=list)
    containers: list[tuple[dict | list, dict | list]] = field(default_factory=list)
    bindings: list[tuple[dict, str, object]] = field(default_factory=list)

    @classmethod
    def take(cls, model: torch.nn.Module) -> Snapshot:
        """The state of ``model``: its modules' attributes and buffers, the caches they hold, the globals its code reaches."""
        snap = cls()
        owners: list[object] = []
        for module in model.modules():
            owners.append(module)
            for key, value in vars(module).items():
                if key.startswith("__") or isinstance(value, (torch.nn.Module, torch.Tensor, type)):
                    continue
                if hasattr(value, "__dict__") and not isinstance(value, (types.FunctionType, types.MethodType)):
                    owners.append(value)  # a cache object: its own containers, one level down
        for owner in owners:
            state = dict(vars(owner))
            snap.attributes.append((owner, state))
            for value in state.values():
                if isinstance(value, (dict, list)):  # _buffers and _parameters among them
                    snap.containers.append((value, _copy(value)))
        for scope, name in reached_containers(model):
            value = scope[name]
            snap.bindings.append((scope, name, value))
            snap.containers.append((value, _copy(value)))
        return snap

    def restore(self) -> None:
        """Put back every entry that holds a tensor and changed (or was added) since :meth:`take`."""
        for container, before in self.containers:
            _restore_container(container, before)
        for owner, before in self.attributes:
            now = vars(owner)
            for key in [k for k in now if k not in before and has_tensor(now[k])]:
                del now[key]
            for key, value in before.items():
                if now.get(key, _MISSING) is not value and (has_tensor(value) or has_tensor(now.get(key))):
                    now[key] = value
        for scope, name, value in self.bindings:
            now = scope.get(name, _MISSING)
            if now is not value and (has_tensor(value) or has_tensor(now)):
                scope[name] = value  # a ``global cache; cache = {...}`` rebinding


_MISSING = object()


def _restore_container(container, before) -> None:
    if isinstance(container, dict):
        for key in [k for k in container if k not in before and has_tensor(container[k])]:
            del container[key]
        for key, value in before.items():
            if container.get(key, _MISSING) is not value and (has_tensor(value) or has_tensor(container.get(key))):
                container[key] = value
    elif list(map(id, container)) != list(map(id, before)) and (has_tensor(before) or has_tensor(container)):
        container[:] = before


def keeping_state(fn):
    """Decorator: ``fn(model, ...)`` runs inside :func:`kept` ``(model)``."""
    import functools

    @functools.wraps(fn)
    def call(model, *args, **kwargs):
        with kept(model):
            return fn(model, *args, **kwargs)

    return call


@contextlib.contextmanager
def kept(model: torch.nn.Module) -> Iterator[Snapshot]:
    """Restore the model's state (:class:`Snapshot`) after every ``torch.export.export`` /
    ``torch.export.draft_export`` capture and every ``torch.onnx.export`` call inside the block, and on
    exit. The three functions are wrapped for the block only.
    """
    snap = Snapshot.take(model)
    wrapped = [(torch.export, "export"), (torch.export, "draft_export"), (torch.onnx, "export")]
    originals = [getattr(owner, name) for owner, name in wrapped]

    def restoring(fn):
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                snap.restore()

        call.__wrapped__ = fn  # type: ignore[attr-defined]  # what functools.wraps sets: torch reads signatures through it
        return call

    for (owner, name), fn in zip(wrapped, originals):
        setattr(owner, name, restoring(fn))
    try:
        yield snap
    finally:
        for (owner, name), fn in zip(wrapped, originals):
            setattr(owner, name, fn)
        snap.restore()
