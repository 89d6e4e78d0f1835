"""Export-time verification: run the file in ONNX Runtime and compare with PyTorch, per output dtype.

Default tolerances (``|ort - torch| <= atol + rtol * |torch|``, per output, by its dtype):

=========  ======  ======  =====================================================================
dtype      atol    rtol    why
=========  ======  ======  =====================================================================
float64    1e-8    1e-8    tighter than float32's resolution (eps 1.2e-7), so a float32 cast
                           hidden in the graph fails; float64 runs differ by ~1e-13
float32    1e-4    1e-4    the project's float32 rule (unit-scale outputs)
float16    1e-2    1e-2    see below: the runtime's own float16 Conv bound plus the rounding
                           of every sample
bfloat16   8e-2    8e-2    float16's bound with bfloat16's unit roundoff (2^-8, 8x float16's)
=========  ======  ======  =====================================================================

float16: PyTorch (CPU) and ONNX Runtime (CPU, which casts to float32 around ops
without a float16 kernel) both accumulate a convolution in float32 and round
the output once, so the runtime's own float16 ``Conv`` differs from PyTorch's
by up to one output ulp (2u|y|, u = 2^-11; measured: 4.9e-4 to 9.8e-4 on
unit-scale 3x3 convolutions with 16 and 64 channels). A deformable convolution
also rounds each sampled value and its product with the mask to float16 (2
roundings per term in torchvision's float16 column buffer, at least 2 in each
lowering), so the two results differ by at most ``4u * sum_k |w_k s_k| + 2u|y|``.
For the unit-scale layers the project tests (3x3 kernels, 16 input channels,
weights ~ N(0, 1/fan_in): ``sum |w s|`` about 8) that bound is about 1.7e-2;
rounding errors have random signs, so the expected worst case over a map is a
fraction of that, and 1e-2 (10 ulps at 1.0) is the default. An explicit
``rtol``/``atol`` always wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx
import torch

from .errors import ExportError, MissingKernelError, VerificationError


@dataclass(frozen=True)
class Tolerance:
    """The tolerance one output was checked with: ``|ort - torch| <= atol + rtol * |torch|``.

    Attributes:
        dtype: the output's dtype name (``float32``, ...).
        rtol, atol: relative and absolute tolerance.
        explicit: ``True`` when given to ``export()``, ``False`` for the dtype's default.
    """

    dtype: str
    rtol: float
    atol: float
    explicit: bool = False


#: dtype -> (rtol, atol); the reasoning is in this module's docstring.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (8e-2, 8e-2),
}


def tolerance_for(dtype, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for an output of ``dtype`` (numpy or torch dtype, or its name).

    Integer and boolean outputs must match exactly. ``rtol``/``atol`` given here win
    over the dtype's default (each on its own).
    """
    if isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:  # a name numpy does not know (bfloat16)
            name = str(dtype)
    if name == "bool" or "int" in name:
        default = (0.0, 0.0)
    else:
        default = DEFAULT_TOLERANCES.get(name, DEFAULT_TOLERANCES["float32"])
    return Tolerance(
        name,
        default[0] if rtol is None else float(rtol),
        default[1] if atol is None else float(atol),
        explicit=rtol is not None or atol is not None,
    )


def _flatten(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu()]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _flatten(v)]
    return []


def _numpy(t: torch.Tensor) -> np.ndarray:
    # numpy has no bfloat16: compare in float32, which holds every bfloat16 value exactly.
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


#: A float32 file that misses the float32 tolerance passes when its error against a float64 run of
#: the model is at most this many times PyTorch float32's own error against it (README, Verification
#: tolerance: two float32 implementations of the same function round differently, in different
#: summation orders, but a correct one is about as far from the exact result as PyTorch is; measured on
#: an ill-conditioned TPS layer: file 1.6e-4, PyTorch 2.3e-4. A wrong sample or mask is off by the
#: feature's own scale, orders of magnitude above either).
FLOAT64_FACTOR = 2.0
#: Output dtypes checked against an upcast float32 copy of the model (PyTorch's own low-precision
#: result is not a trustworthy reference: on CPU it may differ between runs, hold NaNs, or be a
#: pixel off on wide maps).
LOW_PRECISION = ("float16", "bfloat16")


