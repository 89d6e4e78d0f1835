"""One-call export: pick the exporter, lower the op family, validate, verify, write atomically.

:func:`export` resolves the user's keywords into one :class:`~.options.ExportOptions`
(the target's picks, ``auto``, the opset) and runs the named steps: the checks that
need no export (:func:`_check_before`), the export on the dynamo path or the
TorchScript one (:mod:`.paths`), the report, the write (:mod:`.finish`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..builder import written as _written
from ..core.errors import BadModuleInput, ExportError, VerificationError
from ..core.irversion import check_requested
from ..core.opsets import FAMILY_MIN_OPSET as MIN_OPSET
from ..exporters import dynamo as _dynamo
from ..exporters import rewriters as _rewriters
from ..exporters import torchscript as _torchscript
from ..exporters.module_state import keeping_state
from ..formats import format_for, require
from ..ops import registry
from . import paths
from .bfloat16 import choose_opset as _bfloat16_opset  # bfloat16: opset 22 (verified in dynamic_check)
from .deployed_check import check_arguments
from .dynamic_check import SizeCheck
from .finish import write
from .large import ExternalSink, is_large
from .options import ExportOptions
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
        method: the form the file holds (``native``, ``grid_sample`` or ``gather``; ``"grid_sample+gather"``
            when its calls took two), read from the ops each call's lowering wrote
            (:mod:`deform_onnx.builder.written`): under ``grid_sample`` a dynamic map is written with the
            gather sampler, a 5-D ``F.grid_sample`` below opset 20 as gather. The method asked when the
            model has no such call (every method writes the same graph then).
        forms: ``{op: form}`` per deformable op of the model (``deform_conv2d``, ``grid_sample``).
        exporter: ``"dynamo"`` or ``"torchscript"`` (the one that actually ran).
        node_count: nodes in the main graph.
        file_size: bytes written.
        max_error: max abs difference ORT vs PyTorch over all outputs (``None`` without verify).
        worst_output: name of the output with ``max_error``.
        tolerances: output name -> the :class:`Tolerance` it was checked with (dtype, rtol,
            atol, whether given or the dtype's default); empty without verify.
        repairs: down-conversion adapters applied to the dynamo export (one line each: adapter
            ``<op>_<from>_<to>``, the op, the opset step, the reason; see :mod:`deform_onnx.conversion`),
            then the target's value-preserving graph repairs (``"target 'ncnn': ..."``;
            :mod:`deform_onnx.targets.repairs`).
        fallback_reason: why the dynamo exporter was abandoned, if it was.
        export_seconds: wall time of exporting, converting, checking and verifying (all but the write).
        op_types: sorted op types of the main graph.
        checks: output name -> :class:`OutputCheck` at the example size (reference, errors, rule: docs/verification.md).
        checked_shapes: input shapes the file ran at, per size (the example, then each second size).
        size_checks, second_size_seconds, notes: :class:`Verified` at each second size, their cost, and
            what a check could not do or found in the reference (guard capture failed, NaN, ...).
        onnxruntime: the ONNX Runtime distribution the file was verified in (CPU execution
            provider), e.g. ``"onnxruntime-gpu 1.31.1"``; ``None`` when not verified, or verified on
            OpenVINO (a bfloat16 file: ``notes`` says so).
        format: the format written (``"onnx"``, ``"openvino"``, ``"executorch"``, ``"litert"``, ``"coreml"``).
        runtimes: with ``verify_runtimes``, or a ``target`` that names a deployed runtime (and an ``.xml`` file):
            one line per deployed runtime the file also ran on (version, max error); ``notes`` says so too.
            :attr:`ran_in` lists every runtime the artifact ran in, in one place.
        runtime: the runtime a torch.export format's file ran in (``"ExecuTorch (XNNPACK)"``,
            ``"LiteRT"``); ``None`` for ONNX (see ``onnxruntime``) and for Core ML (not run on Linux).
        verified: torch.export formats: whether the file ran in its runtime and matched PyTorch
            (``False`` for Core ML, which is converted and validated but not run); ``None`` for ONNX.
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
    forms: dict[str, str] = field(default_factory=dict)
    format: str = "onnx"
    runtimes: list[str] = field(default_factory=list)
    runtime: str | None = None
    verified: bool | None = None

    @property
    def ran_in(self) -> list[str]:
        """Every runtime the written artifact ran in and matched PyTorch, in order: the one that verified it
        (the ONNX Runtime distribution for an ONNX file, ``"OpenVINO"`` for a bfloat16 file ONNX Runtime cannot run,
        ``"ExecuTorch (XNNPACK)"`` / ``"LiteRT"`` for theirs), then each deployed runtime of :attr:`runtimes`
        (``"mnn 3.6.1"``, ``"openvino 2026.4.1 (IR, plain Core)"``). Empty when it ran nowhere (``verify=False``;
        Core ML, which does not run on Linux).
        """
        first = []
        if self.format == "onnx" and self.max_error is not None:
            first = [self.onnxruntime or "OpenVINO"]
        elif self.runtime is not None and self.verified:
            first = [self.runtime]
        return first + [line.split(":")[0] for line in self.runtimes]


@keeping_state  # hook (issue 30): the model's caches and buffers are the same after export as before
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
    format: str | None = None,
    verify_runtimes: Sequence[str] | None = None,
    keep_artifacts: str | os.PathLike | None = None,
    precision: str | None = None,
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
        format: the output format (:data:`deform_onnx.formats.FORMATS`: ``"onnx"``, ``"openvino"``,
            ``"executorch"``, ``"litert"``, ``"coreml"``); default: from ``f``'s suffix (``.onnx``, ``.xml``,
            ``.pte``, ``.tflite``, ``.mlpackage``), ONNX for a file object. Formats other than ONNX are
            written and proved by their writer module (:mod:`deform_onnx.formats`).
        verify_runtimes: deployed runtimes (:func:`deform_onnx.check_runtimes`' names: ``mnn``, ``ncnn``,
            ``tflite``, ``tvm``, ``onnx2torch``, ``openvino``, ...) the verified file is also converted with (their
            own converter, in a cached venv each) and run on, against PyTorch on ``args``, before it is written.
            Default (``None``): the runtime ``target`` names when it is one of them (``target="mnn"`` runs the
            file in MNN; ``openvino-extension`` in OpenVINO), none otherwise or with ``verify=False``; ``()``
            opts out. ``report.runtimes`` and ``report.notes`` say where the file ran.
        keep_artifacts: a folder for those converters' outputs (``.mnn``, ``.ncnn.param``/``.bin``, ``.tflite``,
            OpenVINO ``.xml``/``.bin``), named after ``f``; kept only when every runtime matched. A missing folder
            (``FileNotFoundError``), a file or one it cannot write in is refused before any work.
        precision: the compute precision of a Core ML package (``.mlpackage``): ``"float32"`` (default) or
            ``"float16"`` (coremltools' own default); other formats refuse it (their precision is the model's dtype).

    Returns:
        :class:`ExportReport` (exporter used, repairs, tolerances, max error).

    Raises:
        ValueError: an unknown format or suffix, unknown method or target, a combination the target mishandles (without
            ``force``), an ``ir_version`` below what the opset needs, opset out of range, a
            method the opset cannot hold, or
            a ``DeformConv2d`` module with a bad stride/padding/dilation or called with
            tensors of the wrong rank or channel count (the message names the module).
        ExportError: the exporter failed or produced an invalid model, or ONNX Runtime has
            no kernel for some node at its dtype (e.g. float64 ``Conv``: the message names
            it and offers ``verify=False``); nothing written.
        VerificationError: ORT and PyTorch outputs differ beyond tolerance, or a runtime of ``verify_runtimes``
            did not run the file or differs (naming it and by how much); nothing written.
        ExportError: with dynamic axes, the file keeps a requested dynamic dimension static or fails at a
            second size (named, with what froze and what to do; dynamo: after the fallback); nothing written.
    """
    if keep_artifacts is not None:  # a folder it could not keep them in: refused before any conversion work
        from ..core.atomic_io import check_folder

        check_folder(keep_artifacts, "keep_artifacts")
    fmt = format_for(f, format)
    if precision is not None and fmt.name != "coreml":
        raise ValueError(f"precision= is not taken when writing {fmt.title} files: it is a Core ML (.mlpackage) "
                         "option; the file computes in the model's dtype (cast the model and inputs instead)")  # fmt: skip
    if fmt.writer is not None:  # another format: its writer module writes and proves it (deform_onnx.formats)
        settings = {k: v for k, v in locals().items() if k not in ("model", "args", "f", "format", "fmt")}
        require(fmt)
        return fmt.load_writer()(model, args, f, **settings)
    choice, opset = _choose(model, args, target, method, opset_version, dynamo, force, dynamic_shapes or dynamic_axes)
    _check_before(choice, opset, ir_version, dynamic_shapes is not None or dynamic_axes is not None, f)
    check_arguments(verify_runtimes or ())  # before any export or conversion work
    # Suggestions name methods that work on the path that will run (the fallback reaches 11).
    lowest = DYNAMO_MIN_OPSET if choice.dynamo and not fallback else None
    opts = ExportOptions(
        opset=opset,
        method=registry.model_method(choice.method, opset, path_min_opset=lowest),
        dynamo=choice.dynamo,
        input_names=input_names,
        output_names=output_names,
        dynamic_shapes=dynamic_shapes,
        dynamic_axes=dynamic_axes,
        verify=verify,
        rtol=rtol,
        atol=atol,
        fallback=fallback,
        ir_version=ir_version,
        verify_shapes=verify_shapes,
        choice=choice,
    )
    if not isinstance(args, tuple):
        args = (args,)
    _check_opset_range(opset, choice.dynamo)
    # Hook (issue 18): sizes stay symbolic through detector code's size tensors and linspace
    # while exporting (deform_onnx.exporters.rewriters); undone on exit. Hook (issue 12): graph forms.
    deployed = (target_runtimes(target, verify_runtimes, verify), keep_artifacts)
    with _eval_mode(model), choice.emitting(), _rewriters.while_exporting():
        return _export_eval(model, args, f, opts, deployed)


