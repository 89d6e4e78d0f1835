"""Calls into torch's two exporters, quietly, with their failures turned into one-line reasons.

Used by :func:`deform_onnx.export`; the translation table and the symbolic live in
:mod:`.dynamo` and :mod:`.torchscript`.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import TYPE_CHECKING

import onnx
import torch

from ..builder import written
from ..builder.torchscript import drop_identities, typing_copies
from ..conversion import Repair, convert_down
from ..exporting import output_names as _output_names
from . import dynamo as _dynamo
from . import exporter_reuse
from . import torchscript as _torchscript
from .examples import widen_unit_dims
from .forward_defaults import bound
from .function_fallbacks import dead_nodes_dropped
from .guards import checked_program, parameter_names
from .view_mutations import rebased

if TYPE_CHECKING:
    from ..exporting.options import ExportOptions  # what deform_onnx.export resolved (no import at run time)


def capture_errors() -> tuple[type[BaseException], ...]:
    """The exception types of a torch.export capture failure (the dynamo path then falls back)."""
    from torch.onnx._internal.exporter import _errors

    return (_errors.TorchExportError,)


def cause(exc: BaseException) -> str:
    """A one-line reason from the innermost exception of a torch.export failure.

    Adds the user's source line when torch names it ("The following call raised
    this error"): the guard's own text (``Eq(u0, 1)``) does not say where it is. A first line that ends
    with ``:`` gets the next two lines (torch's list of the conflicting dimensions).
    """
    inner = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    lines = [line.strip() for line in str(inner).strip().splitlines() if line.strip()]
    message = lines[0] if lines else ""
    if message.endswith(":") and len(lines) > 1:
        # a heading whose items follow ("Found the following conflicts between user-specified ranges and inferred
        # ranges from model tracing:" and one line per dimension): the first two items say which
        message = f"{message} {'; '.join(lines[1:3])}"
    message = message[:500]
    text = str(inner).strip()
    reason = f"{type(inner).__name__}: {message}"
    where = _user_frame(text) or _user_frame(str(exc))
    return f"{reason} [at {where}]" if where else reason


def _user_frame(text: str) -> str | None:
    """``file:line in fn: code`` from torch.export's "The following call raised this error" block."""
    import re

    match = re.search(
        r"The following call raised this error:\s*\n\s*File \"([^\"]+)\", line (\d+), in (\S+)\s*\n\s*(.+)", text
    )
    if match is None:
        return None
    file, line, fn, code = match.groups()
    return f"{file}:{line} in {fn}: {code.strip()}"


@contextlib.contextmanager
def quiet():
    """Silence the exporters' progress prints, graph dumps and log warnings (errors still raise)."""
    import logging

    loggers = [logging.getLogger(n) for n in ("torch", "torch.onnx", "torch.export", "torch.fx", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def export_dynamo(
    model, args, opts: ExportOptions, sink=None, notes=None, guards=None
) -> tuple[onnx.ModelProto, list[Repair]]:
    """Export with the dynamo exporter at ``opts.opset`` with ``opts.method``.

    Below the build opset (18), export at 18 and convert down with
    :func:`deform_onnx.conversion.convert_down` (adapters reported as repairs).
    ``notes`` (a list) receives a line when the guard check cannot run; ``guards`` (a list) the guards
    torch.export recorded.

    Raises:
        ValueError: a lowering refused the layer (its message names the fix).
        ConversionError: an op of the model cannot be converted down to ``opset``.
        FixedDynamicSize: the model's code fixes a size asked to be dynamic (:func:`.guards.checked_program`).
        torch's exporter errors: capture failures (see :func:`capture_errors`) and others.

    ``sink`` (:class:`deform_onnx.exporting.large.ExternalSink`): a model over 2 GiB; its weights go to
    the sink's data file and the proto returned references them.
    """
    from torch.onnx._internal.exporter import _errors

    opset, input_names, output_names = opts.opset, opts.input_names, opts.output_names
    dynamic_shapes, dynamic_axes = opts.dynamic_shapes, opts.dynamic_axes
    build = max(opset, _dynamo.BUILD_MIN_OPSET)
    table = _dynamo.translation_table(opts.method, opset)
    if (
        dynamic_shapes is None
        and dynamic_axes is not None
        and input_names is not None
        and _axes_skip_an_input(dynamic_axes, input_names, len(args))
    ):
        dynamic_shapes, dynamic_axes = axes_to_dynamic_shapes(dynamic_axes, input_names, len(args)), None
    requested = _requested_dynamic_shapes(model, args, input_names, dynamic_shapes, dynamic_axes)
    if requested is None and (dynamic_shapes is not None or dynamic_axes) and notes is not None:
        notes.append("the guard check could not map dynamic_axes to forward's inputs (give input_names); "
                     "the second-size check decides")  # fmt: skip
    # Hook (issue 18): a dynamic axis with an example of 1 is captured at 2 (exporters/examples.py).
    args = widen_unit_dims(model, args, requested)
    source = model  # what torch.onnx.export exports: the model, or the program the guard check captured
    if requested is not None:
        form = _torch_form(model, args, dynamic_shapes, dynamic_axes, input_names, output_names)
        with quiet():  # FixedDynamicSize: the caller falls back
            captured, found = checked_program(model, args, requested, notes, capture=form and form[:3])
        if guards is not None:
            guards.extend(found)
        if captured is not None and form is not None:
            # torch would capture the model again, the same way: translate this program (one trace, not two);
            # its dynamic_shapes still name the file's dynamic axes
            source, dynamic_shapes, dynamic_axes = captured, form[3], None
    # exporter_reuse: the torchlib registry built once per process, a cheaper scan of one optimizer rule (same file)
    with (
        quiet(),
        _lowering_value_errors(_errors.ConversionError),
        written.recording() as calls,
        exporter_reuse.reused(),
    ):
        program = torch.onnx.export(
            source,
            args,
            dynamo=True,
            opset_version=build,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            dynamic_axes=dynamic_axes,
            custom_translation_table=table,
            verbose=False,
            optimize=True,
        )
    if program is None:  # torch returns None only for dynamo=False
        raise RuntimeError("internal error: torch.onnx.export(dynamo=True) returned no ONNXProgram")
    if output_names is None:  # hook (issue 30): the model's own output names (exporting/output_names.py)
        spec = getattr(getattr(program.exported_program, "call_spec", None), "out_spec", None)
        _output_names.rename_ir(program.model, _output_names.names_of_spec(spec))
    written.name_values(calls)  # the graph values of each call, named after the FX graph by now
    proto = program.model_proto if sink is None else sink.save_ir(program.model)
    repairs: list[Repair] = []
    if build != opset:
        # torch's own down-conversion writes invalid nodes (Split keeps num_outputs) or silently
        # stays at 18: convert here, where each failure names its op (see deform_onnx.conversion).
        proto, repairs = convert_down(proto, opset)
    written.stamp(proto, calls)  # each call's form (and values): labels, and quantize's rebuild
    return proto, repairs


def _torch_form(model, args, dynamic_shapes, dynamic_axes, input_names, output_names) -> tuple | None:
    """What ``torch.onnx.export(model, args, dynamic_shapes=..., dynamic_axes=...)`` (torch 2.14) captures with.

    ``(args, kwargs, dynamic_shapes for torch.export, dynamic_shapes as named)``: torch's own conversion of
    ``dynamic_axes`` (axis names kept, for the file's dimension names) and of names to ``Dim.DYNAMIC``;
    ``None`` when torch's conversion fails (torch.onnx.export then raises its own error on the model).
    """
    from torch.onnx._internal.exporter import _compat, _dynamic_shapes

    try:
        export_args, kwargs = _compat._get_torch_export_args(tuple(args), None)
        if dynamic_shapes is None and dynamic_axes is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's deprecation note on dynamic_axes
                dynamic_shapes, export_args, kwargs = _dynamic_shapes.from_dynamic_axes_to_dynamic_shapes(
                    model,
                    export_args,
                    kwargs,
                    dynamic_axes=dynamic_axes,
                    input_names=input_names,
                    output_names=set(output_names or ()),
                )
        with_dims, _ = _dynamic_shapes.convert_str_to_export_dim(dynamic_shapes)
    except Exception:  # noqa: BLE001 - torch.onnx.export meets the same failure and reports it
        return None
    return export_args, kwargs or {}, with_dims, dynamic_shapes


def _requested_dynamic_shapes(model, args, input_names, dynamic_shapes, dynamic_axes):
    """The dynamic dimensions asked for, as ``torch.export`` dynamic shapes (``None``: none, or unknown names)."""
    if dynamic_shapes is not None:
        return dynamic_shapes
    if not dynamic_axes:
        return None
    names = input_names or parameter_names(model, len(args))
    return None if names is None else axes_to_dynamic_shapes(dynamic_axes, names, len(args))


def _axes_skip_an_input(dynamic_axes: dict, input_names: list[str] | None, n_args: int) -> bool:
    """Whether an input without dynamic axes precedes one with them (torch's conversion then misplaces them)."""
    if input_names is None:
        return False
    has = [bool(dynamic_axes.get(name)) for name in input_names[:n_args]]
    return any(not has[i] and any(has[i + 1 :]) for i in range(len(has)))


def axes_to_dynamic_shapes(dynamic_axes: dict, input_names: list[str], n_args: int) -> tuple:
    """TorchScript-style ``dynamic_axes`` as dynamo ``dynamic_shapes``, one entry per positional input.

    torch 2.14's own conversion pairs the axes with inputs by position when the first
    inputs have none (checked: ``{"loc": {1: "q"}}`` for the second of three inputs
    marks the first input's axis 1), so a model whose first input is static fails
    to capture. Used only then (torch's own conversion keeps the axis names; this one
    leaves them to the exporter). Output axes are dropped: the dynamo exporter infers them.
    """
    shapes = []
    for i in range(n_args):
        axes = dynamic_axes.get(input_names[i]) if i < len(input_names) else None
        if isinstance(axes, (list, tuple)):
            axes = dict.fromkeys(axes)
        shapes.append({int(a): torch.export.Dim.DYNAMIC for a in axes} if axes else None)
    return tuple(shapes)


@contextlib.contextmanager
def _lowering_value_errors(wrapper: type[BaseException]):
    """Re-raise a ``ValueError`` of the lowering (e.g. a kernel larger than the padded
    input) that the exporter wrapped in ``wrapper``, as itself: its message names the fix.
    """
    try:
        yield
    except wrapper as exc:
        inner = exc
        while inner.__cause__ is not None:
            inner = inner.__cause__
        if isinstance(inner, ValueError) and _raised_here(inner):
            raise ValueError(str(inner)) from None
        raise


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside deform_onnx (a lowering's refusal), not by torch's own
    translations (e.g. OneFormer's Swin backbone: "Cannot view a tensor with shape ..." from
    torch's ``aten.view`` translation: the TorchScript fallback exports it).
    """
    import os

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(package)


def export_torchscript(model, args, opts: ExportOptions, sink=None) -> onnx.ModelProto:
    """Export with the TorchScript exporter and the symbolics of ``opts.method`` registered for the call.

    ``sink``: a model over 2 GiB (:class:`deform_onnx.exporting.large.ExternalSink`): torch writes it to a
    path (the exporter itself then uses external data), and the proto returned references the
    sink's data file.
    """
    # A str, not a Path: torch passes only a str on as the location of external data.
    path = None if sink is None else str(sink.torchscript_path())
    buffer = io.BytesIO()
    # bound: forward's non-tensor defaults stay Python values, not traced inputs (forward_defaults.py)
    with (
        _torchscript.registered(opts.method),
        quiet(),
        written.recording() as calls,
        bound(model, args),
        _output_names.recording(model) as seen,
        dead_nodes_dropped(),  # a model's try: Function.apply(...) except: fallback (function_fallbacks.py)
        rebased(),  # ref[..., 1].div_(a).mul_(b): every in-place op on a view reaches the file (view_mutations.py)
        typing_copies(),  # lowerings type their outputs (dropped below)
    ):
        torch.onnx.export(
            model,
            args,
            buffer if path is None else path,  # type: ignore[arg-type]  # torch's stub omits file-like objects, which it writes
            dynamo=False,
            opset_version=opts.opset,
            input_names=opts.input_names,
            output_names=opts.output_names,
            dynamic_axes=opts.dynamic_axes,
        )
    proto = sink.load_torchscript(path) if path is not None else onnx.load_from_string(buffer.getvalue())
    drop_identities(proto)  # the typing copies of TorchScriptBuilder.declare_shape
    if opts.output_names is None and seen:  # hook (issue 30): the model's own output names (exporting/output_names.py)
        _output_names.rename_proto(proto, seen[-1])
    written.stamp(proto, calls)  # each call's form (TorchScript renames every value: no names)
    return proto
