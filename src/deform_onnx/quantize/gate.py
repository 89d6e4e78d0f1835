"""quantize's accuracy gate: the INT8 file is written only when each output stays close to the float model's.

Each graph output of the INT8 file is compared with the float model's (the lowered float model
that :func:`~.lowering.check_lowering` matched to ``src``) on every evaluation input (the held-out
``eval_inputs``, else every calibration sample), and must keep, on each input:

- cosine similarity >= ``min_cosine`` (default :data:`DEFAULT_MIN_COSINE`, 0.99: the deployment bar
  this project holds its INT8 files to; a model whose quantized layers each round by a few percent
  RMS keeps about 0.995);
- ``max|int8 - float| <= max_error * max|float|`` (default :data:`DEFAULT_MAX_ERROR`): the error
  relative to the output's own scale on that input, so a gross miss on a few elements (a saturated
  channel, a clipped range) that the cosine averages away is refused too.

A file below the bound is refused (:class:`AccuracyError`, nothing written; the CLI exits 1) in one
line naming the output, the input and by how much; ``accept=True`` (CLI ``--accept-accuracy``)
writes it and the report says so. The default bounds and the measurements behind them:
docs/quantization.md, "The accuracy gate".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import VerificationError
from .report import OutputAccuracy, compare

#: Default smallest cosine of each output to the float model's, on each evaluation input.
DEFAULT_MIN_COSINE = 0.99
#: Default largest ``max|int8 - float|`` of an output as a fraction of its ``max|float|`` on that input.
#: Measured (docs/quantization.md, "The accuracy gate"): ONNX Runtime and TensorRT files of the bundled
#: example and the tests' models 0.010 to 0.065, nncf's OpenVINO files 0.009 to 0.26 (it quantizes more
#: coarsely); the issue's file calibrated at 1e-3 scale and run at unit scale 0.94.
DEFAULT_MAX_ERROR = 0.35
#: How to write a file below the bound, as the messages name it (Python, then CLI).
ACCEPT_OPTION = "accept=True (CLI: --accept-accuracy)"


class AccuracyError(VerificationError):
    """The INT8 file misses the accuracy bound on some output; nothing was written."""


@dataclass(frozen=True)
class Bound:
    """The accuracy an INT8 file must keep to be written (see the module docstring).

    Attributes:
        min_cosine: smallest cosine of each output to the float model's, per evaluation input.
        max_error: largest ``max|int8 - float|`` as a fraction of ``max|float|``, per output and input.
        accept: write a file below the bound anyway (the report says so).
    """

    min_cosine: float = DEFAULT_MIN_COSINE
    max_error: float = DEFAULT_MAX_ERROR
    accept: bool = False

    def __post_init__(self):
        if not (isinstance(self.min_cosine, int | float) and -1.0 <= self.min_cosine <= 1.0):
            raise ValueError(f"min_cosine {self.min_cosine!r}: give a number in [-1, 1] (default {DEFAULT_MIN_COSINE})")
        if not (isinstance(self.max_error, int | float) and self.max_error > 0 and not math.isnan(self.max_error)):
            raise ValueError(
                f"max_error {self.max_error!r}: give a positive fraction of the output's scale "
                f"(default {DEFAULT_MAX_ERROR}; math.inf for no bound)"
            )

    def __str__(self) -> str:
        return f"cosine >= {self.min_cosine:g}, max error <= {self.max_error:g} x max|float| per output and input"


def output_accuracy(names: list[str], reference: list[list], got: list[list]) -> list[OutputAccuracy]:
    """Per output, the worst cosine and relative max error of ``got`` against ``reference`` over the inputs.

    ``reference[i][k]`` and ``got[i][k]``: output ``k`` on evaluation input ``i``. NaN anywhere in a
    comparison makes that output's figures NaN (which no bound passes).
    """
    out = []
    for k, name in enumerate(names):
        rows = []
        for i, (ref, q) in enumerate(zip(reference, got, strict=True)):
            a, b = np.asarray(ref[k], np.float64), np.asarray(q[k], np.float64)
            cosine = compare(a, b)[0] if a.shape == b.shape else float("nan")
            diff = np.abs(a - b) if a.shape == b.shape else np.array([np.inf])
            max_abs = float(diff.max()) if diff.size else 0.0
            scale = float(np.abs(a).max()) if a.size else 0.0
            relative = max_abs / scale if scale else (0.0 if max_abs == 0 else float("inf"))
            if np.isnan(a).any() or np.isnan(b).any():
                cosine, relative = float("nan"), float("nan")
            rows.append((i, cosine, relative, max_abs, scale))
        worst_cos = min(rows, key=lambda r: (not math.isnan(r[1]), r[1]))
        worst_err = max(rows, key=lambda r: (math.isnan(r[2]), r[2]))
        out.append(OutputAccuracy(name, worst_cos[1], worst_cos[0], worst_err[2], worst_err[0], *worst_err[3:]))
    return out


def shortfall(acc: OutputAccuracy, bound: Bound, inputs: int) -> str | None:
    """How ``acc`` misses ``bound``, in words (``None``: it does not); ``inputs``: how many inputs it covers."""
    of = f" of {inputs}" if inputs > 1 else ""
    misses = []
    if not acc.cosine >= bound.min_cosine:  # NaN misses
        misses.append(f"cosine {acc.cosine:.4g} < {bound.min_cosine:g} on input {acc.cosine_input + 1}{of}")
    if not acc.max_error <= bound.max_error:
        misses.append(
            f"max abs error {acc.max_abs:.3g} = {acc.max_error:.3g} x its max |float| {acc.scale:.3g} "
            f"> {bound.max_error:g} on input {acc.error_input + 1}{of}"
        )
    return "; ".join(misses) or None


def enforce(outputs: list[OutputAccuracy], bound: Bound, inputs: int, held_out: bool, dst) -> str | None:
    """Refuse an INT8 file below ``bound``, or (``bound.accept``) return the report's note saying it was written.

    ``inputs``: how many evaluation inputs ``outputs`` cover; ``held_out``: they were ``eval_inputs`` (not the
    calibration samples). Returns ``None`` when every output keeps the bound.

    Raises:
        AccuracyError: an output misses the bound and ``bound.accept`` is false: one line naming the output,
            the input, the figures and the bound, and :data:`ACCEPT_OPTION`.
    """
    misses = [(a.name, why) for a in outputs if (why := shortfall(a, bound, inputs)) is not None]
    if not misses:
        return None
    name, why = misses[0]
    more = f" (and {len(misses) - 1} more output(s))" if len(misses) > 1 else ""
    kind = "held-out" if held_out else "calibration"
    line = f"output {name!r} against the float model on {inputs} {kind} input(s): {why}{more}"
    if bound.accept:
        return f"below the accuracy bound ({bound}), written because {ACCEPT_OPTION} was given: {line}"
    raise AccuracyError(
        f"{dst}: the INT8 file misses the accuracy bound on {line}; nothing written (calibrate on inputs like the "
        f"ones it will run on, or pass {ACCEPT_OPTION} to write it anyway)"
    )