def target_runtimes(target: str | None, verify_runtimes: Sequence[str] | None, verify: bool = True) -> list[str]:
    """The deployed runtimes an export runs its file on: ``verify_runtimes`` when given (``()``: none), else the
    family ``target`` names (``mnn``, ``ncnn``, ``tflite``, ``tvm``, ``onnx2torch``, ``openvino``; target
    ``openvino-extension`` runs in ``openvino``, ``onnx2torch-native`` in ``onnx2torch``), else none; none without
    ``verify``.
    """
    if verify_runtimes is not None:
        return list(verify_runtimes)
    if not verify or target is None:
        return []
    from ..runtimes.deployed import family

    try:
        fam = family(target.removesuffix("-extension").removesuffix("-native"))
    except ValueError:  # a target that is no deployed family (tensorrt, directml, onnxruntime<1.25, ...)
        return []
    return [] if fam.name == "onnxruntime" else [fam.name]


def _choose(model, args, target, method, opset, dynamo: bool, force: bool, dynamic=None):
    """The target's :class:`~deform_onnx.targets.Choice` (explicit values win) and the opset to export at.

    Opsets a model's calls need on the target (issue 19), bfloat16's 22, else 17 (19 for ``native``).
    """
    from ..targets import hooks as _target_hooks
    from ..targets import needs as _target_needs

    choice = _target_hooks.for_export(target, method, opset, dynamo, force)
    _target_needs.for_model(choice, model, args, opset, dynamo, dynamic)
    chosen = _bfloat16_opset(model, args, choice.opset, choice.dynamo)  # bfloat16: opset 22 (bfloat16.py)
    if chosen is None:
        chosen = DEFAULT_NATIVE_OPSET if choice.method == "native" else DEFAULT_OPSET
    return choice, chosen


