"""The small hooks that ``export()``, ``lower()`` and the CLI call: resolve a target into a :class:`Choice`."""

from __future__ import annotations

import warnings

from .base import Choice, Target


def _check_faults(target: Target, method: str, opset: int, force: bool) -> None:
    from ..ops.registry import resolve_method

    concrete = resolve_method(method, opset).name  # raises for unknown methods / too-low opsets
    for fault in target.faults:
        if fault.hits(concrete, opset):
            text = f"target {target.name!r} mishandles {fault.what}: {fault.why}; {fault.fix}"
            if not force:
                raise ValueError(f"{text} (force=True / --force writes it anyway)")
            warnings.warn(f"deform_onnx: {text}", stacklevel=4)


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
    chosen_method = method or t.method
    if chosen_opset is None:  # the user's method with the target's opset when that holds it
        from ..ops.registry import LOWERINGS

        lowest = LOWERINGS[chosen_method].min_opset if chosen_method in LOWERINGS else t.opset
        chosen_opset = max(t.opset, lowest)
    if opset is None and dynamo:
        from ..exporters.dynamo import MIN_OPSET as DYNAMO_MIN

        if chosen_opset < DYNAMO_MIN:
            dynamo = False
    _check_faults(t, chosen_method, chosen_opset, force)
    return Choice(t, chosen_method, chosen_opset, dynamo, force, spec=str(target))


def for_lower(
    target: str | Target | None, method: str | None, opset: int | None, model_opset: int | None, force: bool = False
) -> Choice:
    """What :func:`deform_onnx.lower` uses: the model's opset is kept when the target's method holds there.

    Raises:
        ValueError: unknown target, or a combination it mishandles (without ``force``).
    """
    if target is None:
        return Choice(None, method or "auto", opset, True, force)
    from ..ops.registry import LOWERINGS
    from . import resolve_target

    t = resolve_target(target)
    chosen_method = method or t.method
    chosen_opset = opset
    if chosen_opset is None:
        keep = (
            model_opset is not None and chosen_method in LOWERINGS and model_opset >= LOWERINGS[chosen_method].min_opset
        )
        if keep and not any(f.hits(chosen_method, model_opset) for f in t.faults):  # type: ignore[arg-type]  # keep: model_opset is not None
            chosen_opset = model_opset
        else:
            chosen_opset = max(t.opset, LOWERINGS[chosen_method].min_opset) if chosen_method in LOWERINGS else t.opset
    _check_faults(t, chosen_method, chosen_opset, force)  # type: ignore[arg-type]  # set above
    return Choice(t, chosen_method, chosen_opset, True, force, spec=str(target))


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
    deform = sum(n.op_type == "DeformConv" for n in model.graph.node)
    refused = [f for f in t.faults if f.hits("native", opset or 19)] if deform else []
    found += [f"{deform} DeformConv node(s): {f.why}" for f in refused[:1]]
    notes = [f"{t.name}: the file as is breaks {v}" for v in found] or [f"{t.name}: the file as is passes its rules"]
    notes.append(f"{t.name}: lowered paths use {choice.method} (target picks {t.method}@{t.opset}; {t.reason})")
    return notes, choice.method
