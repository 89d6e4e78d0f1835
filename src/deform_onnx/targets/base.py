"""What a runtime target is: the graph it picks, the combinations it mishandles, the graph rules it needs.

A :class:`Target` picks a lowering ``method`` and an ``opset``; its
:class:`Fault` entries name (method, opset) combinations the runtime is known
to mishandle (checked before exporting), and its rules
(:mod:`deform_onnx.targets.rules`) are checked on the emitted graph, so a
model's own ops (a user's ``GridSample`` at opset 20 for TensorRT) are caught
too. Every entry carries a one-line reason and its source: a release note, an
issue number, or "measured here".
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import NamedTuple

import onnx


@dataclass(frozen=True)
class Fault:
    """A (method, opset) combination a runtime is known to mishandle.

    Attributes:
        what: the combination, e.g. ``"GridSample at opset >= 20"``.
        why: what the runtime does with it, with the source.
        hits: ``hits(lowering, opset) -> bool``: ``lowering`` is the name of the lowering :attr:`op`
            resolves the method to (never ``"auto"``); without an op, the method as given.
        fix: what to pass instead.
        op: the op (a key of :data:`deform_onnx.ops.registry.OPS`) whose lowering ``hits`` reads;
            ``None`` for a fault of the opset alone. A fault an op's rules module brings is that op's.
    """

    what: str
    why: str
    hits: Callable[[str, int], bool]
    fix: str
    op: str | None = None


class ClassMethod(NamedTuple):
    """A target's form for one shape class of an op, where it differs from the target's :attr:`Target.method`.

    Attributes:
        op: the op (a key of :data:`deform_onnx.ops.registry.OPS`).
        shape_class: the class of the op's calls (``deform_conv2d``: :mod:`deform_onnx.ops.deform_conv.classes`).
        method: the method its calls of that class take (a method of :data:`deform_onnx.ops.registry.METHODS`).
        reason, source: why (one line) and where that comes from, like :attr:`Target.reason` / :attr:`Target.source`.
    """

    op: str
    shape_class: str
    method: str
    reason: str = ""
    source: str = ""


@dataclass(frozen=True)
class Target:
    """One runtime target.

    Attributes:
        name: the ``target=`` / ``--target`` name.
        runtime: the runtime and build it stands for.
        method, opset: what it picks (explicit ``method``/``opset_version`` win).
        reason: why this pick, one line; ``source``: where that comes from.
        options: graph rules by name (see :data:`deform_onnx.targets.rules.RULES`),
            checked on every emitted graph.
        faults: combinations the runtime mishandles: a ``ValueError`` without ``force``.
        forms: graph forms it asks the lowerings for while they emit
            (:data:`deform_onnx.builder.forms.EMIT_FORMS`).
        status: ``"measured here"`` when a build of the runtime ran this graph here,
            else what it is read from.
        grid_sample: the ``GridSample`` forms beyond 4-D bilinear/nearest that the runtime runs
            correctly (:data:`GRID_SAMPLE_EXTRAS`: ``"5-D"``, ``"cubic"``); the other
            ``F.grid_sample`` calls get the gather form, and the rules ``no 5-D GridSample`` /
            ``no GridSample cubic`` check the graph (:attr:`rules`). Empty (not measured): gather for both.
        repairs: value-preserving rewrites of the exported graph, applied before the rules
            (:data:`deform_onnx.targets.repairs.REPAIRS`).
        needs: ``(model feature of`` :data:`deform_onnx.targets.needs.FEATURES` ``, the opset the
            runtime runs it from, why)`` entries: ``export`` picks that opset for a model with the feature when none
            was given, and refuses an explicit lower one (:func:`deform_onnx.targets.needs.for_model`).
        lacks: ``(model feature, why, fix)`` entries the runtime has no kernels for at any opset: ``export``
            refuses such a model with :class:`~deform_onnx.core.errors.MissingKernelError` (without ``force``).
        class_methods: :class:`ClassMethod` entries: the calls of an op in a shape class take that method
            instead of :attr:`method` (:mod:`deform_onnx.ops.class_methods`; filled from the measurements by
            :mod:`deform_onnx.targets.measured`); only when no ``method`` is given, and only where the opset
            holds it and no fault of the target hits it there.
    """

    name: str
    runtime: str
    method: str
    opset: int
    reason: str
    source: str
    options: tuple[str, ...] = ()
    faults: tuple[Fault, ...] = ()
    status: str = "read"
    forms: tuple[str, ...] = ()
    grid_sample: tuple[str, ...] = ()
    repairs: tuple[str, ...] = ()
    needs: tuple[tuple[str, int, str], ...] = ()
    lacks: tuple[tuple[str, str, str], ...] = ()
    class_methods: tuple[ClassMethod, ...] = ()

    @property
    def emit_forms(self) -> tuple[str, ...]:
        """:attr:`forms` and the forms that send 5-D / bicubic ``F.grid_sample`` calls it cannot run to gather."""
        extra = [form for kind, form in GRID_SAMPLE_EXTRAS.items() if kind not in self.grid_sample]
        return (*self.forms, *extra)

    @property
    def rules(self) -> tuple[str, ...]:
        """Every rule checked on a graph: :attr:`options`, the GridSample rules :attr:`grid_sample` implies and
        the rules the registered ops add for this target (their rules module's ``TARGET_RULES``).
        """
        extra = [GRID_SAMPLE_RULES[kind] for kind in GRID_SAMPLE_EXTRAS if kind not in self.grid_sample]
        extra += [r for _, module in _op_rules() for r in getattr(module, "TARGET_RULES", {}).get(self.name, ())]
        return tuple(dict.fromkeys((*self.options, *extra)))

    @property
    def all_faults(self) -> tuple[Fault, ...]:
        """:attr:`faults` and the faults the registered ops bring for this target (their rules module's
        ``FAULTS``, each tagged with its op): every fault checked before an export or a rewrite.
        """
        import dataclasses

        brought = [
            fault if fault.op is not None else dataclasses.replace(fault, op=entry)
            for entry, module in _op_rules()
            for fault in getattr(module, "FAULTS", {}).get(self.name, ())
        ]
        return (*self.faults, *brought)


def _op_rules() -> list[tuple[str, ModuleType]]:
    """``(op name, rules module)`` of every registered op that brings target rules (:attr:`OpEntry.rules`)."""
    import importlib

    from ..ops.registry import OPS

    return [(e.name, importlib.import_module(e.rules)) for e in OPS.values() if e.rules is not None]


#: GridSample kinds beyond 4-D bilinear/nearest -> the lowering form that avoids them
#: (:mod:`deform_onnx.builder.forms`) and the graph rule that finds them (:mod:`.rules`).
GRID_SAMPLE_EXTRAS = {"5-D": "GridSample 4-D only", "cubic": "no GridSample cubic"}
GRID_SAMPLE_RULES = {"5-D": "no 5-D GridSample", "cubic": "no GridSample cubic"}


@dataclass
class Choice:
    """A resolved target (or none): what to export, and the checks on the result.

    ``method``/``opset`` are the values to use (explicit ones, else the
    target's); ``dynamo`` is ``False`` when the target picked an opset below the
    dynamo exporter's range.
    """

    target: Target | None
    method: str
    opset: int | None
    dynamo: bool = True
    force: bool = False
    spec: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the target's :attr:`Target.class_methods` when the method is the target's own (none for an explicit one)
    class_methods: tuple[ClassMethod, ...] = ()

    def class_picks(self) -> tuple[ClassMethod, ...]:
        """The :attr:`class_methods` that hold at :attr:`opset` and that no fault of the target hits there."""
        from .hooks import _hits

        if self.target is None or self.opset is None:
            return ()
        picks = []
        for entry in self.class_methods:
            try:
                hit = any(
                    _hits(f, entry.method, self.opset) for f in self.target.all_faults if f.op in (None, entry.op)
                )
            except ValueError:  # a method some op cannot hold at this opset
                continue
            if not hit:
                picks.append(entry)
        return tuple(picks)

    @contextlib.contextmanager
    def emitting(self) -> Iterator[None]:
        """A context in which the lowerings emit the target's forms (a no-op without a target).

        With a target or method ``auto``, ``"gather where GridSample cannot"`` too: a ``F.grid_sample``
        call that the chosen opset cannot hold as GridSample (5-D below 20) takes the gather form
        (``export`` resolves ``auto`` per model before the exporters see it; this keeps it per call).
        The target's per-class methods (:meth:`class_picks`) are in force too
        (:func:`deform_onnx.ops.class_methods.class_methods`).
        """
        from ..builder.forms import graph_forms
        from ..ops.class_methods import class_methods

        forms = self.target.emit_forms if self.target is not None else ()
        if self.target is not None or self.method == "auto":
            forms = (*forms, "gather where GridSample cannot")
        with graph_forms(forms), class_methods(self.class_picks()):
            yield

    def repair_graph(self, model: onnx.ModelProto) -> list[str]:
        """Apply the target's :attr:`Target.repairs` to ``model`` in place; one line per change (none without a target)."""
        from .repairs import REPAIRS

        done: list[str] = []
        for name in self.target.repairs if self.target is not None else ():
            done += REPAIRS[name](model)
        return done

    def check_graph(self, model: onnx.ModelProto) -> list[str]:
        """Check ``model`` against the target's rules.

        Returns:
            The violations (one line each); empty when it passes or without a target.

        Raises:
            ValueError: a violation, without ``force`` (with it: a ``UserWarning`` each).
        """
        from .rules import violations

        if self.target is None:
            return []
        found = violations(model, self.target.rules)
        if found and not self.force:
            raise ValueError(
                f"target {self.target.name!r}: {found[0]}; pass force=True (CLI: --force) to write it anyway"
            )
        for v in found:
            warnings.warn(f"deform_onnx: target {self.target.name!r}: {v}", stacklevel=4)
        return found
