"""``deform-onnx export``'s argument checks and plan: what to export, checked before torch loads."""

from __future__ import annotations

from pathlib import Path

from ._common import UserError, check_output_folder
from ._export_rows import Job

#: The main job: one export per lowering, each at an opset that runtimes commonly
#: hold (17: widest standard-op support; 11: the oldest the project reaches; 20:
#: native DeformConv on a recent opset).
DEFAULT_PLAN: tuple[tuple[str, int], ...] = (("grid_sample", 17), ("gather", 11), ("native", 20))
EXPORTERS = ("dynamo", "torchscript")


def _stem(model: str, kind: str) -> str:
    if kind == "factory":
        return model.rpartition(":")[2].replace(".", "_")
    return Path(model).stem


def _check_creatable(folder: Path) -> None:
    """The folder exists and is writable, or its nearest existing parent is a writable folder."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if existing == folder:
        check_output_folder(folder, "-o")
        return
    if not existing.is_dir():
        raise UserError(f"-o: cannot create the output folder {folder}: {existing} is a file")
    import os

    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"-o: cannot create the output folder {folder}: {existing} is not writable")


def _plan(
    name: str, method: str | None, opset: int | None, exporter: str | None, output: Path, dynamic: bool
) -> list[Job]:
    """The exports to run; raises ``UserError``/``ValueError`` for arguments that cannot work (no torch needed)."""
    from ..core.opsets import FAMILY_MIN_OPSET as MIN_OPSET
    from ..ops.registry import lowest_opset, model_method
    from . import _limits

    if exporter is not None and exporter not in EXPORTERS:
        raise UserError(f"unknown exporter {exporter!r}; choose dynamo or torchscript")
    if method is None:
        if opset is None:
            pairs = list(DEFAULT_PLAN)
        else:
            model_method("auto", opset)  # raises for an opset below 11
            pairs = [(m, opset) for m in ("grid_sample", "gather", "native") if lowest_opset(m) <= opset]
    else:
        pairs = [(method, opset if opset is not None else dict(DEFAULT_PLAN).get(method, _limits.DEFAULT_OPSET))]
    ranges = {
        # export() converts the dynamo build down itself, dynamic shapes included (Shape 15->14 adapter).
        "dynamo": (_limits.DYNAMO_MIN_OPSET, _limits.DYNAMO_MAX_OPSET),
        "torchscript": (MIN_OPSET, _limits.TORCHSCRIPT_MAX_OPSET),
    }
    jobs = []
    for m, o in pairs:
        # Raises a clear ValueError for too-low opsets; with --exporter, suggests only what works on that path.
        resolved = model_method(m, o, path_min_opset=ranges[exporter][0] if exporter else None)
        if exporter is not None:
            lo, hi = ranges[exporter]
            if not lo <= o <= hi:
                other = "torchscript" if exporter == "dynamo" else "dynamo"
                raise UserError(
                    f"opset {o} is out of the {exporter} exporter's range {lo}..{hi}"
                    f"{' with --dynamic' if dynamic and exporter == 'dynamo' else ''}; "
                    f"use --exporter {other} or an opset in range"
                )
            chosen = exporter
        elif ranges["dynamo"][0] <= o <= ranges["dynamo"][1]:
            chosen = "dynamo"
        elif ranges["torchscript"][0] <= o <= ranges["torchscript"][1]:
            chosen = "torchscript"
        else:
            raise UserError(f"opset {o} is not supported: use {MIN_OPSET}..{ranges['dynamo'][1]}")
        path = output / f"{name}_{resolved}_op{o}.onnx"
        job = Job(resolved, o, chosen, exporter is not None, path, asked=m if m != resolved else None)
        job.planned = method is None
        jobs.append(job)
    if output.suffix == ".onnx":
        if len(jobs) != 1:
            raise UserError(
                f"-o {output} names one file but {len(jobs)} exports are planned; give a folder or --method"
            )
        jobs[0].path, jobs[0].named = output, True
    return jobs


def _one_form(jobs: list[Job], net, tensors, method: str | None, name: str, output: Path) -> tuple[list[Job], str]:
    """One job instead of one per method when every method writes the same graph, and the note saying why.

    That is when the model calls no deformable op, or only the fused multi-scale deformable
    attention op (one lowering for every method). An explicit ``--method`` is kept as given.
    """
    if method is not None or len(jobs) < 2:
        return jobs, ""
    from ._ops_used import deformable_ops, one_form_ops

    ops = deformable_ops(net, tensors)
    if ops is None or (ops and not ops <= one_form_ops()):
        return jobs, ""
    job = jobs[0]
    if output.suffix != ".onnx":
        job.path = output / f"{name}_op{job.opset}.onnx"
    if not ops:
        note = (
            "the model has no op to lower (no deform_conv2d, grid_sample or ms_deform_attn call): every "
            f"method writes the same graph, so one file is written ({job.path.name}, opset {job.opset})"
        )
    else:
        note = (
            "the model's only deformable op is ms_deform_attn, whose methods share one form (the fused "
            f"gather lowering): one file is written ({job.path.name}, opset {job.opset})"
        )
    return [job], note


def _check_onnxruntime() -> None:
    """ONNX Runtime checks every file: a one-line error naming the extra when no distribution provides it."""
    from ..runtimes.ort_distribution import MISSING, find

    if find() is None:
        raise UserError(MISSING + "; or pass --no-verify to write the files unchecked")


def check_example_deps() -> None:
    """The bundled example's photo needs scikit-image (the ``[example]`` extra)."""
    from ..core.extras import EXAMPLE_MISSING, has_skimage

    if not has_skimage():
        raise UserError(EXAMPLE_MISSING)
