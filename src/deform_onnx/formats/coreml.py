"""Core ML (``.mlpackage``) through coremltools: converted and validated, **not run** (no Core ML on Linux).

``deform_onnx.export(model, args, "model.mlpackage")`` exports with ``torch.export``, rewrites the family
into core ATen ops (:func:`deform_onnx.decompositions`) and converts the program with
``coremltools.convert`` (ML program, iOS 17), which builds and validates the MIL program. Core ML
predictions need macOS, so the package is never run here: the report says ``verified=False`` and notes
it. coremltools 9.0's torch.export frontend has no ``grid_sampler_2d`` entry (only TorchScript's
``grid_sampler``); :func:`_alias_grid_sampler_2d` maps it to that conversion. The package computes in
float32 (``compute_precision=FLOAT32``; coremltools' own default is float16) unless ``precision="float16"``. The gather form writes
rank-6 tensors, beyond Core ML's rank 5, so ``method="gather"`` fails there with coremltools' message.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from ..core.errors import ExportError
from ..exporting.api import ExportReport
from .torch_export import (
    check_inputs,
    check_settings,
    eval_mode,
    exported,
    first_error,
    plan_sizes,
    quiet,
    report_for,
    resolved,
)

TITLE = "Core ML"
#: export()'s keyword arguments a .mlpackage takes.
TAKEN = ("method", "verify", "verify_shapes", "precision")
NOTE = "Core ML: converted and validated by coremltools, not run (Core ML predictions need macOS)"
#: What ``method="auto"`` writes (the gather form's rank-6 tensors are beyond Core ML's rank 5).
AUTO_METHOD = "grid_sample"
#: ``precision=`` values (coremltools' compute precisions) and what the report says of each.
PRECISION_NOTES = {
    "float32": "Core ML: computes in float32 (compute_precision=FLOAT32; coremltools' default is float16)",
    "float16": "Core ML: computes in float16 (precision='float16'): outputs are float16, about 1e-3 relative",
}
PRECISIONS = tuple(PRECISION_NOTES)


def _alias_grid_sampler_2d() -> None:
    """Let coremltools' torch.export frontend convert ``aten.grid_sampler_2d`` with its ``grid_sampler`` op."""
    from coremltools.converters.mil.frontend.torch import ops
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY, register_torch_op

    if "grid_sampler_2d" in _TORCH_OPS_REGISTRY:
        return

    def grid_sampler_2d(context, node):
        return ops.grid_sampler(context, node)

    register_torch_op(grid_sampler_2d)


def convert(ep, folder: Path, precision: str = "float32") -> None:
    """Convert the decomposed program and save it as the ``.mlpackage`` ``folder``.

    ``precision``: the ML program's compute precision, ``"float32"`` or ``"float16"`` (coremltools'
    default is float16: a float32 model would compute and return float16).
    """
    with quiet() as noise:
        try:
            import coremltools as ct

            _alias_grid_sampler_2d()
            compute = ct.precision.FLOAT32 if precision == "float32" else ct.precision.FLOAT16
            mlmodel = ct.convert(
                ep, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17, compute_precision=compute
            )
            mlmodel.save(str(folder))
        except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ExportError(f"coremltools could not convert the program: {first_error(noise) or line}") from None


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write(model, args, path, **settings) -> ExportReport:
    """Convert ``model`` to a Core ML package at ``path`` (``.mlpackage``); it is not run (see the module).

    Takes ``method`` (``auto`` = ``grid_sample``), ``precision`` (``"float32"``, the default, or ``"float16"``:
    the package's compute precision, said in the report's notes); ``verify`` is accepted and
    cannot be honoured (noted). The package is written to a temporary folder beside ``path`` and renamed:
    complete or absent. The model's training mode is restored after.

    Raises:
        ValueError: a setting a .mlpackage does not take, an unknown ``precision``, a Python number or
            bfloat16 input.
        ExportError: export, decomposition or conversion failed (nothing written).
    """
    started = time.perf_counter()
    opts = check_settings(TITLE, settings, TAKEN)
    precision = opts["precision"] or "float32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: a Core ML package computes in one of {', '.join(PRECISIONS)}")
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"{TITLE} packages are written to a path, not a file object")
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"output folder {target.parent} does not exist; create it first")
    args = args if isinstance(args, tuple) else (args,)
    check_inputs(TITLE, args)
    method = resolved(opts["method"], AUTO_METHOD)
    notes: list[str] = []
    with eval_mode(model):
        plan_sizes(model, args, None, opts["verify_shapes"], False)  # verify_shapes= as for a static file
        ep = exported(model, args, None, method, TITLE, notes=notes)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            convert(ep, staging / target.name, precision)
            old = staging / "previous"
            if target.exists():
                os.replace(target, old)
            os.replace(staging / target.name, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    report = report_for(target, "coreml", method, [], _folder_size(target), started, ep)
    report.verified = False
    report.notes.append(NOTE)
    report.notes.append(PRECISION_NOTES[precision])
    report.notes.extend(notes)
    return report
