"""One-call export: pick the exporter, lower deformable convolution, validate, verify, write atomically."""

from __future__ import annotations

import contextlib
import functools
import io
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from ._io import write_bytes_atomic
from .irversion import apply_ir_version, check_requested
from .exporters import dynamo as _dynamo
from .exporters import torchscript as _torchscript
from .lowering import resolve_method
from .semantics import MIN_OPSET, DeformConvSpec

#: Default opset when none is given: the standard-op lowerings at 17 run on the
#: widest set of runtimes (DirectML, older ONNX Runtime, OpenVINO); native needs 19.
DEFAULT_OPSET = 17
DEFAULT_NATIVE_OPSET = 19
#: Lowest opset the dynamo path reaches: it builds at 18 and onnx's version
#: converter has no Reshape adapter below 14.
DYNAMO_MIN_OPSET = _dynamo.MIN_OPSET
DYNAMO_MAX_OPSET = 23


class ExportError(RuntimeError):
    """The export did not produce a valid model; no file was written."""


class VerificationError(ExportError):
    """The exported model's ONNX Runtime outputs differ from PyTorch's; no file was written."""


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
        fallback_reason: why the dynamo exporter was abandoned, if it was.
        export_seconds: wall time of the export call.
    """

    path: Path | None
    opset: int
    method: str
    exporter: str
    node_count: int
    file_size: int
    max_error: float | None = None
    worst_output: str | None = None
    fallback_reason: str | None = None
    export_seconds: float = 0.0
    op_types: list[str] = field(default_factory=list)


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
    rtol: float = 1e-4,
    atol: float = 1e-4,
    fallback: bool = True,
    target: str | None = None,
    force: bool = False,
    ir_version: int | None = None,
) -> ExportReport:
    """Export ``model`` to ONNX with deformable convolution lowered by ``method``.

    Args:
        model: a module calling ``torchvision.ops.deform_conv2d`` (any number of times).
        args: example inputs (tensors), as for ``torch.onnx.export``.
        f: output path, or a binary file-like object.
        opset_version: target default-domain opset (11 to 20 for TorchScript,
            14 to 23 for dynamo, 15 to 23 with dynamic shapes). Default 17 (19 for
            ``method="native"``).
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
        rtol, atol: verification tolerance: ``|ort - torch| <= atol + rtol*|torch|``.
        fallback: when ``torch.export`` cannot capture the model (e.g.
            data-dependent control flow), warn naming the cause and use the
            TorchScript exporter; ``False`` raises :class:`ExportError` instead.
        target: a runtime (``deform_onnx.TARGETS``, e.g. ``"tensorrt"``,
            ``"onnxruntime<1.25"``): picks method and opset (explicit ones win;
            an opset below the dynamo range that the target picked selects the
            TorchScript exporter), and the emitted graph is checked against the
            target's known faults. See :func:`deform_onnx.targets.resolve_target`.
        force: turn a combination the target is known to mishandle into a warning.
        ir_version: IR version of the file; default: the lowest its opsets need
            (:mod:`deform_onnx.irversion`).

    Returns:
        :class:`ExportReport`.

    Raises:
        ValueError: unknown method or target, a combination the target mishandles (without
            ``force``), an ``ir_version`` below what the opset needs, opset out of range, a
            method the opset cannot hold, or
            a ``DeformConv2d`` module with a bad stride/padding/dilation or called with
            tensors of the wrong rank or channel count (the message names the module).
        ExportError: the exporter failed or produced an invalid model (nothing written).
        VerificationError: ORT and PyTorch outputs differ beyond tolerance (nothing written).
    """
    # Hook (issue 12): a runtime target picks method/opset; explicit values win.
    from .targets import hooks as _target_hooks

    choice = _target_hooks.for_export(target, method, opset_version, dynamo, force)
    method, opset_version, dynamo = choice.method, choice.opset, choice.dynamo
    if opset_version is None:
        opset_version = DEFAULT_NATIVE_OPSET if method == "native" else DEFAULT_OPSET
    check_requested(ir_version, opset_version)  # hook (issue 12): fail before the export
    from ._compat import check_dynamo_dynamic  # hook (issue 12): older torch releases

    check_dynamo_dynamic(dynamo, dynamic_shapes is not None or dynamic_axes is not None)
    if not hasattr(f, "write") and not Path(f).parent.is_dir():
        # Fail before the (slow) export, not after it.
        raise FileNotFoundError(f"output folder {Path(f).parent} does not exist; create it first")
    lowering = resolve_method(method, opset_version)
    if not isinstance(args, tuple):
        args = (args,)
    _check_opset_range(opset_version, dynamo, dynamic=dynamic_shapes is not None or dynamic_axes is not None)
    training = {m: m.training for m in model.modules()}
    model.eval()  # export and verify in eval mode; each module's own mode is restored after
    try:
        return _export_eval(
            model, args, f, opset_version, lowering.name, dynamo, input_names, output_names,
            dynamic_shapes, dynamic_axes, verify, rtol, atol, fallback, choice=choice, ir_version=ir_version,
        )
    finally:
        for module, mode in training.items():
            module.training = mode


def _export_eval(
    model, args, f, opset_version, method, dynamo, input_names, output_names,
    dynamic_shapes, dynamic_axes, verify, rtol, atol, fallback, choice=None, ir_version=None,
) -> ExportReport:
    start = time.perf_counter()
    fallback_reason = None
    checks = check_deform_modules(model)
    try:
        if dynamo:
            what = None
            try:
                proto = _export_dynamo(
                    model, args, opset_version, method, input_names, output_names, dynamic_shapes, dynamic_axes
                )
            except _capture_errors() as exc:
                _raise_bad_deform_input(exc)
                fallback_reason = _cause(exc)
                what = f"torch.export could not capture the model ({fallback_reason})"
            else:
                got = _default_opset(proto)
                if got != opset_version:
                    # torch keeps the build opset when onnx's version converter lacks an adapter
                    # for some op of the model (e.g. Shape 15->14, Identity 16->15).
                    fallback_reason = (
                        f"onnx's version converter could not take the dynamo export from opset {got} "
                        f"down to {opset_version}"
                    )
                    what = fallback_reason
            if what is not None:
                if not fallback:
                    raise ExportError(
                        f"{what}; pass fallback=True or dynamo=False to use the TorchScript exporter"
                    ) from None
                if opset_version > _torchscript.MAX_OPSET:
                    raise ExportError(
                        f"{what} and the TorchScript fallback supports opset <= {_torchscript.MAX_OPSET}, "
                        f"not {opset_version}"
                    ) from None
                warnings.warn(
                    f"deform_onnx: {what}; falling back to the TorchScript exporter "
                    "(it records the branches taken for the example inputs)",
                    stacklevel=3,  # the caller of export()
                )
        if not dynamo or fallback_reason is not None:
            if input_names is None:
                input_names = _forward_names(model, args)
            if dynamic_axes is None and dynamic_shapes is not None:
                dynamic_axes = _dynamic_shapes_to_axes(dynamic_shapes, input_names, model, args)
            proto = _export_torchscript(
                model, args, opset_version, method, input_names, output_names, dynamic_axes
            )
    except _BadDeformInput as exc:  # raised by a check in the TorchScript trace: a plain ValueError
        raise ValueError(str(exc)) from None
    finally:
        checks.close()
    seconds = time.perf_counter() - start

    # Hooks (issue 12): the lowest IR version the opsets need; the target's graph rules.
    apply_ir_version(proto, ir_version)
    _validate(proto, opset_version, method)
    if choice is not None:
        choice.check_graph(proto)
    report = ExportReport(
        path=None,
        opset=opset_version,
        method=method,
        exporter="torchscript" if (not dynamo or fallback_reason) else "dynamo",
        node_count=len(proto.graph.node),
        file_size=0,
        fallback_reason=fallback_reason,
        export_seconds=seconds,
        op_types=sorted({n.op_type for n in proto.graph.node}),
    )
    data = proto.SerializeToString()
    if verify:
        report.max_error, report.worst_output = _verify(model, args, data, rtol, atol)
    report.file_size = len(data)
    report.path = _write(data, f)
    return report


class _BadDeformInput(ValueError):
    """A ``DeformConv2d`` module got arguments or tensors that torchvision cannot take."""


def check_deform_modules(model: torch.nn.Module) -> contextlib.ExitStack:
    """Check every ``torchvision.ops.DeformConv2d`` in ``model`` before running or exporting it.

    Its stride, padding and dilation now, and the shapes of its input, offset
    and mask when it is called (forward pre-hooks, removed when the returned
    stack is closed). Both exporters run the model, and torchvision's kernel
    reports these as an unnamed C++ check (``stride_h: -1 stride_w: -1``) or
    kills the process (stride 0: division by zero).

    Raises:
        ValueError: naming the module and the problem (from :class:`DeformConvSpec`).
    """
    import torchvision

    stack = contextlib.ExitStack()
    for name, module in model.named_modules():
        if not isinstance(module, torchvision.ops.DeformConv2d):
            continue
        where = f"{name or 'model'} (DeformConv2d)"
        try:
            DeformConvSpec(
                in_channels=module.in_channels,
                out_channels=module.out_channels,
                kernel=module.kernel_size,
                stride=module.stride,
                padding=module.padding,
                dilation=module.dilation,
                groups=module.groups,
            )
        except ValueError as exc:
            stack.close()
            raise ValueError(f"{where}: {exc}") from None
        handle = module.register_forward_pre_hook(functools.partial(_check_deform_call, where), with_kwargs=True)
        stack.callback(handle.remove)
    return stack


def _check_deform_call(where: str, module, args: tuple, kwargs: dict) -> None:
    import inspect

    bound = inspect.signature(module.forward).bind(*args, **kwargs).arguments
    x, offset, mask = bound.get("input"), bound.get("offset"), bound.get("mask")

    def dim(d):
        if isinstance(d, torch.Tensor):  # TorchScript tracing: sizes are 0-D tensors (the example's)
            return int(d)
        # Symbolic (dynamic) dims are None: comparing them would add guards in torch.export.
        return d if isinstance(d, int) else None

    def shape(t):
        return None if t is None else tuple(dim(d) for d in t.shape)

    if not isinstance(x, torch.Tensor) or not isinstance(offset, torch.Tensor):
        return
    try:
        DeformConvSpec.from_shapes(
            shape(x),
            tuple(module.weight.shape),
            shape(offset),
            shape(mask) if isinstance(mask, torch.Tensor) else None,
            stride=module.stride,
            padding=module.padding,
            dilation=module.dilation,
            groups=module.groups,
        )
    except ValueError as exc:
        raise _BadDeformInput(f"{where}: {exc}") from None


def _raise_bad_deform_input(exc: BaseException) -> None:
    """Re-raise a :class:`_BadDeformInput` that torch.export wrapped, as a plain one-line ``ValueError``."""
    inner = exc
    while inner is not None and not isinstance(inner, _BadDeformInput):
        inner = inner.__cause__ or inner.__context__
    if inner is not None:
        raise ValueError(str(inner)) from None


def _check_opset_range(opset: int, dynamo: bool, dynamic: bool = False) -> None:
    if dynamo and not DYNAMO_MIN_OPSET <= opset <= DYNAMO_MAX_OPSET:
        raise ValueError(
            f"opset {opset} is out of the dynamo path's range {DYNAMO_MIN_OPSET}..{DYNAMO_MAX_OPSET} "
            "(the dynamo exporter builds at opset 18 and onnx's version converter cannot go below 14); "
            "use dynamo=False for opsets 11 to 13"
        )
    if dynamo and dynamic and opset < _dynamo.DYNAMIC_MIN_OPSET:
        raise ValueError(
            f"dynamic shapes on the dynamo path need opset >= {_dynamo.DYNAMIC_MIN_OPSET}, not {opset} "
            "(run-time sizes are read with Shape, and onnx's version converter has no Shape adapter "
            f"from 15 to 14); use opset_version >= {_dynamo.DYNAMIC_MIN_OPSET} or dynamo=False"
        )
    if not dynamo and not MIN_OPSET <= opset <= _torchscript.MAX_OPSET:
        raise ValueError(
            f"opset {opset} is out of the TorchScript exporter's range {MIN_OPSET}..{_torchscript.MAX_OPSET}; "
            "use dynamo=True for higher opsets"
        )


def _capture_errors() -> tuple[type[BaseException], ...]:
    from torch.onnx._internal.exporter import _errors

    return (_errors.TorchExportError,)


def _cause(exc: BaseException) -> str:
    """A one-line reason from the innermost exception of a torch.export failure.

    Adds the user's source line when torch names it ("The following call raised
    this error"): the guard's own text (``Eq(u0, 1)``) does not say where it is.
    """
    inner = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = str(inner).strip()
    message = text.splitlines()[0][:300] if text else ""
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
def _quiet():
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


def _export_dynamo(model, args, opset, method, input_names, output_names, dynamic_shapes, dynamic_axes):
    from torch.onnx._internal.exporter import _errors

    table = _dynamo.translation_table(method, opset)
    with _quiet(), _lowering_value_errors(_errors.ConversionError):
        program = torch.onnx.export(
            model,
            args,
            dynamo=True,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            dynamic_axes=dynamic_axes,
            custom_translation_table=table,
            verbose=False,
            optimize=True,
        )
    return program.model_proto


@contextlib.contextmanager
def _lowering_value_errors(wrapper: type[BaseException]):
    """Re-raise a ``ValueError`` of the lowering (e.g. a kernel larger than the padded
    input) that the exporter wrapped in ``wrapper``, as itself: its message names the fix."""
    try:
        yield
    except wrapper as exc:
        inner = exc
        while inner.__cause__ is not None:
            inner = inner.__cause__
        if isinstance(inner, ValueError):
            raise ValueError(str(inner)) from None
        raise


def _export_torchscript(model, args, opset, method, input_names, output_names, dynamic_axes):
    buffer = io.BytesIO()
    with _torchscript.registered(method), _quiet():
        torch.onnx.export(
            model,
            args,
            buffer,
            dynamo=False,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )
    return onnx.load_from_string(buffer.getvalue())


def _default_opset(proto: onnx.ModelProto) -> int | None:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _validate(proto: onnx.ModelProto, opset: int, method: str) -> None:
    got = _default_opset(proto)
    if got != opset:
        raise ExportError(
            f"the exporter produced opset {got}, not the requested {opset} (its down-conversion failed); "
            f"export at opset {got} or use dynamo=False"
        )
    if method != "native":
        left = [n.name or n.op_type for n in proto.graph.node if n.op_type == "DeformConv"]
        if left:
            raise ExportError(f"DeformConv nodes remain after lowering with {method!r}: {left}")
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"the exported model is not valid ONNX: {str(exc).splitlines()[0]}") from None


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _flatten(v)]
    return []


def _verify(model, args, data: bytes, rtol: float, atol: float) -> tuple[float, str | None]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    feeds_in = _flatten(args)
    inputs = session.get_inputs()
    if len(inputs) > len(feeds_in):
        raise ExportError(f"the model has {len(inputs)} inputs but {len(feeds_in)} example tensors were given")
    # Exporters drop inputs that the graph does not use; keep the order of the rest.
    feeds = {i.name: a for i, a in zip(inputs, feeds_in[: len(inputs)])}
    got = session.run(None, feeds)
    with torch.no_grad():
        expected = _flatten(model(*args))
    names = [o.name for o in session.get_outputs()]
    worst, worst_name = 0.0, None
    for name, g, e in zip(names, got, expected):
        if g.shape != e.shape:
            raise VerificationError(f"output {name!r}: ONNX Runtime shape {g.shape} != PyTorch shape {e.shape}")
        if e.size == 0:
            continue
        diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
        err = float(np.nanmax(diff)) if diff.size else 0.0
        if err >= worst:
            worst, worst_name = err, name
        if not np.all(diff <= atol + rtol * np.abs(e.astype(np.float64))):
            raise VerificationError(
                f"output {name!r} differs from PyTorch: max abs error {err:.3g} "
                f"(atol={atol}, rtol={rtol}); no file was written"
            )
    return worst, worst_name


def _write(data: bytes, f) -> Path | None:
    """Write ``data`` atomically: a temporary file in the same folder, then rename."""
    if hasattr(f, "write"):
        f.write(data)
        return None
    return write_bytes_atomic(f, data)


def _forward_names(model, args) -> list[str] | None:
    """Input names as the dynamo exporter picks them: ``forward``'s parameter names."""
    import inspect

    try:
        params = [
            p.name
            for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None
    return params[: len(args)] if len(params) >= len(args) else None


def _dynamic_shapes_to_axes(dynamic_shapes, input_names, model, args) -> dict | None:
    """Turn dynamo ``dynamic_shapes`` into TorchScript ``dynamic_axes`` (for the fallback)."""
    if input_names is None:
        raise ValueError("give input_names so that dynamic_shapes can be mapped for the TorchScript fallback")
    if isinstance(dynamic_shapes, dict):
        specs = [dynamic_shapes.get(n) for n in input_names]
    else:
        specs = list(dynamic_shapes)
    axes = {}
    for name, spec in zip(input_names, specs):
        if not spec:
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        dims = {int(axis): getattr(dim, "__name__", None) or str(dim) for axis, dim in items if dim is not None}
        if dims:
            axes[name] = dims
    return axes or None
