"""What the torch.export formats share: the exported, decomposed program; settings; quiet runtimes; proof.

ExecuTorch (``.pte``), LiteRT (``.tflite``) and Core ML (``.mlpackage``) all start from
``torch.export.export(model, args)`` rewritten by :func:`deform_onnx.decompositions` into core ATen ops
(:func:`exported`). A file is run in its own runtime through a session object with the part of
ONNX Runtime's API that :func:`deform_onnx.exporting.verification.verify` uses, so its outputs are
checked against PyTorch eager with the same tolerances and rules as an ONNX file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..core.errors import ExportError, VerificationError
from ..exporting.api import ExportReport
from ..exporting.api import _eval_mode as eval_mode
from ..exporting.verification import Verified, verify

__all__ = [
    "Named",
    "SizeSet",
    "check_inputs",
    "check_settings",
    "eval_mode",
    "exported",
    "plan_sizes",
    "prove",
    "quiet",
    "report_for",
    "resolved",
]

#: export()'s keyword arguments and their defaults; the formats take the ones in their ``TAKEN``.
DEFAULTS: dict[str, Any] = {
    "opset_version": None,
    "method": None,
    "dynamo": True,
    "input_names": None,
    "output_names": None,
    "dynamic_shapes": None,
    "dynamic_axes": None,
    "verify": True,
    "rtol": None,
    "atol": None,
    "fallback": True,
    "target": None,
    "force": False,
    "ir_version": None,
    "verify_shapes": None,
    "verify_runtimes": None,
    "keep_artifacts": None,
    "precision": None,
}
#: What a setting means instead, for the one-line refusal.
_INSTEAD = {
    "dynamic_axes": "pass dynamic_shapes= (torch.export Dims) instead",
    "opset_version": "it is an ONNX setting",
    "ir_version": "it is an ONNX setting",
    "dynamo": "these formats always start from torch.export",
    "target": "targets name ONNX runtimes",
    "verify_runtimes": "the deployed runtimes run ONNX files (this file ran in its own runtime)",
    "keep_artifacts": "the deployed runtimes' artifacts come from ONNX files",
}


def check_settings(title: str, settings: dict, taken: tuple[str, ...]) -> dict:
    """``settings`` with defaults filled in; a one-line ``ValueError`` for one the format does not take.

    Raises:
        ValueError: an unknown keyword, or a non-default value of one that means nothing for ``title``.
    """
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"export() got unexpected keyword argument(s) {', '.join(unknown)}")
    for name, value in settings.items():
        if name not in taken and value != DEFAULTS[name]:
            why = _INSTEAD.get(name, "it means nothing for this format")
            raise ValueError(f"{name}= is not taken when writing {title} files: {why}")
    return {**DEFAULTS, **settings}


def prepare(title: str, settings: dict, taken: tuple[str, ...], path, args, auto: str) -> tuple[dict, tuple, str]:
    """The checks a file writer makes before any work: its settings, a path (not a file object) in a writable
    folder; returns ``(settings with defaults, args as a tuple, the method with "auto" resolved to ``auto``)``.

    Raises:
        ValueError: a setting the format does not take, or a file object for ``path``.
    """
    from ..core.atomic_io import check_output_path

    opts = check_settings(title, settings, taken)
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"{title} files are written to a path, not a file object")
    check_output_path(path)
    args = args if isinstance(args, tuple) else (args,)
    check_inputs(title, args)
    return opts, args, resolved(opts["method"], auto)


def resolved(method: str | None, auto: str) -> str:
    """``method`` with ``None``/``"auto"`` resolved to the format's ``auto`` form (what the report names)."""
    return auto if method in (None, "auto") else method


def check_inputs(title: str, args: tuple) -> None:
    """A one-line ``ValueError`` for an input a torch.export format cannot take, before any work.

    int64 (and other integer, bool, float16/32/64) tensors are inputs of the program like any other.

    Raises:
        ValueError: a Python number (torch.export bakes it into the program as a constant, so the file
            has no such input) or a bfloat16 tensor (the runtimes' Python APIs here take no bfloat16
            inputs), anywhere in ``args`` (nested tuples, lists and dicts included).
    """
    from torch.utils._pytree import tree_leaves

    for i, a in enumerate(tree_leaves(args)):
        if isinstance(a, bool | int | float):
            raise ValueError(
                f"{title}: input {i} is a Python number ({a!r}); torch.export bakes it into the program as a "
                f"constant, so the file would have no such input: pass torch.tensor({a!r}) or fix it in the model"
            )
        if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16:
            raise ValueError(
                f"{title}: input {i} is bfloat16, which the file's runtime here cannot be fed; write it in float32 "
                "or float16 (model.float() / .half() with the inputs), or export to .onnx (opset 22 bfloat16)"
            )