def _check_before(choice, opset: int, ir_version: int | None, dynamic: bool, f) -> None:
    """What fails before any export work: the IR version, dynamic shapes on an old torch, a missing folder."""
    check_requested(ir_version, opset)  # hook (issue 12)
    from ..core.torch_compat import check_dynamo_dynamic  # hook (issue 12): older torch releases

    check_dynamo_dynamic(choice.dynamo, dynamic)
    if not hasattr(f, "write") and not Path(f).parent.is_dir():
        # Fail before the (slow) export, not after it.
        raise FileNotFoundError(f"output folder {Path(f).parent} does not exist; create it first")


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    """Export and verify in eval mode; each module's own mode is restored after."""
    training = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for module, mode in training.items():
            module.training = mode


def _export_eval(model, args: tuple, f, opts: ExportOptions, deployed=((), None)) -> ExportReport:
    """Export, check and verify the file (dynamo path first), then write it and report."""
    start = time.perf_counter()
    checks = registry.check_modules(model)  # each op's checks of its modules (forward pre-hooks)
    sized = SizeCheck.plan(model, args, opts)
    sized.notes.extend(opts.choice.notes if opts.choice is not None else [])  # the opsets picked for the model's needs
    sink = ExternalSink(f) if is_large(model) else None  # over 2 GiB: external data (large.py)
    try:
        produced = paths.produce(model, args, opts, sized, sink)
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
    report = _report(produced, opts, sink, time.perf_counter() - start)
    sized.fill(report, produced.verified)
    if deployed[0]:  # hook (issue 28): each named runtime runs the file before it is written
        report.runtimes = _deployed(produced.data, model, args, f, opts, deployed)
        where = "; ".join(("openvino in this interpreter" if r == "openvino" else f"{r} in its cached venv")
                          for r in deployed[0])  # fmt: skip
        report.notes.append(f"the file ran in {', '.join(deployed[0])} ({where}) "
                            "against PyTorch before it was written: " + "; ".join(report.runtimes))  # fmt: skip
    if sink is not None:
        report.path = sink.commit()
    elif isinstance(produced.data, bytes):  # without a sink, finish() returns the serialized model
        report.path = write(produced.data, f)
    else:
        raise TypeError(f"internal error: expected the serialized model, got {type(produced.data).__name__}")
    return report