@dataclass
class OutputCheck:
    """How one output passed (or would have): against which reference, with which errors, by which rule.

    Attributes:
        reference: ``"pytorch"`` (the model in its own dtype), ``"float32 copy"`` (an upcast copy of a
            float16/bfloat16 model on upcast inputs) or ``"float64 copy"`` (a float32 model in float64).
        error: max abs difference between the file and that reference (finite elements of the reference).
        pytorch_error: the model's own output against that reference (``None`` when the reference is the
            model itself).
        rule: the rule that passed the output, in words.
        note: what was wrong with PyTorch's own output, if anything (NaN/Inf where the reference has none).
    """

    reference: str
    error: float
    pytorch_error: float | None
    rule: str
    note: str | None = None


@dataclass
class Verified:
    """What :func:`verify` found: the worst error (against the reference used), its output, each output's
    tolerance and check, and the input shapes it ran at."""

    max_error: float
    worst_output: str | None
    tolerances: dict[str, Tolerance]
    checks: dict[str, OutputCheck] = field(default_factory=dict)
    shapes: list[tuple[int, ...]] = field(default_factory=list)


def make_session(data: bytes):
    """An ONNX Runtime CPU session on ``data``.

    Raises:
        MissingKernelError: ONNX Runtime has no kernel for some node at its dtype.
        ModuleNotFoundError: no ONNX Runtime distribution is installed (the message names
            the ``deform-onnx[onnxruntime]`` extra).
    """
    from .ort_distribution import require

    ort = require()  # whichever distribution provides it (onnxruntime, -gpu, -openvino, ...): all have the CPU EP
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        missing = _missing_kernel(str(exc), data)
        if missing is None:
            raise
        raise MissingKernelError(missing) from None


def run_file(session, args: tuple, input_names: list[str] | None = None) -> tuple[list[str], list[np.ndarray]]:
    """Run ``session`` on the tensors of ``args`` (in order; inputs the graph dropped are skipped).

    ``input_names``: the names the export gave the tensors of ``args``, in order. Exporters drop inputs
    that the graph does not use, and a dropped input in the middle shifts the rest: with the names, each
    file input gets its own tensor (OmDet-Turbo drops ``classes_attention_mask``; fed by position, the
    next input got its neighbour's tensor). Without them, the order of the rest is kept.
    """
    feeds_in = [_numpy(t) for t in _flatten(args)]
    inputs = session.get_inputs()
    if len(inputs) > len(feeds_in):
        raise ExportError(f"the model has {len(inputs)} inputs but {len(feeds_in)} example tensors were given")
    names = list(input_names or [])[: len(feeds_in)]
    if len(inputs) < len(feeds_in) and all(i.name in names for i in inputs):
        feeds = {i.name: feeds_in[names.index(i.name)] for i in inputs}
    else:
        feeds = {i.name: a for i, a in zip(inputs, feeds_in[: len(inputs)])}
    from .ort_distribution import require

    quiet = require().RunOptions()
    quiet.log_severity_level = 4  # a failure raises; its log line would only repeat it
    got = session.run(None, feeds, quiet)
    return [o.name for o in session.get_outputs()], got


def upcast_run(model, args: tuple, dtype: torch.dtype) -> tuple[list[torch.Tensor] | None, str | None]:
    """``model`` run as a deep copy cast to ``dtype`` on ``args`` with floating tensors cast to it.

    Returns ``(outputs, None)`` or ``(None, reason)`` when the copy cannot run in ``dtype``.
    """
    import copy

    try:
        twin = copy.deepcopy(model).to(dtype)
        cast = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        with torch.no_grad():
            return _flatten(twin(*cast)), None
    except Exception as exc:  # noqa: BLE001 - a kernel without this dtype, a model that hard-codes dtypes
        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {text}"


def _max_abs(a: np.ndarray, b: np.ndarray, where: np.ndarray | None = None) -> float:
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    diff[a == b] = 0.0  # equal infinities (masked logits, -inf in both) match; inf - inf is NaN
    if where is not None:
        diff = diff[where]
    return float(np.nanmax(diff)) if diff.size else 0.0


