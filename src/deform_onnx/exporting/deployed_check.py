"""``export(..., verify_runtimes=[...])``: the written file also runs on each named deployed runtime first."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.atomic_io import commit_copies
from ..core.errors import VerificationError


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

    Returns:
        One line per runtime (``"mnn 3.6.1: max abs error 1.7e-06"``), for ``ExportReport.runtimes``.

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
        rows = check_runtimes(path, runtimes, model=model, args=args, rtol=rtol, atol=atol, repeats=1,
                              keep_artifacts=staged if keep_artifacts is not None else None)  # fmt: skip
        bad = failed(rows)
        if bad:
            raise VerificationError(f"the file fails on {len(bad)} of {len(rows)} runtimes: "
                                    + "; ".join(describe(r) for r in bad) + "; nothing was written")  # fmt: skip
        if keep_artifacts is not None:  # all or none, with a new file's mode
            commit_copies([(kept, Path(keep_artifacts) / kept.name) for row in rows for kept in row.artifacts])
    return [f"{r.runtime} {r.version}: max abs error {r.max_error:.2g}" for r in rows]
