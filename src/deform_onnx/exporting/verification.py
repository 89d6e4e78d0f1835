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

The table and the elementwise rule live in :mod:`deform_onnx.proof.compare` (the one comparison every
runner's outputs go through); :class:`Tolerance`, :func:`tolerance_for` and :data:`DEFAULT_TOLERANCES` are
re-exported here. This module adds the references (PyTorch, its float32 and float64 copies) and their rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.errors import ExportError, UndefinedReferenceError, VerificationError
from ..proof.compare import DEFAULT_TOLERANCES, Tolerance, close, compare_output, max_abs, tolerance_for, within
from ..runtimes.sessions import _numpy, input_tensors, make_session, output_tensors, run_file
from .choices import discrete_flip
from .pairing import check_count, order_error, swapped_with
from .pytorch_runs import copy_run as _copy_run
from .pytorch_runs import own_run as _own_run
from .pytorch_runs import run_pytorch, upcast_run

#: A float32 file that misses the float32 tolerance passes when its error against a float64 run of
#: the model is at most this many times PyTorch float32's own error against it (docs/verification.md,
#: Which reference: two float32 implementations of the same function round differently, in different
#: summation orders, but a correct one is about as far from the exact result as PyTorch is; measured on
#: an ill-conditioned TPS layer: file 1.6e-4, PyTorch 2.3e-4. A wrong sample or mask is off by the
#: feature's own scale, orders of magnitude above either).
FLOAT64_FACTOR = 2.0
#: Output dtypes checked against an upcast float32 copy of the model (PyTorch's own low-precision
#: result is not a trustworthy reference: on CPU it may differ between runs, hold NaNs, or be a
#: pixel off on wide maps).
LOW_PRECISION = ("float16", "bfloat16")
#: The end of an :class:`UndefinedReferenceError`'s message (a second-size check replaces it with its own advice).
UNDEFINED_TAIL = "; no file was written (check at sizes where the model is defined, or pass verify=False)"


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
    tolerance and check, the input shapes it ran at, and the runtime it ran on (``"ONNX Runtime"``, or
    ``"OpenVINO"`` for a bfloat16 file ONNX Runtime's CPU provider cannot run).
    """

    max_error: float
    worst_output: str | None
    tolerances: dict[str, Tolerance]
    checks: dict[str, OutputCheck] = field(default_factory=dict)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    runtime: str = "ONNX Runtime"


def _max_abs(a: np.ndarray, b: np.ndarray, where: np.ndarray | None = None) -> float:
    """Max abs difference over the elements where neither side is NaN alone (:func:`deform_onnx.proof.compare.max_abs`)."""
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    both = ~(np.isnan(a.astype(np.float64)) ^ np.isnan(b.astype(np.float64)))
    return max_abs(a, b, both if where is None else both & np.atleast_1d(where))


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
    """Run ``data`` in ONNX Runtime (CPU), or ``session``, on ``args`` and compare with the model in PyTorch.

    The file's outputs pair with PyTorch's one for one, in order: the model's return value is flattened
    as the exporters flatten it (:func:`~deform_onnx.runtimes.sessions.output_tensors`: ``torch.utils._pytree``;
    tuples, lists, dicts, namedtuples, dataclasses, transformers' ``ModelOutput``, nested; ``None`` dropped),
    and a file with another number of outputs, or outputs in another order, is refused
    (:mod:`deform_onnx.exporting.pairing`).

    ``session``: a session of :func:`make_session`, or another runtime's with the same API (bfloat16 files
    run on :class:`deform_onnx.exporting.bfloat16.OpenVINOSession`: ONNX Runtime CPU has no bfloat16 Conv); the rules,
    the feeding by name and the :class:`Verified` checks are the same for every runtime and dtype.

    The reference, per output dtype (docs/verification.md):

    - float16/bfloat16: an upcast float32 copy of the model on upcast inputs. The output passes when
      it is within the dtype's tolerance of that result, or at least as close to it as PyTorch's own
      low-precision output is. NaN/Inf in PyTorch's low-precision output where float32 has none is
      a fault of that reference (``OutputCheck.note``), not a mismatch. When the copy does not run in
      float32, the model's own output is the reference; when PyTorch has no kernel for the model in its
      own dtype (torchvision's ``deform_conv2d`` in bfloat16), the copy's tolerance is the only rule.
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
        VerificationError: an output's shape or values differ beyond what the rules allow; the file has
            more or fewer outputs than the model returns, or holds them in another order; the model returns
            something other than tensors and Python numbers (a string: one line naming its path).
    """
    session = session if session is not None else make_session(data)
    names, got = run_file(session, args, input_names)
    got = [np.array(g, copy=True) for g in got]  # a runtime may reuse its output buffers on the next run
    # Every run is judged: a runtime that computes other values on a later run of the same inputs (MNN did,
    # docs/verification.md) must be right on that run too. Bit-identical runs are judged once.
    later = [np.asarray(g) for g in run_file(session, args, input_names)[1]]
    upcast: dict[torch.dtype, tuple] = {}

    def reference(dtype: torch.dtype):
        if dtype not in upcast:
            outputs, why = _copy_run(model, args, dtype)
            upcast[dtype] = ([t for _, t in outputs] if outputs is not None else None), why
        return upcast[dtype]

    runtime = getattr(session, "runtime", "ONNX Runtime")
    own, own_why = _own_run(model, args)
    expected: list[torch.Tensor | None]
    if own is not None:
        paths, expected = [p for p, _ in own], [t for _, t in own]
        check_count(names, got, paths, [t for _, t in own], runtime, where)
    else:  # a low-precision model PyTorch has no kernel for (torchvision's deform_conv2d in bfloat16)
        copy32, why32 = _copy_run(model, args, torch.float32)
        if copy32 is None:
            raise ExportError(f"the model runs neither in its own dtype ({own_why}) nor as a float32 copy ({why32}), "
                              "so the file cannot be verified; pass verify=False to write it unverified")  # fmt: skip
        upcast[torch.float32] = [t for _, t in copy32], None
        paths = [p for p, _ in copy32]
        check_count(names, got, paths, [t for _, t in copy32], runtime, where)
        expected = [None] * len(copy32)

    rerun: list = []

    def again(index: int):
        """The model's own output once more (a model whose output changes between runs has no float64 rescue)."""
        if not rerun:
            with torch.no_grad():
                rerun.append([t for _, t in output_tensors(model(*args))])
        return _numpy(rerun[0][index]) if index < len(rerun[0]) else None

    run = _Judging(names, expected, paths, rtol, atol, where, runtime, reference, again, model, args)
    worst, worst_name, tolerances, checks = _judged(got, run)
    if not _same_bits(got, later):
        try:
            _judged(later, run)
        except VerificationError as exc:
            raise type(exc)(f"the first run matched, a later run of the same inputs did not: {exc}") from None
    shapes = [tuple(t.shape) for t in input_tensors(args)]
    return Verified(worst, worst_name, tolerances, checks, shapes, runtime)


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether two runs' outputs are the same arrays bit for bit (shape, dtype and bytes; NaN payloads too)."""
    return len(a) == len(b) and all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()
        for x, y in zip(a, b)
    )


@dataclass(frozen=True)
class _Judging:
    """What judging one run of the file needs (:func:`verify`'s names for them): the file's output names, PyTorch's
    outputs and their pytree paths, the tolerances asked for, the size note, the runtime, the reference runs
    (``reference(dtype)``, ``again(index)``) and the model with its arguments.
    """

    names: list[str]
    expected: list
    paths: list[str]
    rtol: float | None
    atol: float | None
    where: str
    runtime: str
    reference: Callable
    again: Callable
    model: object
    args: tuple


def _judged(got, run: _Judging) -> tuple[float, str | None, dict[str, Tolerance], dict[str, OutputCheck]]:
    """One run's outputs ``got`` judged as :func:`verify` says: ``(worst, worst output, tolerances, checks)``.

    Raises:
        VerificationError: as :func:`verify`.
    """
    names, expected, paths, where, runtime = run.names, run.expected, run.paths, run.where, run.runtime
    reference, again, model, args = run.reference, run.again, run.model, run.args
    worst, worst_name, tolerances, checks = 0.0, None, {}, {}
    for index, (name, g, e) in enumerate(zip(names, got, expected)):
        tol = tolerance_for(e.dtype if e is not None else g.dtype, run.rtol, run.atol)
        tolerances[name] = tol
        g = g.astype(np.float32) if g.dtype.name == "bfloat16" else g  # exact: float32 holds every bfloat16
        ref_t = None
        if tol.dtype in LOW_PRECISION:
            ref, why = reference(torch.float32)
            ref_t = ref[index] if ref is not None and index < len(ref) else None
        e_np = _numpy(e) if e is not None else None
        if e_np is not None:
            shape = e_np.shape
        else:  # PyTorch ran only the float32 copy (checked above): its output gives the shape
            shape = tuple(reference(torch.float32)[0][index].shape)
        if g.shape != shape:
            torch_side = "PyTorch" if e_np is not None else "the float32 model's"
            raise VerificationError(f"output {name!r}{where}: {runtime} shape {g.shape} != {torch_side} shape {shape}")
        if g.size == 0:
            continue
        try:
            if tol.dtype in LOW_PRECISION:
                check = _low_precision(name, g, e_np, ref_t, why, tol, where)
            elif e_np is None:  # e.g. an integer output of a model PyTorch runs only as a float32 copy
                check = _own_dtype(name, g, _numpy(reference(torch.float32)[0][index]), tol, _Refs(where, None), index,
                                   label="float32 copy")  # fmt: skip
            else:
                refs = _Refs(
                    where, reference if tol.dtype == "float32" else None, again, lambda: discrete_flip(model, args)
                )
                check = _own_dtype(name, g, e_np, tol, refs, index)
        except VerificationError as exc:
            _raise_if_swapped(exc, index, g, tol, names, paths, expected, _Refs(where, reference))
            raise
        checks[name] = check
        if check.error >= worst:
            worst, worst_name = check.error, name
    return worst, worst_name, tolerances, checks


@dataclass(frozen=True)
class _Refs:
    """What one output's check compares with beyond PyTorch's output: ``where`` (the size note of the messages),
    ``reference(dtype)`` (the model rerun as a float32/float64 copy; ``None``: no float64 rule) and ``again(index)``
    (PyTorch's own output once more, to tell a model whose output changes between runs) and ``choices()``
    (:func:`discrete_flip` of the model: where float32 and float64 choose differently, ``None`` if nowhere).
    """

    where: str
    reference: Callable | None
    again: Callable | None = None
    choices: Callable | None = None


def _raise_if_swapped(exc, index, g, tol: Tolerance, names, paths, expected, refs: _Refs) -> None:
    """Raise the order error when file output ``index`` holds another of PyTorch's outputs (within ``tol``)."""
    reference, where = refs.reference, refs.where
    assert reference is not None
    if tol.dtype in LOW_PRECISION or all(e is None for e in expected):
        ref, _ = reference(torch.float32)
        candidates: list[np.ndarray | None] = [_numpy(t) for t in ref] if ref is not None else []
    else:
        candidates = [_numpy(e) if e is not None else None for e in expected]
    other = swapped_with(index, g, candidates, lambda a, b: _within(a, b, tol))
    if other is not None:
        raise VerificationError(order_error(names[index], index, other, paths, names, where)) from exc


#: The elementwise rule (one copy: :func:`deform_onnx.proof.compare.within`); formats and quantize import it from here.
_within = within


def _source(tol: Tolerance) -> str:
    return "given" if tol.explicit else f"the {tol.dtype} default"


def _own_dtype(name, g, e, tol: Tolerance, refs: _Refs, index: int, label: str = "pytorch") -> OutputCheck:
    """float32 (with the float64 rule), float64 and integer outputs.

    ``e``: PyTorch's output (``label="pytorch"``), or the float32 copy's (``label="float32 copy"``) for a
    low-precision model PyTorch cannot run in its own dtype (then ``refs.reference`` is ``None``: no float64 rule).
    """
    where, reference, again = refs.where, refs.reference, refs.again
    err = _max_abs(g, e)
    whose = "PyTorch" if label == "pytorch" else "the float32 model"
    if _within(g, e, tol):
        return OutputCheck(label, err, None, f"within {_source(tol)} tolerance of {whose}")
    lone = int(np.sum(np.isnan(np.asarray(g, np.float64)) ^ np.isnan(np.asarray(e, np.float64))))
    lone_text = f" ({lone} elements NaN on one side only, not counted in it)" if lone else ""
    head = (
        f"output {name!r} differs from {whose}{where}: max abs error {err:.3g}{lone_text} "
        f"(atol={tol.atol}, rtol={tol.rtol}, {_source(tol)}){_worst(g, e, tol)}"
    )
    if reference is None or tol.explicit:  # a given tolerance is a hard bound: no float64 rescue
        raise VerificationError(f"{head}; no file was written")
    repeat = again(index) if again is not None else None
    if repeat is None or not _within(repeat, e, tol):
        raise VerificationError(f"{head}; PyTorch's own output changes between runs, so no float64 check; "
                                "no file was written")  # fmt: skip
    flipped = refs.choices() if refs.choices is not None else None
    if flipped is not None:  # a discrete choice differs between float32 and float64: neither proves the file
        raise VerificationError(f"{head}; PyTorch float32 and float64 choose differently at {flipped} (ties or "
                                "near-ties in its input at this example), so the float64 rule cannot prove this "
                                "output; no file was written (export with inputs without ties, e.g. random ones, "
                                "or pass verify=False)")  # fmt: skip
    ref, why = reference(torch.float64)
    if ref is None or index >= len(ref):
        raise VerificationError(f"{head}; the float64 check could not run ({why}); no file was written")
    r64 = _numpy(ref[index]).astype(np.float64)
    finite = np.isfinite(r64)
    if not np.all(np.isfinite(g)[finite]):
        raise VerificationError(f"{head}; the file gives NaN/Inf where float64 PyTorch has none; no file was written")
    _raise_if_undefined(head, g, r64, finite, tol, "PyTorch gives NaN/Inf, in float64 too,")
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


def _raise_if_undefined(head: str, g, ref: np.ndarray, finite: np.ndarray, tol: Tolerance, whose: str) -> None:
    """Refuse a file that gives other values where the reference is NaN/Inf (``finite``: where it is not).

    The rescue rules compare the finite elements of their reference only; an element where the reference is
    NaN/Inf too and the file is not is a mismatch nothing proves (RAFT's ``bilinear_sampler`` at a pyramid
    level of width 1: ``2 * x / (W - 1)`` divides by 0, PyTorch returns NaN everywhere, the file numbers).
    """
    undefined = ~finite & ~close(g, ref, tol).reshape(finite.shape)
    if undefined.any():
        raise UndefinedReferenceError(
            f"{head}; {whose} at {int(undefined.sum())} of {undefined.size} elements where the file gives other "
            "values: the model is undefined there (a division by a size of 1, say), so nothing proves the file"
            + UNDEFINED_TAIL
        )


def _worst(g: np.ndarray, e: np.ndarray, tol: Tolerance) -> str:
    """``", 3 of 512 elements off, worst at [0, 1, 4, 2]: 0.81 vs 0.32"`` (:func:`deform_onnx.proof.compare_output`)."""
    res = compare_output("", np.asarray(g), np.asarray(e), tol)
    if res.worst is None or res.mismatched == 0:
        return ""
    return f", {res.mismatched} of {np.asarray(e).size} elements off, worst at {list(res.worst)}: " \
        f"{res.worst_got:.6g} vs {res.worst_ref:.6g}"  # fmt: skip


def _low_precision(name, g, e, ref, why, tol: Tolerance, where: str) -> OutputCheck:
    """float16/bfloat16 outputs against the float32 copy (``ref``), or against PyTorch when it did not run.

    ``e``: PyTorch's own low-precision output, ``None`` when PyTorch has no kernel for the model in that
    dtype (torchvision's ``deform_conv2d`` in bfloat16): then the float32 copy's tolerance is the only rule.
    """
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
    bad_torch = int(np.sum(~np.isfinite(e) & finite)) if e is not None else 0
    if bad_torch:
        note = (f"PyTorch's {tol.dtype} output has {bad_torch} NaN/Inf where the float32 model has none "
                "(a fault of that reference, not of the file)")  # fmt: skip
    if not np.all(np.isfinite(g)[finite]):
        raise VerificationError(
            f"output {name!r}{where}: the file gives NaN/Inf where the float32 model has none; no file was written"
        )
    _raise_if_undefined(f"output {name!r} differs from the float32 model{where}", g, r32, finite, tol,
                        "the float32 model gives NaN/Inf")  # fmt: skip
    file_err = _max_abs(g, r32, finite)
    torch_err = _max_abs(e, r32, finite & np.isfinite(e)) if e is not None else None
    if _within(np.where(finite, g, 0), np.where(finite, r32, 0), tol):
        return OutputCheck("float32 copy", file_err, torch_err,
                           f"within {_source(tol)} tolerance of the float32 model", note)  # fmt: skip
    if torch_err is not None and file_err <= torch_err and not tol.explicit:  # a given tolerance is a hard bound
        return OutputCheck("float32 copy", file_err, torch_err,
                           f"at least as close to the float32 model as PyTorch {tol.dtype}", note)  # fmt: skip
    if tol.explicit:  # PyTorch's own error does not widen a given tolerance, however it compares
        own = "a hard bound (the as-close-as-PyTorch rule applies to the default tolerance only)"
    elif torch_err is not None:
        own = f"more than PyTorch's own {tol.dtype} output ({torch_err:.3g})"
    else:
        own = f"and PyTorch has no {tol.dtype} run of the model to compare with"
    raise VerificationError(
        f"output {name!r} differs from the float32 model{where}: max abs error {file_err:.3g} "
        f"(atol={tol.atol}, rtol={tol.rtol}, {_source(tol)}), {own}; no file was written"
    )


def describe_rule(dtype) -> str:
    """One line naming the rule a file of ``dtype`` outputs passes by default (:func:`verify`, docs/verification.md).

    ``dtype``: a numpy or torch dtype or its name. Used by the CLI, which checks with the API's rules and says so.
    """
    tol = tolerance_for(dtype)
    bound = f"|ort - torch| <= {tol.atol:g} + {tol.rtol:g}*|torch|"
    if tol.dtype in ("float16", "bfloat16"):
        return f"{bound} against a float32 copy, or as close to it as PyTorch {tol.dtype} is"
    if tol.dtype == "float32":
        return f"{bound}, or within {FLOAT64_FACTOR:g}x PyTorch's own error against a float64 copy"
    return bound


__all__ = [
    "DEFAULT_TOLERANCES",
    "OutputCheck",
    "UNDEFINED_TAIL",
    "describe_rule",
    "Tolerance",
    "Verified",
    "make_session",
    "run_file",
    "run_pytorch",
    "tolerance_for",
    "upcast_run",
    "verify",
]