def verify(
    model,
    args: tuple,
    data: bytes,
    rtol: float | None = None,
    atol: float | None = None,
    session=None,
    where: str = "",
    input_names: list[str] | None = None,
) -> Verified:
    """Run ``data`` in ONNX Runtime (CPU) on ``args`` and compare with the model in PyTorch.

    The reference, per output dtype (README, Verification tolerance):

    - float16/bfloat16: an upcast float32 copy of the model on upcast inputs. The output passes when
      it is within the dtype's tolerance of that result, or at least as close to it as PyTorch's own
      low-precision output is. NaN/Inf in PyTorch's low-precision output where float32 has none is
      a fault of that reference (``OutputCheck.note``), not a mismatch. When the copy does not run in
      float32, the model's own output is the reference.
    - float32: the model's own output; when the file misses the tolerance, a float64 copy of the model:
      the output passes when its error against float64 is within :data:`FLOAT64_FACTOR` times PyTorch
      float32's own error against float64.
    - other dtypes: the model's own output (integers exactly).

    An explicit ``rtol``/``atol`` is a hard bound against the reference: the rules that compare with
    PyTorch's own error (as close as PyTorch float16; within 2x of PyTorch float32 against float64) apply
    with the dtype's default tolerance only.

    ``where`` (e.g. ``" at 2x3x160x96"``) is added to the messages. ``input_names``: the file's names
    for the tensors of ``args`` (see :func:`run_file`).

    Raises:
        ExportError: ONNX Runtime has no kernel for some node at its dtype
            (named, with ``verify=False`` as the way out), or the inputs do not fit.
        VerificationError: an output's shape or values differ beyond what the rules allow.
    """
    session = session if session is not None else make_session(data)
    names, got = run_file(session, args, input_names)
    with torch.no_grad():
        expected = _flatten(model(*args))
    upcast: dict[torch.dtype, tuple] = {}

    def reference(dtype: torch.dtype):
        if dtype not in upcast:
            upcast[dtype] = upcast_run(model, args, dtype)
        return upcast[dtype]

    rerun: list = []

    def again(index: int):
        """The model's own output once more (a model whose output changes between runs has no float64 rescue)."""
        if not rerun:
            with torch.no_grad():
                rerun.append(_flatten(model(*args)))
        return _numpy(rerun[0][index]) if index < len(rerun[0]) else None

    worst, worst_name, tolerances, checks = 0.0, None, {}, {}
    for index, (name, g, e) in enumerate(zip(names, got, expected)):
        tol = tolerance_for(e.dtype, rtol, atol)
        tolerances[name] = tol
        e_np = _numpy(e)
        if g.shape != e_np.shape:
            raise VerificationError(
                f"output {name!r}{where}: ONNX Runtime shape {g.shape} != PyTorch shape {e_np.shape}"
            )
        if e_np.size == 0:
            continue
        if tol.dtype in LOW_PRECISION:
            ref, why = reference(torch.float32)
            check = _low_precision(
                name, g, e_np, ref[index] if ref is not None and index < len(ref) else None, why, tol, where
            )
        else:
            check = _own_dtype(name, g, e_np, tol, where, reference if tol.dtype == "float32" else None, index, again)
        checks[name] = check
        if check.error >= worst:
            worst, worst_name = check.error, name
    shapes = [tuple(t.shape) for t in _flatten(args)]
    return Verified(worst, worst_name, tolerances, checks, shapes)


def _within(g: np.ndarray, ref: np.ndarray, tol: Tolerance) -> bool:
    g64, r64 = g.astype(np.float64), ref.astype(np.float64)
    return bool(np.all((g64 == r64) | (np.abs(g64 - r64) <= tol.atol + tol.rtol * np.abs(r64))))


def _source(tol: Tolerance) -> str:
    return "given" if tol.explicit else f"the {tol.dtype} default"


def _own_dtype(name, g, e, tol: Tolerance, where: str, reference, index: int, again=None) -> OutputCheck:
    """float32 (with the float64 rule), float64 and integer outputs."""
    err = _max_abs(g, e)
    if _within(g, e, tol):
        return OutputCheck("pytorch", err, None, f"within {_source(tol)} tolerance of PyTorch")
    head = (
        f"output {name!r} differs from PyTorch{where}: max abs error {err:.3g} "
        f"(atol={tol.atol}, rtol={tol.rtol}, {_source(tol)})"
    )
    if reference is None or tol.explicit:  # a given tolerance is a hard bound: no float64 rescue
        raise VerificationError(f"{head}; no file was written")
    repeat = again(index) if again is not None else None
    if repeat is None or not _within(repeat, e, tol):
        raise VerificationError(f"{head}; PyTorch's own output changes between runs, so no float64 check; "
                                "no file was written")  # fmt: skip
    ref, why = reference(torch.float64)
    if ref is None or index >= len(ref):
        raise VerificationError(f"{head}; the float64 check could not run ({why}); no file was written")
    r64 = _numpy(ref[index]).astype(np.float64)
    finite = np.isfinite(r64)
    if not np.all(np.isfinite(g)[finite]):
        raise VerificationError(f"{head}; the file gives NaN/Inf where float64 PyTorch has none; no file was written")
    file_err, torch_err = _max_abs(g, r64, finite), _max_abs(e, r64, finite)
    if file_err <= FLOAT64_FACTOR * torch_err:
        return OutputCheck(
            "float64 copy",
            file_err,
            torch_err,
            f"within {FLOAT64_FACTOR:g}x PyTorch float32's own error against float64 (the model is ill-conditioned "
            f"in float32: PyTorch float32 vs the file {err:.3g})",
        )
    raise VerificationError(
        f"{head}; against the model run in float64 the file is off by {file_err:.3g}, PyTorch float32 by "
        f"{torch_err:.3g} (allowed: {FLOAT64_FACTOR:g}x); no file was written"
    )


