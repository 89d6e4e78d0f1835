"""Dynamic sizes that the model's own code fixes: found before the dynamo exporter writes a wrong file.

``torch.export`` records a guard for every condition the traced code placed
on a symbolic size (``1 + (H - 1) // 32 == 4`` when transformers' RT-DETR
turns a level's size into a Python number for its anchors). torch's ONNX
exporter (torch 2.14) keeps H and W symbolic in the file but drops those
guards (its decomposition re-traces with a fresh shape environment; checked),
so the file runs at other sizes and is wrong there, or fails on a broadcast;
``deform_onnx.export`` verifies at the example size only and cannot see it.
:func:`checked_program` captures the model the way torch's ONNX exporter does (its
``strict=False`` strategy, same dynamic dimensions) and refuses guards that fail at larger
sizes; the caller then falls back to the TorchScript exporter. The program it captured goes on
to ``torch.onnx.export``, which then translates it without capturing the model a second time.
"""

from __future__ import annotations

import inspect
import math

import torch

_BUILTINS = {"max": max, "min": min, "abs": abs, "int": int, "float": float, "round": round, "bool": bool}


class FixedDynamicSize(RuntimeError):
    """The model's code fixes a size that was asked to be dynamic (the message quotes torch's guard)."""


class _Sized:
    """What a guard's ``L['x']`` reads: sizes (grown on the dynamic axes) and contiguous strides."""

    def __init__(self, shape):
        self._shape = tuple(shape)

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    def stride(self, dim=None):
        strides: list[int] = []
        step = 1
        for n in reversed(self._shape):
            strides.insert(0, step)
            step *= max(n, 1)
        return tuple(strides) if dim is None else strides[dim]

    def storage_offset(self):
        return 0

    def dim(self):
        return len(self._shape)


def checked_program(
    model: torch.nn.Module, args: tuple, dynamic_shapes, notes: list[str] | None = None, *, capture=None
) -> tuple[torch.export.ExportedProgram | None, list[str]]:
    """Capture the model with dynamic sizes; raise :class:`FixedDynamicSize` when its code fixes one of them.

    Args:
        model, args: as given to the exporter (tensors, positional).
        dynamic_shapes: ``torch.export`` dynamic shapes, one entry per positional input
            (``None`` or ``{axis: Dim}``), e.g. from TorchScript-style ``dynamic_axes``.

    A guard counts when it holds for the example but fails both with every
    dynamic axis 32 larger and with every dynamic axis doubled (so neither a
    size range such as ``H >= 2`` nor a multiple-of-32 condition counts).
    Guards are torch's own Python text over the inputs' sizes. A capture that
    fails here is never skipped silently: a line saying so goes to ``notes``
    (the export's report), and the second-size check of :func:`deform_onnx.export`
    decides whether the file holds at other sizes.

    ``capture``: ``(args, kwargs, dynamic_shapes)`` in the form torch's ONNX exporter passes to
    ``torch.export`` (its conversion of ``dynamic_axes``; default: ``args`` and ``dynamic_shapes`` as
    given). The capture is torch's ONNX exporter's own first strategy (``strict=False``, sizes 0 and 1
    not specialised), so that the program can go on to ``torch.onnx.export`` in place of the model.

    Returns:
        the program captured (``None`` when the capture failed) and the guards torch.export recorded
        (Python text), for naming the guard that fixed a dimension the file keeps static; empty when
        the capture failed.

    Raises:
        FixedDynamicSize: quoting the guard and naming ``dynamo=False`` as the way out.
    """
    from torch.onnx import _flags
    from torch.onnx._internal.exporter import _capture_strategies

    capture_args, capture_kwargs, capture_shapes = capture or (args, {}, dynamic_shapes)
    strategy = _capture_strategies.TorchExportNonStrictStrategy(verbose=False)
    # torch's ONNX exporter turns guards into runtime asserts in the graph (which the file then drops);
    # here they stay guards, as Python text to test (the file's graph is the same without the asserts)
    deferred = _flags.PREFER_DEFERRED_RUNTIME_ASSERTS_OVER_GUARDS
    _flags.PREFER_DEFERRED_RUNTIME_ASSERTS_OVER_GUARDS = False
    try:
        result = strategy(model, tuple(capture_args), capture_kwargs, dynamic_shapes=capture_shapes)
        if result.exported_program is None:
            raise result.exception or RuntimeError("torch.export returned no program")
        program = result.exported_program
    except Exception as exc:  # noqa: BLE001 - the exporter's own capture reports it; say that this check did not run
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        if notes is not None:
            notes.append(
                f"the guard check could not capture the model ({type(exc).__name__}: {text}); "
                "the second-size check decides whether the file holds at other sizes"
            )
        return None, []
    finally:
        _flags.PREFER_DEFERRED_RUNTIME_ASSERTS_OVER_GUARDS = deferred
    guards = list(getattr(program, "_guards_code", []))  # private: torch 2.14's guards as Python text
    names = parameter_names(model, len(args))
    if not guards or names is None:
        if notes is not None and names is None:
            notes.append("the guard check could not name forward's inputs; the second-size check decides")
        return program, guards
    grown = [
        _frame(names, args, dynamic_shapes, lambda n: n + 32),
        _frame(names, args, dynamic_shapes, lambda n: 2 * n),
    ]
    example = _frame(names, args, dynamic_shapes, lambda n: n)
    for guard in guards:
        if _holds(guard, example) is True and all(_holds(guard, frame) is False for frame in grown):
            raise FixedDynamicSize(
                f"the model's code fixes a dynamic size: torch.export recorded `{guard}` for the example "
                "input, which the ONNX file cannot check, so it would be wrong at other sizes"
            )
    return program, guards


def parameter_names(model, n: int) -> list[str] | None:
    """The names of ``forward``'s first ``n`` positional parameters (the guards' ``L[...]`` keys), or ``None``."""
    try:
        params = [
            p.name
            for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None
    return params[:n] if len(params) >= n else None


def _frame(names, args, dynamic_shapes, grow) -> dict:
    frame = {}
    for i, (name, arg) in enumerate(zip(names, args)):
        if isinstance(dynamic_shapes, dict):
            axes = dynamic_shapes.get(name)
        else:
            axes = dynamic_shapes[i] if i < len(dynamic_shapes) else None
        if isinstance(axes, (list, tuple)):  # per-axis form: a Dim or None for each axis
            axes = {a for a, d in enumerate(axes) if d is not None}
        if isinstance(arg, torch.Tensor):
            axes = axes or {}
            frame[name] = _Sized(grow(n) if a in axes else n for a, n in enumerate(arg.shape))
    return frame


def _holds(guard: str, frame: dict) -> bool | None:
    """The guard's truth with ``L`` = ``frame``; ``None`` when it reads something else (weights, values)."""
    try:
        # torch writes these guards as Python over L['name'].size()/stride(); nothing else is in scope.
        return bool(eval(guard, {"__builtins__": _BUILTINS, "math": math}, {"L": frame}))
    except Exception:  # noqa: BLE001
        return None