@contextlib.contextmanager
def quiet() -> Iterator[list[str]]:
    """Send the C++ runtimes' console noise (cpuinfo lines, converter progress) to a temporary file.

    Redirects file descriptors 1 and 2 inside the block; yields a list that gets the captured lines
    (for an error message: :func:`first_error`).
    """
    lines: list[str] = []
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        for stream in ("stdout", "stderr"):
            with contextlib.suppress(Exception):
                getattr(__import__("sys"), stream).flush()
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            for stream in ("stdout", "stderr"):
                with contextlib.suppress(Exception):
                    getattr(__import__("sys"), stream).flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            lines.extend(sink.read().decode("utf-8", "replace").splitlines())


def first_error(lines: list[str]) -> str | None:
    """The first line of captured output that reads as an error, if any."""
    return next((ln.strip() for ln in lines if "error" in ln.lower() and "deprecated" not in ln.lower()), None)


def _one_line(exc: BaseException) -> str:
    """The first line of ``exc``; for torch.export's "Constraints violated (H)!" (whose first line says only "run
    with TORCH_LOGS") the line that says why: the constant the code fixes ``H`` to, else the first guard it breaks.
    """
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    first = lines[0]
    if first.startswith("Constraints violated"):
        why = [line.strip(" -") for line in lines[1:] if line.strip().startswith("- ")]
        why.sort(key=lambda line: "specialized" not in line)  # "... specialized it to be a constant (16)" first
        if why:
            first = f"{first.split('!')[0]}: {why[0]}"
    return first[:300]


def exported(
    model,
    args: tuple,
    dynamic_shapes,
    method: str,
    title: str,
    core: bool = True,
    notes: list[str] | None = None,
    extra: dict | None = None,
):
    """``torch.export.export(model, args)`` with the family rewritten by :func:`deform_onnx.decompositions`.

    Node provenance is shared, not deep-copied, meanwhile (:func:`.provenance.shared_provenance`).
    The model is captured by the ONNX path's strategies (:func:`.capture.capture`: non-strict with the
    size rewrites, then ``strict=True``); ``notes`` (a list) gets one line saying which strategy captured it.
    ``core``: decompose the rest into core ATen ops too; ``False`` leaves the rest to the backend's own
    lowering (ExecuTorch: its XNNPACK recomposition of ``linear`` fails on a program already decomposed
    to core ATen ops, measured on 4-D ``nn.Linear`` inputs: DCNv3, Deformable DETR). ``extra``: the format's own
    entries on top (``{OpOverload: fn}``).

    Raises:
        ExportError: no strategy captures the model (each one's first line; a dynamic dimension the model
            fixes is named by torch.export), or an op no decomposition covers is left (named, with the format
            and what to do).
    """
    from .capture import capture, drop_aliases
    from .decompose import decompositions
    from .provenance import shared_provenance
    from .tidy import tidy

    table = {**decompositions(method, core=core), **(extra or {})}
    with shared_provenance():
        captured = capture(model, args, dynamic_shapes, title)
        if notes is not None:
            notes.append(captured.note())
        ep = captured.program
        try:
            ep = ep.run_decompositions(table)
        except Exception as exc:
            raise ExportError(f"decomposing the model for {title} failed: {_one_line(exc)}") from exc
    drop_aliases(ep)
    tidy(ep)
    left = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function" and _foreign(n.target)})
    if left:
        raise ExportError(
            f"{title}: the model holds {', '.join(left)}, which no decomposition of deform_onnx covers and "
            f"{title} has no kernel for; rewrite that part in core ATen ops, or export to .onnx instead"
        )
    return ep


def _foreign(target) -> bool:
    """Whether a graph call is a custom (non-ATen) op, which no edge runtime has."""
    namespace = getattr(target, "namespace", None)
    return namespace is not None and namespace not in ("aten", "prims")


@dataclass
class SizeSet:
    """One input set a file is proven at: the arguments, their tensor shapes and what the size is.

    ``label``: ``"example"``, ``"second size"`` (:func:`deform_onnx.exporting.sizes.second_inputs`),
    ``"given size"`` (``verify_shapes=``), ``"lower bound"`` or ``"upper bound"``
    (:func:`deform_onnx.exporting.sizes.bound_inputs`).
    """

    args: tuple
    shapes: list[tuple[int, ...]]
    label: str


