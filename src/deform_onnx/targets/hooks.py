"""The small hooks that ``export()``, ``lower()`` and the CLI call: resolve a target into a :class:`Choice`."""

from __future__ import annotations

import warnings

from .base import Choice, Fault, Target


def _hits(fault: Fault, method: str, opset: int) -> bool:
    """Whether ``fault`` hits ``method`` at ``opset``: on the lowering its op resolves the method to."""
    from ..ops.registry import resolve

    return fault.hits(resolve(fault.op, method, opset).name if fault.op is not None else method, opset)


def _check_faults(target: Target, method: str, opset: int, force: bool) -> None:
    from ..ops.registry import model_method

    model_method(method, opset)  # raises for unknown methods / opsets some op cannot hold
    for fault in target.all_faults:
        if _hits(fault, method, opset):
            text = f"target {target.name!r} mishandles {fault.what}: {fault.why}; {fault.fix}"
            if not force:
                raise ValueError(f"{text} (force=True / --force writes it anyway)")
            warnings.warn(f"deform_onnx: {text}", stacklevel=4)


def _lowest_opset(method: str) -> int:
    """The lowest opset every op holds ``method`` at (an unknown method: 0, :func:`_check_faults` names it)."""
    from ..ops.registry import METHODS, lowest_opset

    return lowest_opset(method) if method in METHODS else 0


def _method_at(target: Target, method: str | None, opset: int | None) -> str:
    """``method``, or the target's method; where the user asked only an opset below what the target's method
    needs (``target="tvm", opset_version=11``: grid_sample needs 16), the first of ``auto``'s methods that
    holds at that opset and that the target does not mishandle (gather there).
    """
    from ..ops.registry import AUTO_METHODS

    if method is not None or opset is None or _lowest_opset(target.method) <= opset:
        return method or target.method
    for candidate in AUTO_METHODS:
        if _lowest_opset(candidate) <= opset and not any(_hits(f, candidate, opset) for f in target.all_faults):
            return candidate
    return target.method  # none holds: the target's own, refused with its reason


def for_export(
    target: str | Target | None, method: str | None, opset: int | None, dynamo: bool, force: bool = False
) -> Choice:
    """What :func:`deform_onnx.export` uses: explicit ``method``/``opset`` win over the target's.

    When the target picked an opset below the dynamo exporter's range (e.g.
    ``generic``: gather at 11), the TorchScript exporter is used.

    Raises:
        ValueError: unknown target, or a combination it mishandles (without ``force``).
    """
    if target is None:
        return Choice(None, method or "auto", opset, dynamo, force)
    from . import resolve_target

    t = resolve_target(target)
    chosen_opset = opset if opset is not None else (t.opset if method is None or method == t.method else None)
    chosen_method = _method_at(t, method, opset)
    if chosen_opset is None:  # the user's method with the target's opset when that holds it
        chosen_opset = max(t.opset, _lowest_opset(chosen_method))
    if opset is None and dynamo:
        from ..exporters.dynamo import MIN_OPSET as DYNAMO_MIN

        if chosen_opset < DYNAMO_MIN:
            dynamo = False
    _check_faults(t, chosen_method, chosen_opset, force)
    picks = t.class_methods if method is None else ()  # an explicit method is every call's form
    return Choice(t, chosen_method, chosen_opset, dynamo, force, spec=str(target), class_methods=picks)


def for_lower(
    target: str | Target | None, method: str | None, opset: int | None, model_opset: int | None, force: bool = False
) -> Choice:
    """What :func:`deform_onnx.lower` uses: the model's opset is kept when the target's method holds there.

    Raises:
        ValueError: unknown target, or a combination it mishandles (without ``force``).
    """
    if target is None:
        return Choice(None, method or "auto", opset, True, force)
    from . import resolve_target

    t = resolve_target(target)
    chosen_method = _method_at(t, method, opset)
    chosen_opset = opset
    if chosen_opset is None:
        from ..ops.registry import METHODS

        lowest = _lowest_opset(chosen_method)
        keep = model_opset is not None and chosen_method in METHODS[1:] and model_opset >= lowest
        if keep and not any(_hits(f, chosen_method, model_opset) for f in t.all_faults):  # type: ignore[arg-type]  # keep: model_opset is not None
            chosen_opset = model_opset
        else:
            chosen_opset = max(t.opset, lowest)
    _check_faults(t, chosen_method, chosen_opset, force)  # type: ignore[arg-type]  # set above
    picks = t.class_methods if method is None else ()  # an explicit method is every call's form
    return Choice(t, chosen_method, chosen_opset, True, force, spec=str(target), class_methods=picks)


def for_check(path, target: str | Target, method: str | None, force: bool = False) -> tuple[list[str], str]:
    """What ``deform-onnx check --target`` uses: notes on the file as is and the method for the lowered paths.

    Returns:
        ``(notes, method)``: one note per rule the file as is breaks (or one saying it passes).

    Raises:
        ValueError: unknown target, or a method the target mishandles (without ``force``).
    """
    import onnx

    from . import resolve_target
    from .rules import violations

    t = resolve_target(target)
    model = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    choice = for_lower(t, method, None, opset, force)
    found = violations(model, t.rules)
    found += _native_nodes_refused(model, t, opset)
    notes = [f"{t.name}: the file as is breaks {v}" for v in found] or [f"{t.name}: the file as is passes its rules"]
    # a node takes a class form only where its shapes put it in the class (a static batch): the path's label
    # names the forms the lowering wrote (runtimes.run_paths)
    picks = "".join(f"; {c.method} where a node is {c.shape_class} (static shapes)" for c in choice.class_methods)
    notes.append(f"{t.name}: lowered paths use {choice.method}{picks} (target picks {t.method}@{t.opset}; {t.reason})")
    return notes, choice.method


def _native_nodes_refused(model, t: Target, opset: int | None) -> list[str]:
    """One line per op native form (``DeformConv``, ``GridSample``) the file holds and the target refuses."""
    from ..ops.registry import OPS

    lines = []
    for entry in OPS.values():
        for lowering in entry.lowerings.values():
            count = sum(n.op_type == lowering.node and n.domain in ("", "ai.onnx") for n in model.graph.node)
            if lowering.node is None or not count:
                continue
            at = opset or lowering.min_opset
            refused = [f for f in t.all_faults if f.op == entry.name and f.hits(lowering.name, at)]
            lines += [f"{count} {lowering.node} node(s): {f.why}" for f in refused[:1]]
    return lines
