"""One-call export: pick the exporter, lower deformable convolution, validate, verify, write atomically."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch

from ..conversion import ConversionError
from ..core.atomic_io import write_bytes_atomic
from ..core.errors import BadModuleInput, ExportError, MissingKernelError, VerificationError, raise_bad_module_input
from ..core.irversion import apply_ir_version, check_requested
from ..core.opsets import FAMILY_MIN_OPSET as MIN_OPSET
from ..exporters import dynamo as _dynamo
from ..exporters import rewriters as _rewriters
from ..exporters import torchscript as _torchscript
from ..exporters.calls import capture_errors as _capture_errors
from ..exporters.calls import cause as _cause
from ..exporters.calls import export_dynamo as _export_dynamo
from ..exporters.calls import export_torchscript as _export_torchscript
from ..exporters.guards import FixedDynamicSize, parameter_names
from ..ops import registry
from . import dynamic_check as _dynamic_check
from . import sizes as _sizes
from .bfloat16 import choose_opset as _bfloat16_opset  # bfloat16: opset 22 (verified in dynamic_check)
from .large import ExternalSink, is_large
from .verification import OutputCheck, Tolerance, Verified

__all__ = ["ExportError", "ExportReport", "VerificationError", "export"]

#: Default opset when none is given: the standard-op lowerings at 17 run on the
#: widest set of runtimes (DirectML, older ONNX Runtime, OpenVINO); native needs 19.
DEFAULT_OPSET = 17
DEFAULT_NATIVE_OPSET = 19
#: Lowest opset the dynamo path reaches: it builds at 18 and converts down, and onnx's
#: version converter has no Reshape adapter below 14 (every lowering uses Reshape).
DYNAMO_MIN_OPSET = _dynamo.MIN_OPSET
DYNAMO_MAX_OPSET = 23


@dataclass
class ExportReport:
    """What :func:`export` did.

    Attributes:
        path: the written file (``None`` when exporting to a file-like object).
        opset: default-domain opset of the model.
        method: the lowering used (``native``, ``grid_sample`` or ``gather``).
        exporter: ``"dynamo"`` or ``"torchscript"`` (the one that actually ran).
        node_count: nodes in the main graph.
        file_size: bytes written.
        max_error: max abs difference ORT vs PyTorch over all outputs (``None`` without verify).
        worst_output: name of the output with ``max_error``.
        tolerances: output name -> the :class:`Tolerance` it was checked with (dtype, rtol,
            atol, whether given or the dtype's default); empty without verify.
        repairs: down-conversion adapters applied to the dynamo export (one line each: adapter
            ``<op>_<from>_<to>``, the op, the opset step, the reason); see :mod:`deform_onnx.conversion`.
        fallback_reason: why the dynamo exporter was abandoned, if it was.
        export_seconds: wall time of exporting, converting, checking and verifying (all but the write).
        op_types: sorted op types of the main graph.
        checks: output name -> :class:`OutputCheck` at the example size (reference, errors, rule: README).
        checked_shapes: input shapes the file ran at, per size (the example, then each second size).
        size_checks, second_size_seconds, notes: :class:`Verified` at each second size, their cost, and
            what a check could not do or found in the reference (guard capture failed, NaN, ...).
        onnxruntime: the ONNX Runtime distribution the file was verified in (CPU execution
            provider), e.g. ``"onnxruntime-gpu 1.31.1"``; ``None`` when not verified, or verified on
            OpenVINO (a bfloat16 file: ``notes`` says so).
    """

    path: Path | None
    opset: int
    method: str
    exporter: str
    node_count: int
    file_size: int
    max_error: float | None = None
    worst_output: str | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    fallback_reason: str | None = None
    export_seconds: float = 0.0
    op_types: list[str] = field(default_factory=list)
    checks: dict[str, OutputCheck] = field(default_factory=dict)
    checked_shapes: list[list[tuple[int, ...]]] = field(default_factory=list)
    size_checks: list[Verified] = field(default_factory=list)
    second_size_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    onnxruntime: str | None = None


def export(
    model: torch.nn.Module,
    args: tuple,
    f,
    *,
    opset_version: int | None = None,
    method: str | None = None,
    dynamo: bool = True,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    dynamic_shapes=None,
    dynamic_axes: dict | None = None,
    verify: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    fallback: bool = True,
    target: str | None = None,
    force: bool = False,
    ir_version: int | None = None,
    verify_shapes=None,
) -> ExportReport:
    """Export ``model`` to ONNX with deformable convolution lowered by ``method``.

    Exporter choice: with ``dynamo=True`` (default) the dynamo exporter builds
    at opset 18 and, below 18, the model is converted down by onnx's version
    converter plus this package's adapters for what it lacks (``Split`` 18->17,
    ``Pad`` 18->17, ``Shape`` 15->14, ``Identity`` 16->15; listed in
    ``report.repairs``). The TorchScript exporter is used instead, with a
    warning saying why, when the dynamo path cannot serve: opsets 11 to 13
    (below its reach of 14), ``torch.export`` cannot capture the model, an op
    cannot be converted down, the dynamo file fails the checker or the
    comparison, or (with dynamic axes) the model's code fixes a dynamic size:
    torch's exporter drops the guard ``torch.export`` recorded for it, and the
    file would be wrong at other sizes (:mod:`deform_onnx.exporters.guards`).
    With ``fallback=True`` export therefore succeeds for every model and opset
    (11 to 20) that the TorchScript exporter can export.

    Verification tolerance (``|ort - torch| <= atol + rtol * |torch|``, per output,
    by its dtype; an explicit ``rtol``/``atol`` wins, each on its own):
    float64 1e-8 (tighter than float32's resolution, so a hidden float32 cast
    fails), float32 1e-4 (the project's rule), float16 1e-2 (ONNX Runtime's
    own float16 ``Conv`` differs from PyTorch's by one output ulp; a deformable
    convolution also rounds each sample and its mask product, bounded by
    ``4u*sum|w*s| + 2u|y|`` with u = 2^-11, about 1.7e-2 for unit-scale 3x3x16
    layers), bfloat16 8e-2 (the same bound with bfloat16's 8x larger u). Integer
    outputs must match exactly. :mod:`deform_onnx.exporting.verification` has the details.

    Args:
        model: a module calling ``torchvision.ops.deform_conv2d`` (any number of times).
        args: example inputs (tensors), as for ``torch.onnx.export``.
        f: output path, or a binary file-like object.
        opset_version: target default-domain opset, 11 to 23 (TorchScript: 11 to 20;
            dynamo: 14 to 23, lower ones fall back). Default 17 (19 for ``method="native"``),
            or the target's choice.
        method: ``None``: the target's choice, else ``"auto"``;
            ``"auto"`` (grid_sample at opset >= 16, gather below),
            ``"native"`` (ONNX ``DeformConv``, opset >= 19), ``"grid_sample"``
            (opset >= 16) or ``"gather"`` (opset >= 11).
        dynamo: use the dynamo exporter (``torch.export``) with
            :func:`deform_onnx.translation_table`; ``False`` uses the
            TorchScript exporter with the registered symbolic.
        input_names, output_names: graph input/output names.
        dynamic_shapes: dynamo-style dynamic shapes (``torch.export.Dim``).
        dynamic_axes: TorchScript-style ``{name: {axis: "name"}}``; accepted by both exporters.
        verify: run the model in ONNX Runtime on ``args`` and compare with PyTorch.
        rtol, atol: verification tolerance; ``None`` takes the output dtype's default above.
        fallback: use the TorchScript exporter (with a warning naming the cause)
            when the dynamo path cannot serve (see above); ``False`` raises
            :class:`ExportError` instead.
        target: a runtime (``deform_onnx.TARGETS``, e.g. ``"tensorrt"``,
            ``"onnxruntime<1.25"``): picks method and opset (explicit ones win;
            an opset below the dynamo range that the target picked selects the
            TorchScript exporter), and the emitted graph is checked against the
            target's known faults. See :func:`deform_onnx.targets.resolve_target`.
        force: turn a combination the target is known to mishandle into a warning.
        ir_version: IR version of the file; default: the lowest its opsets need
            (:mod:`deform_onnx.core.irversion`).
        verify_shapes: sizes a dynamic file is also checked at, e.g. ``[(2, 3, 160, 96)]`` (per item one
            shape per tensor input); default: one picked from the dynamic axes (:mod:`deform_onnx.exporting.sizes`).

    Returns:
        :class:`ExportReport` (exporter used, repairs, tolerances, max error).

    Raises:
        ValueError: unknown method or target, a combination the target mishandles (without
            ``force``), an ``ir_version`` below what the opset needs, opset out of range, a
            method the opset cannot hold, or
            a ``DeformConv2d`` module with a bad stride/padding/dilation or called with
            tensors of the wrong rank or channel count (the message names the module).
        ExportError: the exporter failed or produced an invalid model, or ONNX Runtime has
            no kernel for some node at its dtype (e.g. float64 ``Conv``: the message names
            it and offers ``verify=False``); nothing written.
        VerificationError: ORT and PyTorch outputs differ beyond tolerance (nothing written).
        ExportError: with dynamic axes, the file keeps a requested dynamic dimension static or fails at a
            second size (named, with what froze and what to do; dynamo: after the fallback); nothing written.
    """
    # Hook (issue 12): a runtime target picks method/opset; explicit values win.
    from ..targets import hooks as _target_hooks

    choice = _target_hooks.for_export(target, method, opset_version, dynamo, force)
    from ..targets import needs as _target_needs  # hook (issue 19): opsets a model's calls need on the target

    _target_needs.for_model(choice, model, args, opset_version, dynamo)
    method, opset_version, dynamo = choice.method, choice.opset, choice.dynamo
    opset_version = _bfloat16_opset(model, args, opset_version, dynamo)  # bfloat16: opset 22 (bfloat16.py)
    if opset_version is None:
        opset_version = DEFAULT_NATIVE_OPSET if method == "native" else DEFAULT_OPSET
    check_requested(ir_version, opset_version)  # hook (issue 12): fail before the export
    from ..core.torch_compat import check_dynamo_dynamic  # hook (issue 12): older torch releases

    check_dynamo_dynamic(dynamo, dynamic_shapes is not None or dynamic_axes is not None)
    if not hasattr(f, "write") and not Path(f).parent.is_dir():
        # Fail before the (slow) export, not after it.
        raise FileNotFoundError(f"output folder {Path(f).parent} does not exist; create it first")
    # Suggestions name methods that work on the path that will run (the fallback reaches 11).
    method = registry.model_method(
        method, opset_version, path_min_opset=DYNAMO_MIN_OPSET if dynamo and not fallback else None
    )
    if not isinstance(args, tuple):
        args = (args,)
    _check_opset_range(opset_version, dynamo)
    training = {m: m.training for m in model.modules()}
    model.eval()  # export and verify in eval mode; each module's own mode is restored after
    try:
        # Hook (issue 18): sizes stay symbolic through detector code's size tensors and linspace
        # while exporting (deform_onnx.exporters.rewriters); undone on exit.
        with choice.emitting(), _rewriters.while_exporting():  # hook (issue 12): graph forms for the target
            return _export_eval(
                model,
                args,
                f,
                opset_version,
                method,
                dynamo,
                input_names,
                output_names,
                dynamic_shapes,
                dynamic_axes,
                verify,
                rtol,
                atol,
                fallback,
                choice=choice,
                ir_version=ir_version,
                verify_shapes=verify_shapes,
            )
    finally:
        for module, mode in training.items():
            module.training = mode


def _export_eval(
    model,
    args,
    f,
    opset_version,
    method,
    dynamo,
    input_names,
    output_names,
    dynamic_shapes,
    dynamic_axes,
    verify,
    rtol,
    atol,
    fallback,
    choice=None,
    ir_version=None,
    verify_shapes=None,
) -> ExportReport:
    start = time.perf_counter()
    fallback_reason: str | None = None
    repairs: list = []
    done: tuple[onnx.ModelProto, bytes | str, Verified | None, list] | None = None
    checks = registry.check_modules(model)  # each op's checks of its modules (forward pre-hooks)
    sized = _dynamic_check.SizeCheck.plan(model, args, input_names, dynamic_shapes, dynamic_axes, verify, verify_shapes)
    sink = ExternalSink(f) if is_large(model) else None  # over 2 GiB: external data (large.py)
    try:
        if dynamo:
            try:
                done = _try_dynamo(
                    model,
                    args,
                    opset_version,
                    method,
                    input_names,
                    output_names,
                    dynamic_shapes,
                    dynamic_axes,
                    verify,
                    rtol,
                    atol,
                    ir_version,
                    choice,
                    sized,
                    sink,
                )
            except _DynamoUnfit as exc:
                fallback_reason = str(exc)
            if fallback_reason is not None:  # outside the except: no chained traceback on the ExportError
                _check_fallback(fallback_reason, opset_version, fallback)
                warnings.warn(
                    f"deform_onnx: {fallback_reason}; falling back to the TorchScript exporter "
                    "(it records the branches taken for the example inputs)",
                    stacklevel=3,  # the caller of export()
                )
        if done is None:
            if input_names is None:
                input_names = _forward_names(model, args)
            if dynamic_axes is None and dynamic_shapes is not None:
                dynamic_axes = _sizes.dynamic_shapes_to_axes(dynamic_shapes, input_names)
            proto = _export_torchscript(
                model, args, opset_version, method, input_names, output_names, dynamic_axes, sink=sink
            )
            data = _finish(proto, opset_version, method, ir_version, choice, sink)
            verified = sized.run(model, args, data, proto, rtol, atol, abandoned=fallback_reason)
        else:
            proto, data, verified, repairs = done
    except BadModuleInput as exc:  # raised by a check in the TorchScript trace: a plain ValueError
        if sink is not None:
            sink.close()
        raise ValueError(str(exc)) from None
    except BaseException:
        if sink is not None:
            sink.close()  # nothing of a model over 2 GiB is left beside the output
        raise
    finally:
        checks.close()
    report = ExportReport(
        path=None,
        opset=opset_version,
        method=method,
        exporter="torchscript" if (not dynamo or fallback_reason) else "dynamo",
        node_count=len(proto.graph.node),
        file_size=len(data) if sink is None else sink.file_size(),
        repairs=[str(r) for r in repairs],
        fallback_reason=fallback_reason,
        export_seconds=time.perf_counter() - start,
        op_types=sorted({n.op_type for n in proto.graph.node}),
    )
    if verified is not None:
        report.max_error, report.worst_output, report.tolerances = (
            verified.max_error,
            verified.worst_output,
            verified.tolerances,
        )
        from ..runtimes.ort_distribution import describe  # hook (issue 21): which ONNX Runtime distribution verified it

        report.onnxruntime = describe()
        report.checks = verified.checks
    sized.fill(report, verified)
    if sink is not None:
        report.path = sink.commit()
    elif isinstance(data, bytes):  # without a sink, _finish returns the serialized model
        report.path = _write(data, f)
    else:
        raise TypeError(f"internal error: expected the serialized model, got {type(data).__name__}")
    return report


class _DynamoUnfit(Exception):
    """The dynamo path cannot serve this export (the message says why); the TorchScript one may."""


def _try_dynamo(
    model,
    args,
    opset,
    method,
    input_names,
    output_names,
    dynamic_shapes,
    dynamic_axes,
    verify,
    rtol,
    atol,
    ir_version=None,
    choice=None,
    sized=None,
    sink=None,
) -> tuple[onnx.ModelProto, bytes | str, Verified | None, list]:
    """Export, validate and verify on the dynamo path, or raise :class:`_DynamoUnfit` naming why not.

    User errors (``ValueError``) and a runtime without a kernel (:class:`MissingKernelError`) pass
    through: the TorchScript exporter would meet them too.
    """
    if opset < DYNAMO_MIN_OPSET:
        raise _DynamoUnfit(
            f"the dynamo exporter reaches opset {DYNAMO_MIN_OPSET} at the lowest, not {opset} "
            "(it builds at 18 and onnx's version converter has no Reshape adapter below 14)"
        )
    try:
        proto, repairs = _export_dynamo(
            model,
            args,
            opset,
            method,
            input_names,
            output_names,
            dynamic_shapes,
            dynamic_axes,
            sink=sink,
            notes=sized.notes if sized is not None else None,
            guards=sized.guards if sized is not None else None,
        )
    except _capture_errors() as exc:
        raise_bad_module_input(exc)
        raise _DynamoUnfit(f"torch.export could not capture the model ({_cause(exc)})") from None
    except FixedDynamicSize as exc:  # the dynamo file would be wrong at other sizes (exporters/guards.py)
        raise _DynamoUnfit(str(exc)) from None
    except ConversionError as exc:
        raise _DynamoUnfit(f"the dynamo export cannot be converted down to opset {opset}: {exc}") from None
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure of torch's exporter: TorchScript may still work
        raise_bad_module_input(exc)
        raise _DynamoUnfit(f"the dynamo exporter failed ({_cause(exc)})") from None
    try:
        data = _finish(proto, opset, method, ir_version, choice, sink)
        verified = sized.run(model, args, data, proto, rtol, atol)
    except MissingKernelError:
        raise
    except ExportError as exc:  # VerificationError, a static dimension, a second size: TorchScript's file may hold
        raise _DynamoUnfit(f"the dynamo export failed its check ({exc})") from None
    return proto, data, verified, repairs


def _check_fallback(reason: str, opset: int, fallback: bool) -> None:
    """Raise :class:`ExportError` when the TorchScript fallback is not allowed or not possible."""
    if not fallback:
        raise ExportError(f"{reason}; pass fallback=True or dynamo=False to use the TorchScript exporter") from None
    if opset > _torchscript.MAX_OPSET:
        raise ExportError(
            f"{reason} and the TorchScript fallback supports opset <= {_torchscript.MAX_OPSET}, not {opset}"
        ) from None


def _check_opset_range(opset: int, dynamo: bool) -> None:
    if dynamo and not MIN_OPSET <= opset <= DYNAMO_MAX_OPSET:
        raise ValueError(
            f"opset {opset} is out of range {MIN_OPSET}..{DYNAMO_MAX_OPSET} (dynamo exporter: "
            f"{DYNAMO_MIN_OPSET}..{DYNAMO_MAX_OPSET}, TorchScript fallback below {DYNAMO_MIN_OPSET})"
        )
    if not dynamo and not MIN_OPSET <= opset <= _torchscript.MAX_OPSET:
        raise ValueError(
            f"opset {opset} is out of the TorchScript exporter's range {MIN_OPSET}..{_torchscript.MAX_OPSET}; "
            "use dynamo=True for higher opsets"
        )


def _default_opset(proto: onnx.ModelProto) -> int | None:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _finish(proto: onnx.ModelProto, opset: int, method: str, ir_version: int | None, choice, sink=None) -> bytes | str:
    """Stamp the lowest IR version the opsets need (or ``ir_version``), validate, and check the
    graph against the runtime target's known faults (issue 12's hooks). Returns what verification
    runs: the serialized model, or (over 2 GiB, ``sink``) the path of the file beside its data.
    """
    if choice is not None:
        choice.repair_graph(proto)  # value-preserving rewrites the target needs (targets/repairs.py)
    apply_ir_version(proto, ir_version)
    path = sink.save(proto) if sink is not None else None
    _validate(proto, opset, method, path)
    if choice is not None:
        choice.check_graph(proto)
    return proto.SerializeToString() if path is None else path


def _validate(proto: onnx.ModelProto, opset: int, method: str, path: str | None = None) -> None:
    got = _default_opset(proto)
    if got != opset:
        raise ExportError(
            f"the exporter produced opset {got}, not the requested {opset} (its down-conversion failed); "
            f"export at opset {got} or use dynamo=False"
        )
    for node_type in _refused_nodes(method, opset):
        left = [n.name or n.op_type for n in proto.graph.node if n.op_type == node_type]
        if left:
            raise ExportError(f"{node_type} nodes remain after lowering with {method!r}: {left}")
    try:
        onnx.checker.check_model(proto if path is None else path, full_check=True)  # a path: external data
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"the exported model is not valid ONNX: {str(exc).splitlines()[0]}") from None


def _refused_nodes(method: str, opset: int) -> list[str]:
    """The native-form nodes (``DeformConv``, ``GridSample``) of the ops whose ``method`` lowering is another form."""
    refused = []
    for op, entry in registry.OPS.items():
        chosen = registry.resolve(op, method, opset)
        refused += [low.node for low in entry.lowerings.values() if low.node is not None and low is not chosen]
    return refused


def _write(data: bytes, f) -> Path | None:
    """Write ``data`` atomically: a temporary file in the same folder, then rename."""
    if hasattr(f, "write"):
        f.write(data)
        return None
    return write_bytes_atomic(f, data)


def _forward_names(model, args) -> list[str] | None:
    """Input names as the dynamo exporter picks them: ``forward``'s parameter names."""
    return parameter_names(model, len(args))
