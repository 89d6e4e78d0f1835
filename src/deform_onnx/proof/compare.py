"""The one comparison of a runtime's outputs with a reference: every output, every element, by its dtype.

An element passes when ``|got - ref| <= atol + rtol * |ref|`` (``atol``/``rtol`` of the output's
:class:`Tolerance`), or when both are the same value (equal infinities) or both NaN. The tolerance
comes from the reference output's dtype (:data:`DEFAULT_TOLERANCES`; integers and booleans exactly) unless
one is given, for every output or per output name. Each output is also checked for

- its shape (another shape is a failure, with both shapes);
- its precision: a floating output the runtime returns in a narrower float type than the reference's
  (float16 where float32 is claimed) is a failure, whatever its values;
- NaN/Inf: a NaN or infinity where the reference has another value fails like any mismatch, and is
  counted apart in the message.

:func:`compare_outputs` pairs outputs in order (the file's order; the names are the reference's) and
returns a :class:`Comparison` with per-output statistics: the max abs error, the worst element's index,
its two values and the bound it was held to, how many elements missed. The rules and their numbers are
in docs/verification.md; this module is the only place that applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


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


#: dtype -> (rtol, atol); the reasoning is in :mod:`deform_onnx.exporting.verification`'s docstring.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (8e-2, 8e-2),
}


def dtype_name(dtype) -> str:
    """The name of a numpy or torch dtype (or of a name): ``float32``, ``bfloat16``, ``int64``, ``bool``."""
    text = str(dtype)
    if text.startswith("torch."):
        return text.removeprefix("torch.")
    try:
        return np.dtype(dtype).name
    except TypeError:  # a name numpy does not know (bfloat16)
        return text


def tolerance_for(dtype, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for an output of ``dtype`` (numpy or torch dtype, or its name).

    Integer and boolean outputs must match exactly. ``rtol``/``atol`` given here win
    over the dtype's default (each on its own).
    """
    name = dtype_name(dtype)
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


def as_float64(a) -> np.ndarray:
    """``a`` as a float64 array (bfloat16 through float32: exact; booleans as 0/1)."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    return np.atleast_1d(a).astype(np.float64)


def close(got, ref, tol: Tolerance) -> np.ndarray:
    """The elementwise rule: which elements of ``got`` are within ``tol`` of ``ref`` (same shape; a flat bool array).

    An element passes when ``|got - ref| <= atol + rtol * |ref|``, when both are equal (equal infinities),
    or when both are NaN.
    """
    g, r = as_float64(got).ravel(), as_float64(ref).ravel()
    with np.errstate(invalid="ignore"):
        return (g == r) | (np.isnan(g) & np.isnan(r)) | (np.abs(g - r) <= tol.atol + tol.rtol * np.abs(r))


def within(got, ref, tol: Tolerance) -> bool:
    """Whether every element of ``got`` is within ``tol`` of ``ref`` (:func:`close`)."""
    return bool(np.all(close(got, ref, tol)))


def max_abs(got, ref, where: np.ndarray | None = None) -> float:
    """Max abs difference of two same-shape arrays (equal infinities count 0; a NaN on one side only: ``nan``).

    ``where``: a boolean mask of the elements to count (e.g. the reference's finite ones).
    """
    g, r = as_float64(got), as_float64(ref)
    with np.errstate(invalid="ignore"):
        diff = np.abs(g - r)
    diff[(g == r) | (np.isnan(g) & np.isnan(r))] = 0.0
    if where is not None:
        diff = diff[np.broadcast_to(np.atleast_1d(where), diff.shape)]
    if not diff.size:
        return 0.0
    return float("nan") if np.isnan(diff).any() else float(diff.max())


@dataclass
class OutputResult:
    """How one output compared.

    Attributes:
        name: the output's name (the reference's).
        dtype: the reference's dtype name (the claim it is held to); ``got_dtype``: the runtime's.
        tolerance: the :class:`Tolerance` it was held to.
        shape, got_shape: the reference's and the runtime's shapes.
        max_error: max abs difference (``nan``: a NaN on one side only; ``inf``: another shape, or an infinity).
        mismatched: elements beyond the tolerance (``0`` when it passed); ``nonfinite``: of them, those where
            the runtime gives NaN/Inf and the reference a finite value.
        worst: the index of the element furthest beyond its bound (``None`` when none missed), with
            ``worst_got``/``worst_ref`` its values and ``worst_bound`` its ``atol + rtol * |ref|``.
        failure: why it failed, one clause without the runtime's name (``None`` when it passed).
    """

    name: str
    dtype: str
    got_dtype: str
    tolerance: Tolerance
    shape: tuple[int, ...]
    got_shape: tuple[int, ...]
    max_error: float = 0.0
    mismatched: int = 0
    nonfinite: int = 0
    worst: tuple[int, ...] | None = None
    worst_got: float | None = None
    worst_ref: float | None = None
    worst_bound: float | None = None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every element passed (and shape and precision hold)."""
        return self.failure is None


