"""Each target's default form: the fastest correct form measured on its runtime (issue 38 item 1).

``scripts/runtime_venvs.py bench`` converts and runs a DCNv2 layer's forms (``native``, ``grid_sample``,
``gather``) and a dense ``Conv`` of the same shape with each deployed family's own converter and runtime,
interleaved in one run, and writes what it measured to :data:`deform_onnx.targets.fastest.DATA` (the run's
date, machine and load; per target, per form, per shape: median ms, or why it did not run). Here a target's
forms are ranked by the geometric mean, over the shapes where any form ran, of each form's time over the
family's own dense ``Conv`` (the floor there). The target's default method becomes the fastest form that

* ran correctly (within 1e-4 of PyTorch) on every one of those shapes,
* no fault of the target hits at its opset (:attr:`~deform_onnx.targets.base.Target.all_faults`), and
* none of the target's graph rules refuses outright (``no DeformConv``: native; ``no GridSample``:
  grid_sample; ``ncnn blobs``: gather, whose 6-D values fit no ncnn blob),

and beats the table's own pick on every one of those shapes and by more than :data:`MARGIN` in the geomean
(one run on a shared machine: a form that close, or faster on some shapes only, keeps the table's pick). Otherwise, and where nothing was measured, the table's pick stands. Every other form
stays available by ``method=``.

Per shape class of the op the bench's layer calls (the data's ``"op"``; its registry entry's
:attr:`~deform_onnx.ops.registry.OpEntry.shape_classes`, e.g. :mod:`deform_onnx.ops.deform_conv.classes`: each
benchmark shape's label gives its class, ``"4x64x32"`` is ``batch > 1``), the target also gets the fastest form of that class's shapes
(:attr:`~deform_onnx.targets.base.Target.class_methods`, :func:`class_methods`) when that form

* ran correctly on every shape of the class (and the default form did too),
* was measured at the target's own opset (a per-class form never raises the file's opset: ``tflite``'s
  gather default is opset 13, its grid_sample row was measured at 16, so no class of ``tflite`` takes it),
* is refused by no fault or rule at that opset (as above), and
* beats the default form by more than :data:`MARGIN` on every shape of the class.

Those calls then take that form; the rest of the file keeps the default, and an explicit ``method=`` is
every call's form.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .base import ClassMethod, Target

#: A measured form replaces the table's pick only when the pick is more than this many times slower.
MARGIN = 1.25
#: Graph rules that refuse a method's form outright, whatever the model (the rule is still checked on the graph).
RULE_REFUSES: dict[str, str] = {"no DeformConv": "native", "no GridSample": "grid_sample", "ncnn blobs": "gather"}


def _data() -> Mapping[str, Any]:
    from .fastest import DATA

    return DATA


@dataclasses.dataclass(frozen=True)
class Ranked:
    """One form of one target as measured: ``ratio`` is the geomean of its time over the family's dense Conv."""

    method: str
    opset: int
    ratio: float
    fastest_on: tuple[str, ...]
    #: its time over the dense Conv on each shape of the ranking, in the data's order
    ratios: tuple[float, ...] = ()


def _refused(target: Target, method: str, opset: int) -> bool:
    from .hooks import _hits

    if any(RULE_REFUSES.get(rule) == method for rule in target.rules):
        return True
    return any(_hits(fault, method, opset) for fault in target.all_faults)


def ranking(target: Target, data: Mapping[str, Any] | None = None) -> list[Ranked]:
    """The measured forms ``target`` allows, fastest first (empty: nothing measured for it).

    A form counts only when it ran correctly on every shape where some form of the target ran.
    """
    from ..ops.registry import METHODS

    data = _data() if data is None else data
    forms = dict(data.get("targets", {}).get(target.name, {}))
    dense = forms.pop(data.get("dense", "dense Conv"), None)
    if not dense:
        return []
    shapes = [s for s in data.get("shapes", []) if any((f.get("ms") or {}).get(s) for f in forms.values())]
    shapes = [s for s in shapes if (dense.get("ms") or {}).get(s)]
    if not shapes:
        return []
    fastest = {s: min((f["ms"][s], m) for m, f in forms.items() if (f.get("ms") or {}).get(s))[1] for s in shapes}
    ranked = []
    for method, form in forms.items():
        ms = form.get("ms") or {}
        opset = form.get("opset")
        if method not in METHODS or opset is None or not all(ms.get(s) for s in shapes):
            continue
        if _refused(target, method, opset):
            continue
        ratios = tuple(ms[s] / dense["ms"][s] for s in shapes)
        ratio = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        ranked.append(Ranked(method, opset, ratio, tuple(s for s in shapes if fastest[s] == method), ratios))
    return sorted(ranked, key=lambda r: r.ratio)


def apply(target: Target, data: Mapping[str, Any] | None = None) -> Target:
    """``target`` with its measured fastest correct form as its default and its per-class forms (see the module
    docstring).
    """
    data = _data() if data is None else data
    chosen = _default(target, data)
    picks = class_methods(chosen, data)
    return dataclasses.replace(chosen, class_methods=(*chosen.class_methods, *picks)) if picks else chosen


