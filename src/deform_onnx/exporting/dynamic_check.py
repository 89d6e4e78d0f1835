"""The second-size check of :func:`deform_onnx.export`: a dynamic file runs, and matches PyTorch, at another size.

:mod:`deform_onnx.exporting.sizes` picks the size; :mod:`deform_onnx.exporting.frozen` names what froze
when the file fails there. Both exporters and every fallback go through
:func:`check_dynamic_file` before a file with dynamic axes is written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import onnx

from ..core.errors import ExportError, MissingKernelError, UndefinedReferenceError, VerificationError
from ..exporters.guards import parameter_names
from . import sizes
from .frozen import describe, static_dims
from .sizes import Axis, shown
from .verification import UNDEFINED_TAIL, Verified, make_session, run_pytorch, verify

if TYPE_CHECKING:
    from .api import ExportReport
    from .options import ExportOptions


#: What to do when a size froze (the end of every second-size error).
ADVICE = (
    "compute sizes from tensor shapes at run time (x.shape[-2:] in tensor arithmetic, torch.arange, "
    "ops such as deform_onnx.ops.ms_deform_attn) instead of Python numbers, torch.tensor(...) of sizes "
    "or lists built in loops; or export without dynamic axes (a static file at the example size); "
    "or give verify_shapes= sizes the model supports"
)

#: What to do when PyTorch itself is undefined (NaN/Inf) at a second size.
UNDEFINED_ADVICE = (
    "declare dynamic bounds where the model is defined (torch.export.Dim(min=..., max=...): the bounds are "
    "checked too), or give verify_shapes= sizes the model is defined at"
)


def static_dims_error(
    proto: onnx.ModelProto, axes: list[Axis], guards: list[str] | None = None, input_names: list[str] | None = None
) -> str | None:
    """The message when the file's graph inputs hold a requested dynamic axis fixed (``None`` when none)."""
    fixed = static_dims(proto, axes, input_names)
    if not fixed:
        return None
    named = [g for g in (guards or []) if "size()" in g and "==" in g]
    guard = f"; torch.export recorded the guard `{named[0]}`" if named else ""
    return (
        f"a requested dynamic dimension is static in the exported file: {'; '.join(fixed)} (the model's code "
        f"specialises it{guard}); {ADVICE}"
    )


def check_dynamic_file(
    model, args: tuple, data: bytes, proto: onnx.ModelProto, plan: SizeCheck, rtol: float | None, atol: float | None
) -> tuple[Verified, list[Verified], float]:
    """Verify ``data`` at the example ``args`` and at each second size of ``plan`` (:attr:`SizeCheck.second`).

    Returns the example's :class:`Verified`, one per second size, and the seconds the second sizes took.
    ``plan.picked``: the sizes were picked by running the model there (else a PyTorch failure at a
    user-given size is reported as such, not as the file's). ``plan.names``: the file's names for the
    tensors of ``args`` (:func:`deform_onnx.runtimes.sessions.run_file`).

    Raises:
        VerificationError: the file differs from PyTorch at the example size.
        MissingKernelError: ONNX Runtime has no kernel for some node.
        ExportError: the file fails or differs at a second size; the message names the size,
            what froze (:func:`deform_onnx.exporting.frozen.describe`) and what to do.
    """
    from . import bfloat16

    # One verification for every dtype; only the runtime differs: ONNX Runtime CPU lacks bfloat16 Conv,
    # so a bfloat16 file runs where bfloat16.make_session finds the kernels (OpenVINO CPU).
    low = bfloat16.has_bfloat16(model, args)
    session = bfloat16.make_session(data) if low else make_session(data)
    # Second sizes run with ONNX Runtime's graph optimisations off (runtimes.sessions.make_session): they
    # hid a size the exporter froze into a Reshape's shape.
    spec_session = session if low or not plan.second else make_session(data, optimize=False)

    def check(a, where=""):
        run_on = spec_session if where else session
        return verify(model, a, data, rtol, atol, session=run_on, where=where, input_names=plan.names)

    first = check(args)
    done = []
    start = time.perf_counter()
    for new_args, shapes in plan.second:
        where = f" at {shown(shapes)}"
        try:
            if not plan.picked:
                run_pytorch(model, new_args)  # a bfloat16 DCN as its float32 copy, as verification runs it
        except Exception as exc:  # noqa: BLE001 - user code, at a size the user gave (verify_shapes)
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise ExportError(
                f"PyTorch itself fails at the second size {shown(shapes)} ({type(exc).__name__}: {text}); "
                "give verify_shapes= sizes that the model runs; no file was written"
            ) from None
        try:
            done.append(check(new_args, where))
        except MissingKernelError:
            raise
        except UndefinedReferenceError as exc:  # the model's fault at that size, not a frozen size of the file's
            raise ExportError(
                f"the file cannot be checked at the second size {shown(shapes)}: {str(exc).removesuffix(UNDEFINED_TAIL)}; "
                f"no file was written. What to do: {UNDEFINED_ADVICE}"
            ) from None
        except VerificationError as exc:
            problem = str(exc).removesuffix("; no file was written")
            raise ExportError(_second_size_message(proto, plan.axes, shapes, problem, model=model)) from None
        except ExportError:
            raise
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own failure at that size (broadcast, reshape)
            problem, node = ort_failure(str(exc))
            raise ExportError(_second_size_message(proto, plan.axes, shapes, problem, node, model)) from None
    return first, done, time.perf_counter() - start