def _low_precision(name, g, e, ref, why, tol: Tolerance, where: str) -> OutputCheck:
    """float16/bfloat16 outputs against the float32 copy (``ref``), or against PyTorch when it did not run."""
    if ref is None:
        err = _max_abs(g, e)
        if _within(g, e, tol):
            return OutputCheck("pytorch", err, None, f"within {_source(tol)} tolerance of PyTorch "
                               f"(no float32 copy: {why})")  # fmt: skip
        raise VerificationError(
            f"output {name!r} differs from PyTorch{where}: max abs error {err:.3g} "
            f"(atol={tol.atol}, rtol={tol.rtol}, {_source(tol)}; the float32 copy of the model did not run: {why}); "
            "no file was written"
        )
    r32 = _numpy(ref).astype(np.float64)
    finite = np.isfinite(r32)
    note = None
    bad_torch = int(np.sum(~np.isfinite(e) & finite))
    if bad_torch:
        note = (f"PyTorch's {tol.dtype} output has {bad_torch} NaN/Inf where the float32 model has none "
                "(a fault of that reference, not of the file)")  # fmt: skip
    if not np.all(np.isfinite(g)[finite]):
        raise VerificationError(
            f"output {name!r}{where}: the file gives NaN/Inf where the float32 model has none; no file was written"
        )
    file_err = _max_abs(g, r32, finite)
    both = finite & np.isfinite(e)
    torch_err = _max_abs(e, r32, both)
    if _within(np.where(finite, g, 0), np.where(finite, r32, 0), tol):
        return OutputCheck("float32 copy", file_err, torch_err,
                           f"within {_source(tol)} tolerance of the float32 model", note)  # fmt: skip
    if file_err <= torch_err and not tol.explicit:  # a given tolerance is a hard bound
        return OutputCheck("float32 copy", file_err, torch_err,
                           f"at least as close to the float32 model as PyTorch {tol.dtype}", note)  # fmt: skip
    raise VerificationError(
        f"output {name!r} differs from the float32 model{where}: max abs error {file_err:.3g} "
        f"(atol={tol.atol}, rtol={tol.rtol}, {_source(tol)}), more than PyTorch's own {tol.dtype} output "
        f"({torch_err:.3g}); no file was written"
    )


def _missing_kernel(text: str, data: bytes) -> str | None:
    """One line for ORT's "Could not find an implementation for Conv(11) node with name 'x'"."""
    match = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", text)
    if match is None:
        return None
    op, _kernel_version, node_name = match.groups()  # the kernel's since-version (Conv(11)), not the file's opset
    dtype = _node_input_dtype(data, node_name)
    of = f"{dtype} " if dtype else ""
    opset = _file_opset(data)
    at = f"opset {opset}, " if opset is not None else ""
    return (
        f"ONNX Runtime (CPU) has no {of}kernel for {op} ({at}node {node_name!r}), so the "
        f"exported file cannot be verified here; pass verify=False (CLI: --no-verify) to write it unverified "
        f"(runtimes with {of}{op}: see README, Runtime support), or export the model in float32"
    )


def _file_opset(data: bytes) -> int | None:
    """The file's default-domain opset (what the message names; ORT's text names its kernel's version)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _node_input_dtype(data: bytes, node_name: str) -> str | None:
    """The element type of the named node's first input (after shape inference), e.g. ``float64``."""
    try:
        proto = onnx.shape_inference.infer_shapes(onnx.load_from_string(data))
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    node = next((n for n in proto.graph.node if n.name == node_name), None)
    if node is None or not node.input:
        return None
    infos = [*proto.graph.input, *proto.graph.value_info, *proto.graph.initializer]
    for info in infos:
        if info.name == node.input[0]:
            elem = info.data_type if isinstance(info, onnx.TensorProto) else info.type.tensor_type.elem_type
            return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else None
    return None