@dataclass
class Comparison:
    """Every output of one runtime against the reference (:func:`compare_outputs`).

    Attributes:
        runtime: who produced the outputs (``"mnn 3.6.1"``), as messages name it.
        outputs: one :class:`OutputResult` per paired output, in order.
        count_error: why the outputs could not be paired (another number of outputs), else ``None``.
    """

    runtime: str
    outputs: list[OutputResult] = field(default_factory=list)
    count_error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the outputs paired and every one passed."""
        return self.count_error is None and all(o.ok for o in self.outputs)

    @property
    def failures(self) -> list[OutputResult]:
        """The outputs that failed, the furthest off first."""
        bad = [o for o in self.outputs if not o.ok]
        return sorted(bad, key=lambda o: -_rank(o.max_error))

    @property
    def worst(self) -> OutputResult | None:
        """The output that failed furthest off, else the one with the largest error (``None``: no outputs)."""
        if self.failures:
            return self.failures[0]
        return max(self.outputs, key=lambda o: _rank(o.max_error), default=None)

    @property
    def max_error(self) -> float:
        """The largest max abs error over the outputs (``inf`` when they could not be paired)."""
        if self.count_error is not None:
            return math.inf
        return max((o.max_error for o in self.outputs), key=_rank, default=0.0)

    def message(self, where: str = "") -> str:
        """One line: every failing output with its statistics, naming the runtime (``""`` when all passed).

        ``where`` (e.g. ``" at 1x4x16x24"``) follows each output's name.
        """
        if self.count_error is not None:
            return f"{self.runtime}: {self.count_error}"
        return "; ".join(f"{self.runtime}: output {o.name!r}{where} {o.failure}" for o in self.failures)


def _rank(err: float) -> float:
    return math.inf if math.isnan(err) else err


def compare_outputs(
    got: Sequence[tuple[str, np.ndarray]],
    want: Sequence[tuple[str, np.ndarray]],
    *,
    runtime: str,
    rtol: float | None = None,
    atol: float | None = None,
    per_output: Mapping[str, tuple[float | None, float | None]] | None = None,
) -> Comparison:
    """Compare every output a runtime returned (``got``) with the reference's (``want``), per element.

    Args:
        got: ``[(name, array), ...]`` as the runtime returned them, in the file's order.
        want: ``[(name, array), ...]`` of the reference, in the same order; its names name the outputs.
        runtime: who produced ``got``, for the messages.
        rtol, atol: a tolerance for every output (default: each reference output's dtype's).
        per_output: ``{name: (rtol, atol)}`` for some outputs; wins over ``rtol``/``atol`` (a ``None`` inside
            keeps the dtype's default for that part).

    Returns:
        The :class:`Comparison` (check ``.ok``; ``.message()`` says what failed).
    """
    result = Comparison(runtime)
    if len(got) != len(want):
        names = ", ".join(repr(n) for n, _ in want)
        result.count_error = f"returns {len(got)} outputs, the reference {len(want)} ({names})"
        return result
    per_output = per_output or {}
    for (_, g), (name, w) in zip(got, want):
        r, a = per_output.get(name, (rtol, atol))
        result.outputs.append(compare_output(name, np.asarray(g), np.asarray(w), tolerance_for(w.dtype, r, a)))
    return result


def compare_output(name: str, got: np.ndarray, ref: np.ndarray, tol: Tolerance) -> OutputResult:
    """One output against its reference with ``tol``: shape, precision, every element (:class:`OutputResult`)."""
    got_dtype, ref_dtype = dtype_name(got.dtype), dtype_name(ref.dtype)
    out = OutputResult(name, tol.dtype, got_dtype, tol, tuple(ref.shape), tuple(got.shape))
    if got.shape != ref.shape:
        out.max_error = math.inf
        out.failure = f"has shape {tuple(got.shape)}, the reference {tuple(ref.shape)}"
        return out
    if _narrower(got_dtype, ref_dtype):
        out.max_error = max_abs(got, ref) if got.size else 0.0
        out.failure = (f"is {got_dtype} where the reference is {ref_dtype} (a precision drop; max abs error "
                       f"{out.max_error:.3g})")  # fmt: skip
        return out
    if got.size == 0:
        return out
    ok = close(got, ref, tol)
    out.max_error = max_abs(got, ref)
    if ok.all():
        return out
    g, r = as_float64(got).ravel(), as_float64(ref).ravel()
    bound = tol.atol + tol.rtol * np.abs(r)
    with np.errstate(invalid="ignore"):
        excess = np.where(ok, -np.inf, np.nan_to_num(np.abs(g - r) - bound, nan=np.inf, posinf=np.inf))
    at = int(np.argmax(excess))
    out.mismatched = int((~ok).sum())
    out.nonfinite = int((~ok & ~np.isfinite(g) & np.isfinite(r)).sum())
    out.worst = tuple(int(i) for i in np.unravel_index(at, ref.shape)) if ref.ndim else ()
    out.worst_got, out.worst_ref, out.worst_bound = float(g[at]), float(r[at]), float(bound[at])
    source = "given" if tol.explicit else f"the {tol.dtype} default"
    nonfinite = f", {out.nonfinite} of them NaN/Inf where the reference is finite" if out.nonfinite else ""
    out.failure = (
        f"misses the reference at {out.mismatched} of {r.size} elements{nonfinite} (max abs error "
        f"{out.max_error:.3g}; worst at {list(out.worst)}: {out.worst_got:.6g} vs {out.worst_ref:.6g}, allowed "
        f"{out.worst_bound:.3g} = atol {tol.atol:g} + rtol {tol.rtol:g} * |ref|, {source})"
    )
    return out


#: Floating dtypes by their precision (bits of mantissa): a runtime output below its reference's is a drop.
_PRECISION = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}


def _narrower(got: str, ref: str) -> bool:
    return got in _PRECISION and ref in _PRECISION and _PRECISION[got] < _PRECISION[ref]


__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "OutputResult",
    "Tolerance",
    "as_float64",
    "close",
    "compare_output",
    "compare_outputs",
    "dtype_name",
    "max_abs",
    "tolerance_for",
    "within",
]
