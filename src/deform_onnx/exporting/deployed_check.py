"""``export(..., verify_runtimes=[...])``: the written file also runs on each named deployed runtime first."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.atomic_io import commit_copies
from ..core.errors import VerificationError


def check_arguments(runtimes: Sequence[str]) -> None:
    """Refuse an unknown ``verify_runtimes`` name before any export or conversion work (issue 35, item 8; a
    missing ``keep_artifacts`` folder is refused first of all, by :func:`~deform_onnx.core.atomic_io.check_folder`).

    Raises:
        ValueError: an unknown runtime name (one line listing the names).
    """
    from ..runtimes.deployed import family

    for name in runtimes:
        family(name)


def check_deployed(
    data: bytes,
    model,
    args: tuple,
    runtimes: Sequence[str],
    keep_artifacts: str | os.PathLike | None = None,
    tolerance: tuple[float | None, float | None] = (None, None),
    stem: str = "model",
) -> list[str]:
    """Convert and run the serialized file on each runtime (:func:`deform_onnx.check_runtimes`) against PyTorch.

    Every output of the file is compared, element by element with its dtype's rule
    (:func:`deform_onnx.proof.compare_outputs`).

    Returns:
        One line per runtime (``"mnn 3.6.1: max abs error 1.7e-06"``; with several outputs ``"... over 2 outputs
        (worst 'y')"``), for ``ExportReport.runtimes``.

    Raises:
        ValueError: an unknown runtime name.
        VerificationError: a runtime did not run or missed the tolerance (naming it and the error); then no
            artifact is kept either.
    """
    from ..runtimes.deployed.check import check_runtimes, describe, failed

    with tempfile.TemporaryDirectory(prefix="deform-onnx-verify-") as tmp:
        path = Path(tmp) / f"{stem}.onnx"
        path.write_bytes(data)
        staged = Path(tmp) / "kept"
        staged.mkdir()
        rtol, atol = tolerance
        # keep_unmatched: a row that only the rules below pass keeps its files too
        rows = check_runtimes(path, runtimes, model=model, args=args, rtol=rtol, atol=atol, repeats=1,
                              keep_artifacts=staged if keep_artifacts is not None else None,
                              keep_unmatched=True)  # fmt: skip
        rules = {id(row): _export_rules(data, model, args, row, tolerance) for row in failed(rows)}
        bad = [row for row in failed(rows) if rules[id(row)] is None]
        if bad:
            raise VerificationError(f"the file fails on {len(bad)} of {len(rows)} runtimes: "
                                    + "; ".join(describe(r) for r in bad) + _causes(data, bad) + _fix(bad)
                                    + "; nothing was written")  # fmt: skip
        if keep_artifacts is not None:  # all or none, with a new file's mode
            commit_copies([(kept, Path(keep_artifacts) / kept.name) for row in rows for kept in row.artifacts
                           if row.ok or rules.get(id(row))])  # fmt: skip
    return [_line(r) + (f" ({rules[id(r)]})" if rules.get(id(r)) else "") for r in rows]


def _causes(data: bytes, bad: list) -> str:
    """Known causes in the file of a failed runtime's refusal, as ``"; ..."`` (empty when none is known): for ncnn,
    the ``Reduce*`` nodes its target's repair ``reductions as pooling and Conv`` leaves (pnnx writes a ``Reduce*``
    over the ONNX axes unshifted for ncnn's missing batch axis).
    """
    if not any(row.runtime == "ncnn" for row in bad):
        return ""
    import onnx

    from ..targets.repair_reduce import reductions_left

    left = reductions_left(onnx.load_model_from_string(data))
    if not left:
        return ""
    shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    return (f"; the file keeps {len(left)} Reduce* node(s) the ncnn target could not rewrite, which pnnx may convert "
            f"over the wrong axes (ncnn has no batch axis): {shown}; compute them with a mean, sum, max, min or norm "
            "over the non-batch axes of a static batch-1 value (which the target rewrites), or export for another "
            "target")  # fmt: skip


#: What to do when a runtime converts or runs the verified file wrong, by runtime (the file matched PyTorch in
#: ONNX Runtime, so the difference is the runtime's converter or kernels).
_ELSEWHERE = {
    # measured here: onnx2tf 1.29.24 wrote FOMM's generator 1e-3 off and RT-DETRv2's discrete sampling 0.1 off,
    # and failed on LivePortrait's 6-D motions, while litert-torch's .tflite of each matched PyTorch
    "tflite": "LiteRT also takes a .tflite written from PyTorch by litert-torch, without onnx2tf: "
    "deform_onnx.export(model, args, 'model.tflite') (CLI: -o model.tflite)",
}


def _fix(bad) -> str:
    """``"; <what to do>"`` for the failed rows ``bad`` (``""`` when a runtime could not be set up: its row says why)."""
    if any(r.error is not None and ("venv" in r.error or "pip" in r.error) for r in bad):
        return ""
    known = [_ELSEWHERE[r.runtime] for r in bad if r.runtime in _ELSEWHERE]
    general = (
        "the file itself matched PyTorch in ONNX Runtime, so the difference is the runtime's conversion or kernels: "
        "export for another target, or write that part of the model otherwise"
    )
    return "; " + "; ".join(known or [general])


def _export_rules(data: bytes, model, args: tuple, row, tolerance: tuple[float | None, float | None]) -> str | None:
    """How a runtime's outputs that missed the plain tolerance pass the rules ``export`` holds ONNX Runtime to
    (the rule of the worst output, one line), or ``None`` when they do not.

    :func:`~deform_onnx.exporting.verification.verify` judges the outputs the runtime returned (replayed, not rerun):
    a float32 output within 2x PyTorch float32's own error against a float64 copy (an ill-conditioned model, such
    as ASTER's TPS rectifier, where PyTorch float32 itself is 4e-4 off), a float16 one as close as PyTorch float16.
    One set of rules for every runtime: without this, a file ONNX Runtime passed by them was refused by OpenVINO,
    MNN and ncnn whose outputs were as close. A row that did not run (or returned other outputs) stays failed.
    """
    from ..core.errors import ExportError
    from ..runtimes.sessions import ReplaySession
    from .verification import verify

    if model is None or row.error is not None or not row.outputs:
        return None
    rtol, atol = tolerance
    try:
        checked = verify(model, args, data, rtol, atol, session=ReplaySession(_inputs(data), row.outputs, row.title))
    except (VerificationError, ExportError):
        return None
    return checked.checks[checked.worst_output].rule if checked.worst_output in checked.checks else "export's rules"


def _inputs(data: bytes) -> list[str]:
    """The graph inputs of a serialized model that are not initializers, in order."""
    import onnx

    graph = onnx.load_model_from_string(data).graph
    init = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in init]


def _line(row) -> str:
    """``mnn 3.6.1: max abs error 1.7e-06`` (one output) or ``... 1.7e-06 over 3 outputs (worst 'y')``."""
    line = f"{row.runtime} {row.version}: max abs error {row.max_error:.2g}"
    count = len(row.comparison.outputs) if row.comparison is not None else 1
    return line + (f" over {count} outputs (worst {row.worst_output!r})" if count > 1 else "")