def _deployed(data, model, args: tuple, f, opts: ExportOptions, deployed) -> list[str]:
    """Run the file on ``verify_runtimes`` (:mod:`.deployed_check`); artifacts named after ``f``."""
    from .deployed_check import check_deployed

    if not isinstance(data, bytes):
        raise ValueError(
            "verify_runtimes: models over 2 GiB (external data) are not converted; pass "
            "verify_runtimes=() (a target that names a deployed runtime runs the file there by default)"
        )
    name = Path(f).name.lstrip(".") if not hasattr(f, "write") else "model.onnx"
    stem = name.split(".onnx")[0] if ".onnx" in name else Path(name).stem  # the CLI writes ".m.onnx.partial-PID"
    return check_deployed(data, model, args, deployed[0], deployed[1], (opts.rtol, opts.atol), stem)


def _report(produced: paths.Produced, opts: ExportOptions, sink: ExternalSink | None, seconds: float) -> ExportReport:
    """The :class:`ExportReport` of a produced file (before the second-size results and the path)."""
    proto, verified = produced.proto, produced.verified
    calls = _written.read(proto)  # the form each call was written in (one rule for every label)
    report = ExportReport(
        path=None,
        opset=opts.opset,
        method=_written.label(calls, opts.method),
        forms=_written.per_op(calls),
        exporter=produced.exporter,
        node_count=len(proto.graph.node),
        file_size=len(produced.data) if sink is None else sink.file_size(),
        repairs=[str(r) for r in produced.repairs],
        fallback_reason=produced.fallback_reason,
        export_seconds=seconds,
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
    return report


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