def ort_failure(text: str) -> tuple[str, str | None]:
    """ONNX Runtime's run-time error in one line (``at Reshape node 'name': cannot reshape ...``) and the node name."""
    import re

    text = " ".join(text.split())
    name = re.search(r"Name:'([^']*)'", text)
    op = re.search(r"running (\w+) node", text)
    message = text.split("Status Message:", 1)[-1].strip()
    if " was false. " in message:  # ORT's source location and failed check precede the readable message
        message = message.rsplit(" was false. ", 1)[1]
    message = re.sub(r"^\S+:\d+ \S.*?\) ", "", message) if message.startswith("/") else message
    where = f" at {op.group(1) if op else 'a'} node {name.group(1)!r}" if name else ""
    return f"ONNX Runtime fails there{where}: {message[:240]}", (name.group(1) if name else None)


def _second_size_message(proto, axes: list[Axis], shapes, problem: str, node: str | None = None, model=None) -> str:
    dims = ", ".join(sorted({a.name or f"axis {a.axis}" for a in axes}))
    example = ", ".join(dict.fromkeys(f"{a.name or f'axis {a.axis}'}={a.size}" for a in axes))
    return (
        f"the file does not hold at a second size {shown(shapes)} (dynamic {dims}; export-time {example}): "
        f"{problem}; {describe(proto, axes, node, model)}; no file was written. What to do: {ADVICE}"
    )


class SizeCheck:
    """The checks one export runs on each file: the example size, and each second size of a dynamic export."""

    def __init__(self, verify: bool, axes, second, why: str | None):
        self.verify, self.axes, self.second, self.why = verify, axes, second, why
        self.notes: list[str] = []
        self.guards: list[str] = []
        self.names: list[str] | None = None
        self.picked = True  # the second sizes were picked by running the model there
        self.seconds = 0.0
        self.done: list[Verified] = []

    @classmethod
    def plan(cls, model, args: tuple, opts: ExportOptions) -> SizeCheck:
        """Pick the second sizes before the (slow) export; bad ``verify_shapes`` raise ``ValueError`` here."""
        start = time.perf_counter()
        verify, verify_shapes = opts.verify, opts.verify_shapes
        forward = parameter_names(model, len(args))
        names = opts.input_names or forward
        axes = sizes.dynamic_axes_of(args, opts.dynamic_shapes, opts.dynamic_axes, names, forward)
        second: list[tuple] = []
        why: str | None = None
        if verify_shapes is not None and not axes:
            raise ValueError("verify_shapes= needs dynamic axes (dynamic_shapes or dynamic_axes): a static file "
                             "runs at the example size only")  # fmt: skip
        if verify and axes:
            second, why = sizes.second_inputs(model, args, axes, verify_shapes)
        if verify and axes and not second:
            raise ExportError(f"cannot check the dynamic file at a second size: {why}; give verify_shapes= sizes "
                              "that the model runs, or export without dynamic axes")  # fmt: skip
        taken = [[tuple(t.shape) for t in args if hasattr(t, "shape")]] + [shapes for _, shapes in second]
        bounds = sizes.declared_bounds(model, args, axes, taken) if verify else []
        check = cls(verify, axes, second + [(a, shapes) for a, shapes, _ in bounds], why)
        if bounds:
            check.notes.append("also checked at the declared bounds: " + ", ".join(
                f"{label} {shown(shapes)}" for _, shapes, label in bounds))  # fmt: skip
        check.picked = verify_shapes is None
        check.names = names
        if second and why:
            check.notes.append(why)
        check.seconds = time.perf_counter() - start
        return check

    def run(self, model, args, data, proto, opts: ExportOptions) -> Verified | None:
        """Static-dimension check, then verify at the example and the second sizes (``None`` without verify).

        ``opts``: the export's tolerances (``rtol``, ``atol``). When this was a TorchScript fallback,
        :func:`deform_onnx.exporting.fallback_errors.reasons_named` adds why the dynamo exporter was
        abandoned to the error.
        """
        rtol, atol = opts.rtol, opts.atol
        problem = static_dims_error(proto, self.axes, self.guards, self.names)
        if problem is not None:
            raise ExportError(problem + "; no file was written")
        if not self.verify:
            return None
        first, self.done, seconds = check_dynamic_file(model, args, data, proto, self, rtol, atol)
        self.seconds += seconds
        return first

    def fill(self, report: ExportReport, verified: Verified | None) -> None:
        """Write the second-size results, the checked shapes and the notes into ``report``."""
        report.notes = list(dict.fromkeys(self.notes))
        if verified is None:
            if self.axes:
                report.notes.append("verify=False: the dynamic file was not run at a second size")
            return
        if verified.runtime != "ONNX Runtime":  # a bfloat16 file (bfloat16.make_session): say where it ran
            report.onnxruntime = None
            report.notes.append(
                f"verified on {verified.runtime} (CPU): ONNX Runtime's CPU provider cannot run the file"
            )
        report.checked_shapes = [list(verified.shapes)] + [list(v.shapes) for v in self.done]
        report.size_checks = list(self.done)
        report.second_size_seconds = self.seconds if self.second else 0.0
        for v in (verified, *self.done):
            for name, check in v.checks.items():
                if check.note:
                    report.notes.append(f"output {name!r}: {check.note}")
