"""The op registry: each op folder registers one :class:`OpEntry`; the rest of the package loops over them.

An op is a plugin, onnx2torch- and torchlib-style: its folder under
``deform_onnx/ops/`` holds what the op is and brings (spec, lowerings, torch
binding, file nodes, target rules and faults, reference) and a ``register.py``
that builds its :class:`OpEntry` and calls :func:`register`. This module
imports no op: on first use, :data:`OPS` imports ``deform_onnx.ops.<name>.register``
for every subpackage that has one (:func:`discover`). A registration from
elsewhere (a test's toy op, a user's own op) calls :func:`register` the same way
and :func:`unregister` to take it back; a second entry for a name, a torch op
or a file node kind raises ``ValueError``.

A ``method`` (``auto``, ``native``, ``grid_sample``, ``gather``) is the user's
single choice for a whole model; each op resolves it for itself with
:func:`resolve`, the one method/opset check every entry point calls
(exporters, rewriter, targets, CLI). The ops of the package:

- ``deform_conv2d`` (torchvision): ``native`` = ONNX ``DeformConv`` (19+),
  ``grid_sample`` = standard ops on GridSample (16+), ``gather`` (11+);
  ``auto`` is grid_sample at 16+, gather below (:mod:`.deform_conv`).
- ``grid_sample`` (``F.grid_sample``): its native form *is* GridSample, so
  ``native`` and ``grid_sample`` both mean one ``GridSample`` node (16+);
  ``gather`` (11+); ``auto`` is GridSample at 16+, gather below (:mod:`.grid_sample`).
- ``dcnv3`` (InternImage; mmdeploy's ``TRTDCNv3`` node): no ONNX op of its
  own, so each method picks the sampler ``grid_sample`` resolves it to
  (:mod:`.dcnv3`).
- ``ms_deform_attn`` (:func:`deform_onnx.ops.ms_deform_attn`, and mmdeploy's /
  TensorRT's MSDA nodes): one lowering, the fused gather form (11+), for
  every method (ONNX has no MSDA op; :mod:`.msda`).

The bounds themselves are named in :mod:`deform_onnx.core.opsets`; tests read them
from here (``OPS[op].lowerings[name].min_opset``, ``OPS[op].min_opset``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

#: Every method a user can choose for a whole model (the CLI keeps a copy that a test compares with this one).
METHODS = ("auto", "native", "grid_sample", "gather")
#: What ``auto`` means for a whole model: the first of these methods that every op holds at the opset
#: (:func:`model_method`); ``native`` is used only when asked for.
AUTO_METHODS = ("grid_sample", "gather")


class LowerFn(Protocol):
    """A lowering: ``fn(builder, spec_or_first_input, *inputs) -> output``; the arguments are the op's own.

    Deformable convolution: ``fn(b, spec, x, weight, offset, mask, bias)``;
    grid_sample: ``fn(b, spec, x, grid)``; DCNv3: ``fn(b, spec, x, offset, mask)``;
    MSDA: ``fn(b, value, spatial_shapes, level_start_index, sampling_locations, attention_weights)``.
    """

    def __call__(self, b: Any, /, *args: Any) -> Any:
        """Emit the lowering with builder ``b``; returns the output value."""
        ...


@dataclass(frozen=True)
class Lowering:
    """One lowering of one op.

    Attributes:
        name: the lowering's name (a method, or the op's own name for its forms).
        min_opset: the lowest opset its graph is valid at.
        fn: the function that emits it (:class:`LowerFn`).
        node: the one default-domain ONNX node it writes when it is the op's native form
            (``"DeformConv"``, ``"GridSample"``), else ``None``; such nodes must not remain in a
            file lowered with another of the op's lowerings, and a file that has them runs this form.
    """

    name: str
    min_opset: int
    fn: LowerFn
    node: str | None = None


@dataclass(frozen=True)
class OpEntry:
    """One op of the family, as its folder registers it.

    Attributes:
        name: the op's name here (the key of :data:`OPS`).
        title: the op's name in error messages.
        lowerings: lowering name -> :class:`Lowering` (``fn``'s signature is the op's own).
        methods: method -> lowering name, for every method of :data:`METHODS` but ``auto``.
        auto: the lowering names ``auto`` tries, in order: the first the opset holds.
        torch_ops: the dispatcher names of the torch ops it lowers (``"torchvision::deform_conv2d"``);
            a prefix matches overloads (``"aten::grid_sampler"`` covers ``aten::grid_sampler_2d``).
        onnx_nodes: ``(domain, op_type)`` of the file nodes ``lower`` rewrites into it.
        order: where ``lower`` replaces its nodes among the other ops' (lower first), and the order of
            ``lower``'s report. Every op's nodes are found before any op's are replaced (the
            deformable-convolution and DCNv3 lowerings write GridSample nodes, which stay), so the order
            decides the report and the names of new values, not which nodes are lowered.
        spells: how an error names what a lowering writes (``{}`` is the method).
        binding: the module of its torch bindings, ``None`` when it has none (DCNv3 exports through
            ``F.grid_sample``): ``TORCHSCRIPT_OP``, ``make_symbolic(method)`` and
            ``translations(method, opset, build_opset, builder)``; the exporters install them all.
        sources: the module of its file nodes (the interface of :mod:`deform_onnx.ops.file_nodes`):
            ``nodes_lowered(model, method, opset)`` and ``lower_node(node, b, method, opset)``.
        rules: the module of the target rules and faults it brings (:mod:`deform_onnx.targets`):
            ``RULES`` (graph rule name -> check), and optionally ``FAULTS`` (target name -> faults) and
            ``TARGET_RULES`` (target name -> rule names that target also checks).
        module_checks: the module that checks a torch model's use of it before export (imports torch):
            ``check_modules(model) -> contextlib.ExitStack`` (forward pre-hooks, removed on close),
            raising :class:`deform_onnx.core.errors.BadModuleInput`.
        decompositions: the module of its torch-level decompositions into core ATen ops (for
            torch.export stacks), or ``None``; filled by the torch.export formats.
        shape_classes: the module of its shape classes, or ``None``: ``CLASSES`` (in order) and
            ``label_class(label)``, the class of a benchmark shape by its label; its bindings and file-node
            lowering classify each call the same way for a target's per-class forms
            (:mod:`deform_onnx.ops.class_methods`, :mod:`deform_onnx.targets.measured`).
    """

    name: str
    title: str
    lowerings: Mapping[str, Lowering]
    methods: Mapping[str, str]
    auto: tuple[str, ...]
    torch_ops: tuple[str, ...] = ()
    onnx_nodes: tuple[tuple[str, str], ...] = ()
    order: int = 100
    spells: str = "method {!r}"
    binding: str | None = None
    sources: str | None = None
    rules: str | None = None
    module_checks: str | None = None
    decompositions: str | None = None
    shape_classes: str | None = None

    def __post_init__(self) -> None:
        missing = [m for m in METHODS[1:] if m not in self.methods]
        unknown = sorted({*self.methods.values(), *self.auto} - set(self.lowerings))
        if missing or unknown or not self.auto:
            raise ValueError(
                f"op {self.name!r}: methods must map each of {', '.join(METHODS[1:])} to a lowering "
                f"(missing: {missing or 'none'}), auto must name at least one, and both only its lowerings "
                f"(unknown: {unknown or 'none'})"
            )

    @property
    def min_opset(self) -> int:
        """The lowest opset any lowering of this op holds."""
        return min(low.min_opset for low in self.lowerings.values())

    @property
    def one_form(self) -> bool:
        """Whether every method writes this op in one and the same form (multi-scale deformable attention)."""
        return len({*self.methods.values(), *self.auto}) == 1


class _Registry(Mapping[str, OpEntry]):
    """:data:`OPS`: name -> :class:`OpEntry`, in :attr:`OpEntry.order`; the op packages load on first use."""

    def __init__(self) -> None:
        self._entries: dict[str, OpEntry] = {}
        self._state = "new"  # "loading" while discover() runs, "done" after

    def _load(self) -> None:
        if self._state != "new":
            return
        self._state = "loading"
        try:
            discover()
        except BaseException:
            self._state = "new"
            raise
        self._state = "done"

    def __getitem__(self, name: str) -> OpEntry:
        self._load()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(sorted(self._entries, key=lambda n: (self._entries[n].order, n)))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def add(self, entry: OpEntry) -> None:
        taken: dict[str, dict[Any, str]] = {
            "name": {e.name: e.name for e in self._entries.values()},
            "torch op": {t: e.name for e in self._entries.values() for t in e.torch_ops},
            "file node": {k: e.name for e in self._entries.values() for k in e.onnx_nodes},
        }
        asked: dict[str, list[Any]] = {
            "name": [entry.name],
            "torch op": list(entry.torch_ops),
            "file node": list(entry.onnx_nodes),
        }
        for what, keys in asked.items():
            for key in keys:
                if key in taken[what]:
                    raise ValueError(
                        f"op {entry.name!r}: {what} {key!r} is already registered by op {taken[what][key]!r}; "
                        "unregister it first (deform_onnx.ops.registry.unregister)"
                    )
        self._entries[entry.name] = entry

    def remove(self, name: str) -> OpEntry:
        if name not in self._entries:
            raise KeyError(f"no op {name!r} is registered")
        return self._entries.pop(name)


#: Every registered op, by name, in :attr:`OpEntry.order` (loaded on first use: :func:`discover`).
OPS: Mapping[str, OpEntry] = _Registry()


def register(entry: OpEntry) -> OpEntry:
    """Add ``entry`` to :data:`OPS` and return it (an op's ``register.py`` calls this once).

    Raises:
        ValueError: its name, one of its torch ops or one of its file node kinds is already registered.
    """
    OPS.add(entry)  # type: ignore[attr-defined]  # OPS is the _Registry; typed as a read-only mapping
    return entry


def unregister(name: str) -> OpEntry:
    """Remove the op ``name`` from :data:`OPS` and return its entry (``KeyError`` if it is not registered)."""
    return OPS.remove(name)  # type: ignore[attr-defined]  # see register()


def discover() -> None:
    """Import ``deform_onnx.ops.<name>.register`` for every op package that has one (they call :func:`register`)."""
    package = importlib.import_module(__package__ or "deform_onnx.ops")
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            continue
        module = f"{package.__name__}.{info.name}.register"
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def _modules(part: str) -> list[ModuleType]:
    names = [getattr(entry, part) for entry in OPS.values()]
    return [importlib.import_module(name) for name in names if name is not None]


def bindings() -> list[ModuleType]:
    """The binding module of every op that has one (:attr:`OpEntry.binding`; importing them imports torch)."""
    return _modules("binding")


def sources() -> list[ModuleType]:
    """The file-node module of every op that has one (:attr:`OpEntry.sources`), in :data:`OPS` order."""
    return _modules("sources")


def rule_modules() -> list[ModuleType]:
    """The target rules module of every op that brings one (:attr:`OpEntry.rules`)."""
    return _modules("rules")


def check_modules(model: Any) -> contextlib.ExitStack:
    """Every op's checks on a torch model (:attr:`OpEntry.module_checks`), undone when the stack is closed.

    Raises:
        ValueError: a module with bad arguments (the message names it); nothing stays installed.
    """
    stack = contextlib.ExitStack()
    try:
        for module in _modules("module_checks"):
            stack.enter_context(module.check_modules(model))
    except BaseException:
        stack.close()
        raise
    return stack


def file_node_domains() -> set[str]:
    """The non-default domains of every op's file nodes (``lower`` drops them from the imports once unused)."""
    return {domain for entry in OPS.values() for domain, _ in entry.onnx_nodes if domain not in ("", "ai.onnx")}


def check_method(method: str) -> None:
    """Raise ``ValueError`` naming the choices when ``method`` is not one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def resolve(op: str, method: str, opset: int, *, path_min_opset: int | None = None) -> Lowering:
    """The lowering of ``op`` (a key of :data:`OPS`) for ``method`` at ``opset``: the one method/opset check.

    ``auto`` is the first of the op's :attr:`OpEntry.auto` lowerings that the
    opset holds. ``path_min_opset``: the lowest opset the caller's export path
    reaches (e.g. 14 on the dynamo path); below it, the error suggests no other
    method, since none would work on that path either.

    Raises:
        ValueError: unknown method, an opset below the op's lowest, or a method
            whose ops the opset does not have (e.g. ``native`` below 19), naming the fix.
    """
    entry = OPS[op]
    check_method(method)
    if not isinstance(opset, int) or opset < entry.min_opset:
        raise ValueError(f"opset {opset!r} is not supported: {entry.title} lowers at opset >= {entry.min_opset}")
    if method == "auto":
        return next(entry.lowerings[n] for n in entry.auto if entry.lowerings[n].min_opset <= opset)
    lowering = entry.lowerings[entry.methods[method]]
    if opset < lowering.min_opset:
        usable = [m for m in METHODS[1:] if entry.lowerings[entry.methods[m]].min_opset <= opset]
        if path_min_opset is not None and opset < path_min_opset:
            usable = []  # no method works at this opset on the caller's path
        fix = (
            f"raise the opset or use one of: {', '.join(usable)}"
            if usable
            else f"raise the opset to {lowering.min_opset} or more"
        )
        raise ValueError(
            f"{entry.spells.format(method)} needs opset >= {lowering.min_opset} but opset {opset} was requested; {fix}"
        )
    return lowering


def model_method(method: str, opset: int, *, path_min_opset: int | None = None) -> str:
    """The method a whole model is lowered with at ``opset``: ``method``, or for ``auto`` the first of
    :data:`AUTO_METHODS` that every op holds there (grid_sample at 16+, gather below).

    Raises:
        ValueError: what :func:`resolve` raises for the first op (in :data:`OPS` order) that cannot hold it.
    """
    check_method(method)
    if method == "auto":
        method = next((m for m in AUTO_METHODS if lowest_opset(m) <= opset), AUTO_METHODS[-1])
    for op in OPS:
        resolve(op, method, opset, path_min_opset=path_min_opset)
    return method


def lowest_opset(method: str) -> int:
    """The lowest opset at which every op holds ``method`` (``auto``: every op's lowest)."""
    check_method(method)
    if method == "auto":
        return max(entry.min_opset for entry in OPS.values())
    return max(entry.lowerings[entry.methods[method]].min_opset for entry in OPS.values())