def plan_sizes(model, args: tuple, dynamic_shapes, verify_shapes=None, verify: bool = True) -> list[SizeSet]:
    """The input sets a torch.export format's file is proven at, chosen as the ONNX path chooses them.

    The example; with dynamic dimensions, the second size of :mod:`deform_onnx.exporting.sizes` (each
    dynamic axis moved by its own amount, a square example made non-square, inputs rebuilt from the
    user's own; or the ``verify_shapes`` given), then every declared ``Dim`` range's lower and upper
    bound (:func:`~deform_onnx.exporting.sizes.bound_inputs`). Runs before the (slow) export.

    Raises:
        ValueError: ``verify_shapes`` without a dynamic dimension, or shapes that do not fit the inputs.
        ExportError: PyTorch runs none of the second sizes tried (named, with what to do), or fails at a
            declared bound (:func:`~deform_onnx.exporting.sizes.declared_bounds`).
    """
    from ..exporters.guards import parameter_names
    from ..exporting import sizes

    example = SizeSet(args, [tuple(t.shape) for t in args if isinstance(t, torch.Tensor)], "example")
    forward = parameter_names(model, len(args))
    axes = sizes.dynamic_axes_of(args, dynamic_shapes, None, forward, forward)
    if verify_shapes is not None and not axes:
        raise ValueError("verify_shapes= needs dynamic axes (dynamic_shapes): a static file runs at the example "
                         "size only")  # fmt: skip
    if not verify or not axes:
        return [example]
    second, why = sizes.second_inputs(model, args, axes, verify_shapes)
    if not second:
        raise ExportError(f"cannot check the dynamic file at a second size: {why}; give verify_shapes= sizes "
                          "that the model runs, or export without dynamic_shapes")  # fmt: skip
    label = "second size" if verify_shapes is None else "given size"
    out = [example] + [SizeSet(a, list(shapes), label) for a, shapes in second]
    out += [
        SizeSet(a, list(shapes), bound)
        for a, shapes, bound in sizes.declared_bounds(model, args, axes, [s.shapes for s in out])
    ]
    return out


@dataclass
class Named:
    """An input or output of a file, as ONNX Runtime's ``get_inputs()`` items are (``.name``)."""

    name: str


def prove(session, model, plan: list[SizeSet], settings: dict) -> list[Verified]:
    """Run ``session`` at each input set of ``plan`` against PyTorch eager (:func:`~deform_onnx.exporting.verification.verify`).

    A session with ``planned`` (per input, the largest sizes its memory plan holds: ExecuTorch) is
    asked nothing beyond them: a set that exceeds them is refused, naming the largest size that runs.

    Raises:
        VerificationError: an output off beyond the tolerance (the message names the output, the
            runtime and the size).
        ExportError: a size beyond the runtime's memory plan, the runtime fails at a size, or PyTorch
            itself fails at a declared bound or a given size.
    """
    from ..exporting.sizes import shown

    runtime = getattr(session, "runtime", "the runtime")
    planned = getattr(session, "planned", None)
    checks = []
    for size in plan:
        if planned is not None and any(a > b for s, p in zip(size.shapes, planned) for a, b in zip(s, p)):
            raise ExportError(
                f"{runtime}'s memory plan holds the inputs up to {shown([tuple(p) for p in planned])}, but the "
                f"{size.label} {shown(size.shapes)} is claimed (dynamic_shapes); declare each Dim's max at most "
                "the planned size (the largest that runs), or export to .onnx; no file was written"
            )
        where = f" ({runtime}, {size.label} {shown(size.shapes)})"
        try:
            checks.append(verify(model, size.args, b"", settings["rtol"], settings["atol"], session=session,
                                 where=where))  # fmt: skip
        except (VerificationError, ExportError):
            raise
        except Exception as exc:  # the model's own code at a size the user claimed: re-raised
            if size.label in ("example", "second size"):
                raise
            text = _one_line(exc)
            raise ExportError(
                f"PyTorch itself fails at the {size.label} {shown(size.shapes)} ({type(exc).__name__}: {text}); "
                "declare a Dim range (or verify_shapes=) the model runs; no file was written"
            ) from None
    return checks


def report_for(
    path: Path, fmt: str, method: str, checks: list[Verified], data_size: int, started: float, ep,
    plan: list[SizeSet] | None = None,
) -> ExportReport:  # fmt: skip
    """The :class:`~deform_onnx.exporting.api.ExportReport` of a torch.export format's file.

    ``method``: the resolved form (:func:`resolved`). ``plan``: the sizes ``checks`` ran at (a note
    names each one beyond the example with what it is: second size, declared bound).
    """
    ops = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
    report = ExportReport(
        path=path,
        opset=0,
        method=method,
        exporter="torch.export",
        node_count=sum(1 for n in ep.graph.nodes if n.op == "call_function"),
        file_size=data_size,
        export_seconds=time.perf_counter() - started,
        op_types=ops,
        format=fmt,
    )
    if checks:
        first = checks[0]
        report.max_error = max(c.max_error for c in checks)
        report.worst_output = first.worst_output
        report.tolerances = first.tolerances
        report.checks = first.checks
        report.checked_shapes = [c.shapes for c in checks]
        report.size_checks = checks[1:]
        report.runtime = first.runtime
        report.verified = True
        if plan is not None and len(plan) > 1:
            from ..exporting.sizes import shown

            sizes = " | ".join(f"{s.label} {shown(s.shapes)}" for s in plan[1:])
            report.notes.append(f"checked in {first.runtime} at the example's size and at: {sizes}")
    return report