def class_methods(target: Target, data: Mapping[str, Any] | None = None) -> tuple[ClassMethod, ...]:
    """Per shape class of the measured shapes, the form that beats ``target``'s own method there (module docstring).

    ``target`` is read with the default it has (call it with :func:`apply`'s result, as :func:`apply` does).
    """
    import importlib

    from ..ops.registry import METHODS, OPS

    data = _data() if data is None else data
    named = data.get("op")  # the op the bench's layer calls
    entry = OPS.get(named) if isinstance(named, str) else None
    if entry is None or entry.shape_classes is None:
        return ()
    op = entry.name
    classes = importlib.import_module(entry.shape_classes)
    forms = dict(data.get("targets", {}).get(target.name, {}))
    dense = (forms.pop(data.get("dense", "dense Conv"), None) or {}).get("ms") or {}
    default = forms.get(target.method)
    if not dense or default is None or default.get("opset") != target.opset:
        return ()
    by_class: dict[str, list[str]] = {}
    for label in data.get("shapes", []):
        cls = classes.label_class(label)
        if cls is not None:
            by_class.setdefault(cls, []).append(label)
    when = f"scripts/runtime_venvs.py bench, {data.get('date', '?')}"
    picks = []
    order = list(classes.CLASSES)
    for cls in sorted(by_class, key=lambda c: order.index(c) if c in order else len(order)):
        shapes = by_class[cls]
        base = _times(default, shapes)
        if base is None or not all(dense.get(s) for s in shapes):
            continue
        found = []
        for method, form in forms.items():
            ms = _times(form, shapes)
            if method == target.method or method not in METHODS[1:] or form.get("opset") != target.opset:
                continue
            if ms is None or not _holds(op, method, target.opset) or _refused(target, method, target.opset):
                continue
            if all(m * MARGIN < b for m, b in zip(ms, base, strict=True)):
                found.append((_geomean([m / dense[s] for m, s in zip(ms, shapes, strict=True)]), method))
        if found:
            ratio, method = min(found)
            was = _geomean([b / dense[s] for b, s in zip(base, shapes, strict=True)])
            reason = (f"measured fastest on {', '.join(shapes)}: {ratio:.2f}x its own dense Conv, the default "
                      f"{target.method} {was:.2f}x, more than {MARGIN:.2f}x slower on each")  # fmt: skip
            picks.append(ClassMethod(op, cls, method, reason, when))
    return tuple(picks)


def _times(form: Mapping[str, Any], shapes: list[str]) -> list[float] | None:
    """The form's ms on each of ``shapes``; ``None`` unless it ran correctly on every one."""
    ms = [(form.get("ms") or {}).get(s) for s in shapes]
    return [float(m) for m in ms if m] if all(ms) else None


def _holds(op: str, method: str, opset: int) -> bool:
    from ..ops.registry import resolve

    try:
        resolve(op, method, opset)
    except ValueError:
        return False
    return True


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _default(target: Target, data: Mapping[str, Any]) -> Target:
    """``target`` with its measured fastest correct form as its default (the first half of :func:`apply`)."""
    ranked = ranking(target, data)
    if not ranked:
        return target
    best = ranked[0]
    table_pick = next((r for r in ranked if r.method == target.method), None)
    when = f"scripts/runtime_venvs.py bench, {data.get('date', '?')}"
    everywhere = table_pick is not None and all(b < t for b, t in zip(best.ratios, table_pick.ratios, strict=True))
    if table_pick is None or best.method == target.method or table_pick.ratio <= best.ratio * MARGIN or not everywhere:
        if table_pick is None:  # the table's own pick was not measured correct here: keep it, say nothing new
            return target
        others = ", ".join(f"{r.method} {r.ratio:.2f}x" for r in ranked if r is not table_pick)
        note = f"measured here: {table_pick.ratio:.2f}x its own dense Conv" + (f" ({others})" if others else "")
        if best.method != target.method:
            why = ("not faster on every shape" if table_pick.ratio > best.ratio * MARGIN
                   else f"not faster by {MARGIN:.2f}x in the geomean")  # fmt: skip
            note += f"; kept: {best.method} {why}"
        return dataclasses.replace(target, reason=f"{note}; {target.reason}", source=f"{target.source}; {when}")
    others = ", ".join(f"{r.method} {r.ratio:.2f}x" for r in ranked[1:])
    note = (f"measured fastest here, {best.ratio:.2f}x its own dense Conv ({others}; the table's {target.method} "
            f"{table_pick.ratio / best.ratio:.2f}x slower)")  # fmt: skip
    mixed = [s for r in ranked[1:] for s in r.fastest_on]
    if mixed:
        note += f"; not the fastest on {', '.join(mixed)}"
    return dataclasses.replace(
        target,
        method=best.method,
        opset=best.opset,
        reason=f"{note}; {target.reason}",
        source=f"{target.source}; {when}",
        status="measured here",
    )
