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

from ..core.errors import ExportError
from ..exporting.api import ExportReport
from ..exporting.verification import Verified, verify
from ..runtimes.sessions import input_tensors

__all__ = ["Named", "check_settings", "exported", "prove", "quiet", "report_for", "second_args"]

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
    method = opts["method"] or "auto"
    return opts, args if isinstance(args, tuple) else (args,), auto if method == "auto" else method


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
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def exported(
    model, args: tuple, dynamic_shapes, method: str, title: str, core: bool = True, notes: list[str] | None = None
):
    """``torch.export.export(model, args)`` with the family rewritten by :func:`deform_onnx.decompositions`.

    The model is captured by the ONNX path's strategies (:func:`.capture.capture`: non-strict with the
    size rewrites, then ``strict=True``); ``notes`` (a list) gets one line saying which strategy captured it.
    ``core``: decompose the rest into core ATen ops too; ``False`` leaves the rest to the backend's own
    lowering (ExecuTorch: its XNNPACK recomposition of ``linear`` fails on a program already decomposed
    to core ATen ops, measured on 4-D ``nn.Linear`` inputs: DCNv3, Deformable DETR).

    Raises:
        ExportError: no strategy captures the model (each one's first line; a dynamic dimension the model
            fixes is named by torch.export), or an op no decomposition covers is left (named, with the format
            and what to do).
    """
    from .capture import capture, drop_aliases
    from .decompose import decompositions

    table = decompositions(method, core=core)
    captured = capture(model, args, dynamic_shapes, title)
    if notes is not None:
        notes.append(captured.note())
    ep = captured.program
    try:
        ep = ep.run_decompositions(table)
    except Exception as exc:
        raise ExportError(f"decomposing the model for {title} failed: {_one_line(exc)}") from exc
    drop_aliases(ep)
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


def second_args(ep, args: tuple, limits: list | None = None) -> tuple | None:
    """Inputs of another size within each dynamic dimension's bounds (``None`` when no dimension is dynamic).

    Each free size symbol of the program moves by half its example value (at least 1) inside its range,
    up, or down when up leaves the range or ``limits`` (per input, the largest sizes the runtime planned
    for: ExecuTorch's memory plan); derived dimensions (``2*H``) follow. Float inputs are random, others kept.
    """
    user = set(ep.graph_signature.user_inputs)
    shapes = [n.meta["val"].shape for n in ep.graph.nodes
              if n.op == "placeholder" and n.name in user and hasattr(n.meta.get("val"), "shape")]  # fmt: skip
    symbols = _symbols(shapes)
    if not symbols:
        return None
    for up in (True, False):
        moved = {}
        for sym, v in symbols.items():
            r = ep.range_constraints.get(sym)
            lo, hi = (int(r.lower), int(r.upper) if r.upper.is_finite else v * 4) if r is not None else (2, v * 4)
            step = max(1, v // 2)
            moved[sym] = min(hi, v + step) if up else max(lo, v - step)
        sizes = [[int(d.node.expr.subs(moved)) if isinstance(d, torch.SymInt) else int(d) for d in sh] for sh in shapes]
        if limits is None or all(all(a <= b for a, b in zip(sz, lim)) for sz, lim in zip(sizes, limits)):
            return _resized(input_tensors(args), sizes)
    return None


def _symbols(shapes) -> dict:
    """The free size symbols of the inputs' shapes and their example values."""
    symbols = {}
    for shape in shapes:
        for d in shape:
            if isinstance(d, torch.SymInt):
                env: Any = d.node.shape_env
                values = getattr(env, "backed_var_to_val", None) or env.var_to_val
                for sym in d.node.expr.free_symbols:
                    symbols[sym] = int(values[sym])
    return symbols


def _resized(tensors: list, sizes: list) -> tuple | None:
    new = []
    for t, size in zip(tensors, sizes):
        if list(t.shape) == size:
            new.append(t)
        elif t.is_floating_point():
            new.append(torch.randn(size, dtype=t.dtype))
        else:
            return None
    return tuple(new)


@dataclass
class Named:
    """An input or output of a file, as ONNX Runtime's ``get_inputs()`` items are (``.name``)."""

    name: str


def prove(session, model, sizes: list[tuple], settings: dict) -> list[Verified]:
    """Run ``session`` at each argument tuple of ``sizes`` against PyTorch eager (:func:`~deform_onnx.exporting.verification.verify`).

    Raises:
        VerificationError: an output off beyond the tolerance (the message names the output and size).
    """
    checks = []
    for index, args in enumerate(sizes):
        where = "" if index == 0 else " at " + ", ".join("x".join(map(str, t.shape)) for t in input_tensors(args))
        checks.append(verify(model, args, b"", settings["rtol"], settings["atol"], session=session, where=where))
    return checks


def report_for(
    path: Path, fmt: str, method: str, checks: list[Verified], data_size: int, started: float, ep
) -> ExportReport:
    """The :class:`~deform_onnx.exporting.api.ExportReport` of a torch.export format's file."""
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
    return report
