"""``deform-onnx export``: export a model (the bundled example by default) with each lowering and check it.

Every planned export goes through :func:`deform_onnx.export` (validation,
ONNX Runtime vs PyTorch check, atomic write); the command then times the file
in ONNX Runtime and prints one table row per export.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ._app import app
from ._attempts import print_attempts, stage_and_detail
from ._common import (
    CHECK_FAILED,
    UserError,
    check_output_folder,
    console,
    err_console,
    fail,
    make_output_folder,
    one_line,
    user_errors,
)
from ._inputs import InputSpec, check_method, load_npz, parse_dtype, parse_specs
from ._models import check_input_ranks, from_npz, from_specs, load_model, model_dtype, model_kind

#: The main job: one export per lowering, each at an opset that runtimes commonly
#: hold (17: widest standard-op support; 11: the oldest the project reaches; 20:
#: native DeformConv on a recent opset).
DEFAULT_PLAN: tuple[tuple[str, int], ...] = (("grid_sample", 17), ("gather", 11), ("native", 20))
#: Size of the bundled example's photo (deform_onnx.example.EXAMPLE_SIZE; not imported: it loads torch).
EXAMPLE_SIZE = 128
#: (atol, rtol) between ONNX Runtime and PyTorch per dtype: ``|ort - torch| <= atol + rtol*|torch|``.
#: float32: 1e-4 absolute (README). float16: 1e-2 + 1e-2 relative, a few units in the last
#: place of its 10-bit mantissa (tests/test_dtypes.py). float64: 1e-8 (summation order only).
TOLERANCES = {"float32": (1e-4, 0.0), "float16": (1e-2, 1e-2), "float64": (1e-8, 0.0)}
#: Back-compatible name: the float32 bound.
TOLERANCE = TOLERANCES["float32"][0]
EXPORTERS = ("dynamo", "torchscript")


@dataclass
class Job:
    """One planned export."""

    method: str
    opset: int
    exporter: str  # "dynamo" or "torchscript"
    exporter_chosen: bool  # given with --exporter (no automatic retry with the other one)
    path: Path
    extra: dict = field(default_factory=dict)  # more keyword arguments of deform_onnx.export (target, ...)
    # --method as given when it differs from the lowering shown: "auto" decides per call (a 5-D
    # F.grid_sample below opset 20 takes the gather form), which the resolved name would refuse.
    asked: str | None = None


@dataclass
class Result:
    """One table row: what the export and the checks gave (``problem``: why it failed, if it did)."""

    job: Job
    exporter: str = "-"
    nodes: int | None = None
    size: int | None = None
    error: float | None = None
    resized_error: float | None = None
    ort_ms: float | None = None
    problem: str | None = None
    resized_ok: bool = True
    #: Written with ``--no-verify``: not run in ONNX Runtime nor compared with PyTorch.
    unverified: bool = False
    #: The file this run wrote, not yet renamed to ``job.path`` (see :func:`_commit`).
    partial: Path | None = None
    #: (exporter, what happened, detail lines) for each exporter tried: ``--verbose``.
    attempts: list[tuple[str, str, list[str]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Exported and verified by :func:`deform_onnx.export` (within the tolerance), and the resized check passed."""
        if self.unverified:
            return self.problem is None
        return self.problem is None and self.error is not None and self.resized_ok


@app.command("export")
def export_command(
    model: Optional[str] = typer.Argument(
        None,
        metavar="[MODEL]",
        help="MODULE:FACTORY (a function or class returning an nn.Module; MODULE may be a dotted name or a .py "
        "file), a TorchScript archive (model.pt, from torch.jit.save) or a torch.export archive (model.pt2). "
        "Default: the bundled DCNv2 example on a photo.",
        show_default=False,
    ),
    input_shape: List[str] = typer.Option(
        [],
        "--input-shape",
        "-s",
        help="Example input: [NAME=]D1,D2,...[:DTYPE], e.g. 1,3,224,224 or 1x3x224x224 or x=1,3,64,64:float16; "
        "repeat it, each with a NAME, for several inputs (in forward order).",
    ),
    inputs_npz: Optional[Path] = typer.Option(
        None, "--inputs", help=".npz file with the example inputs, in forward order (names become input names)."
    ),
    dtype: Optional[str] = typer.Option(
        None,
        "--dtype",
        help="float32, float16 or float64: the model and its floating inputs are cast to it. "
        "Default: the model's own dtype.",
    ),
    opset: Optional[int] = typer.Option(
        None, "--opset", help="Default-domain opset. Default: grid_sample@17, gather@11, native@20."
    ),
    method: Optional[str] = typer.Option(
        None,
        "--method",
        "-m",
        help="Lowering: auto, native, grid_sample or gather. Default: each one the opset allows.",
    ),
    exporter: Optional[str] = typer.Option(
        None,
        "--exporter",
        help="dynamo or torchscript. Default: dynamo where its opset range allows, TorchScript otherwise "
        "(and when dynamo cannot reach the opset).",
    ),
    dynamic: bool = typer.Option(
        False, "--dynamic", help="Make N, H and W of the input dynamic, and check the file at another size too."
    ),
    output: Path = typer.Option(
        Path("deform_onnx_out"),
        "--output-dir",
        "--output",
        "-o",
        help="Output folder (created if missing), or a .onnx file path (in an existing folder) when one export "
        "is planned.",
    ),
    repeat: int = typer.Option(10, "--repeat", min=1, help="Timed runs per latency (the median is shown)."),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Show each exporter tried, where it stopped and the graph around the "
        "deformable op, not only the one-line error.",
    ),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Runtime target (deform-onnx targets): picks method and opset; explicit ones win."
    ),
    force: bool = typer.Option(False, "--force", help="Write a combination the target is known to mishandle (warns)."),
    ir_version: Optional[int] = typer.Option(
        None, "--ir-version", help="IR version of the files. Default: the lowest their opsets need."
    ),
    no_verify: bool = typer.Option(
        False,
        "--no-verify",
        help="Write the files without running them in ONNX Runtime against PyTorch "
        "(e.g. float64 ops ONNX Runtime's CPU kernels lack); the ok column says UNVERIFIED.",
    ),
) -> None:
    """Export with each lowering, check every file in ONNX Runtime against PyTorch, print a table.

    Exit code 0 when every file matches PyTorch (float32: max abs error <= 1e-4),
    1 when an export or a check failed (a failed row writes no file), 2 on a user
    error (bad argument, or a graph the target refuses: nothing is written then).
    With --no-verify the files are written unchecked and exit code 0 says only that they were written.
    """
    with user_errors(ValueError):
        # Cheap checks first (no torch): a bad option answers at once.
        kind = model_kind(model)
        specs = parse_specs(input_shape)
        want_dtype = parse_dtype(dtype) if dtype is not None else None
        if method is not None:
            check_method(method)
        if exporter is not None and exporter not in EXPORTERS:
            raise UserError(f"unknown exporter {exporter!r}; choose dynamo or torchscript")
        if inputs_npz is not None and specs:
            raise UserError("give either --inputs FILE.npz or --input-shape, not both")
        npz = load_npz(inputs_npz) if inputs_npz is not None else None
        if kind == "example":
            specs = specs or [InputSpec(None, (1, 3, EXAMPLE_SIZE, EXAMPLE_SIZE))]
            shape = specs[0].shape
            if len(specs) != 1 or len(shape) != 4 or shape[1] != 3:
                raise UserError(f"the example takes one image input N,3,H,W, not {', '.join(map(str, specs))}")
        elif not specs and npz is None:
            raise UserError(
                "give the example input with --input-shape (e.g. --input-shape 1,3,224,224) or --inputs FILE.npz"
            )
        count = len(npz) if npz is not None else len(specs)
        if dynamic and count != 1:
            raise UserError(
                "--dynamic makes N, H and W of one input dynamic; the model is given several inputs: drop "
                "--dynamic, or export in Python with deform_onnx.export(..., dynamic_shapes=...) (one entry per input)"
            )
        if dynamic and npz is None and len(specs[0].shape) < 3:
            raise UserError("--dynamic makes N, H and W dynamic: the input needs at least 3 dimensions")
        if output.suffix == ".onnx":
            check_output_folder(output.parent, "-o")
        else:
            _check_creatable(output)
        if kind == "example":
            check_example_deps()
        if not no_verify:
            _check_onnxruntime()
        name = "example" if kind == "example" else _stem(model, kind)
        if target is not None:  # hook (issue 12): the target picks method/opset; a known fault is exit 2
            from ..targets.hooks import for_export

            choice = for_export(target, method, opset, True, force)
            method, opset = choice.method, choice.opset
            if dynamic and "static shapes" in choice.target.options and not force:
                raise UserError(f"target {choice.target.name!r} takes static shapes only; drop --dynamic "
                                "(or pass --force to write the file anyway)")  # fmt: skip
        # torch.export cannot capture a ScriptModule: a TorchScript archive goes to the TorchScript exporter.
        jobs = _plan(
            name, method, opset, exporter or ("torchscript" if kind == "torchscript" else None), output, dynamic
        )
        from ..irversion import check_requested

        for job in jobs:
            check_requested(ir_version, job.opset)
            job.extra = {"target": target, "force": force, "ir_version": ir_version}
            if kind == "torchscript" and exporter is None:
                job.exporter_chosen = False
        net = load_model(model, kind)
        if want_dtype is not None:
            import torch

            net = net.to(getattr(torch, want_dtype))
        dtype_name = want_dtype or model_dtype(net)
        inputs = from_npz(npz, want_dtype, inputs_npz) if npz is not None else from_specs(specs, dtype_name)
        if npz is not None:
            shown = f"the inputs of {inputs_npz}"
        elif len(specs) == 1:
            shown = f"an input of shape {','.join(map(str, specs[0].shape))}"
        else:
            shown = f"the inputs {' '.join(map(str, specs))}"
        from ..api import check_deform_modules

        # Before running it: torchvision's kernel divides by zero on a DeformConv2d with stride 0.
        check_deform_modules(net).close()
        check_input_ranks(net, inputs, shown)
        jobs, one_form = _one_form(jobs, net, inputs.tensors, method, name, output)
        created = output if output.suffix != ".onnx" and not output.exists() else None
        if output.suffix != ".onnx":
            make_output_folder(output, "-o")

    import torch

    with torch.no_grad():
        torch_ms = _median_ms(lambda: net(*inputs.tensors), repeat)
    atol, rtol = TOLERANCES[dtype_name]
    dynamic_kw = _dynamic_kwargs(inputs.tensors[0].dim(), inputs.names[0]) if dynamic else {}
    with user_errors(ValueError):
        resized = _resized_input(net, inputs.tensors[0], inputs.names[0]) if dynamic else None
    results: list[Result] = []
    notes: list[str] = [one_form] if one_form else []
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("exporting", total=len(jobs))
        try:
            for job in jobs:
                job.extra["verify"] = not no_verify
                result = _run_job(job, net, inputs, resized, dynamic_kw, repeat, progress, task, notes, (atol, rtol))
                results.append(result)
                progress.advance(task)
        except _Refused as exc:  # a user error met while exporting: nothing is written
            _discard(results)
            if created is not None and not any(created.iterdir()):
                created.rmdir()
            progress.stop()
            fail(str(exc))
        except BaseException:
            _discard(results)
            raise
    _commit(results)

    title = f"deform-onnx export: {name} on {inputs.description}"
    console.print(_table(results, torch_ms, title, dynamic=resized is not None))
    if kind == "example":
        from ..example import offset_stats

        stats = ", ".join(f"{s:.2f}" for s in offset_stats(net, inputs.tensors[0]))
        console.print(f"mean |offset| of each deformable convolution on this input (px): {stats}")
    if resized is not None and not no_verify:
        console.print(f"dynamic N, H, W: also checked at {','.join(map(str, resized.shape))}")
    if not no_verify:
        from ..ort_distribution import describe

        console.print(f"checked in ONNX Runtime: {describe()}, CPU execution provider", highlight=False)
    for note in notes:
        err_console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if verbose:
        print_attempts(results)
    for r in results:
        if r.problem is not None:
            err_console.print(f"[red]failed[/] {r.job.method}@{r.job.opset}: {escape(r.problem)}", highlight=False,
                              soft_wrap=True)  # fmt: skip
    bound = _bound(atol, rtol)
    failed = [r for r in results if not r.ok]
    if failed:
        err_console.print(f"[red]{len(failed)} of {len(results)} exports failed the check ({bound}); "
                          "no file written for them[/]", highlight=False)  # fmt: skip
        if not verbose and any(r.problem for r in failed):
            err_console.print(
                "run again with --verbose to see each exporter tried and where it stopped", highlight=False
            )
        raise typer.Exit(CHECK_FAILED)
    if no_verify:
        err_console.print(f"[bold yellow]UNVERIFIED: {len(results)} file(s) written without running them in ONNX "
                          f"Runtime against PyTorch (--no-verify)[/]; files in {_where(jobs)}", highlight=False)  # fmt: skip
        return
    console.print(f"all {len(results)} exports match PyTorch ({bound}); files in {_where(jobs)}", highlight=False)


def _bound(atol: float, rtol: float) -> str:
    return f"max abs error <= {atol:g}" if rtol == 0 else f"|ort - torch| <= {atol:g} + {rtol:g}*|torch|"


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
    from ..ops.deform_conv.spec import MIN_OPSET
    from ..ops.registry import LOWERINGS, resolve_method
    from . import _limits

    if exporter is not None and exporter not in EXPORTERS:
        raise UserError(f"unknown exporter {exporter!r}; choose dynamo or torchscript")
    if method is None and opset is None:
        pairs = list(DEFAULT_PLAN)
    elif method is None:
        resolve_method("auto", opset)  # raises for an opset below 11
        pairs = [(m, opset) for m in ("grid_sample", "gather", "native") if LOWERINGS[m].min_opset <= opset]
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
        lowering = resolve_method(m, o, path_min_opset=ranges[exporter][0] if exporter else None)
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
        path = output / f"{name}_{lowering.name}_op{o}.onnx"
        jobs.append(Job(lowering.name, o, chosen, exporter is not None, path, asked=m if m != lowering.name else None))
    if output.suffix == ".onnx":
        if len(jobs) != 1:
            raise UserError(
                f"-o {output} names one file but {len(jobs)} exports are planned; give a folder or --method"
            )
        jobs[0].path = output
    return jobs


def _one_form(jobs: list[Job], net, tensors, method: str | None, name: str, output: Path) -> tuple[list[Job], str]:
    """One job instead of one per method when every method writes the same graph, and the note saying why.

    That is when the model calls no deformable op, or only the fused multi-scale deformable
    attention op (one lowering for every method). An explicit ``--method`` is kept as given.
    """
    if method is not None or len(jobs) < 2:
        return jobs, ""
    from ._ops_used import ONE_FORM, deformable_ops

    ops = deformable_ops(net, tensors)
    if ops is None or (ops and not ops <= ONE_FORM):
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


class _Refused(Exception):
    """A user error met while exporting (``ValueError`` of :func:`deform_onnx.export`): exit 2, one line."""


def _run_job(job: Job, net, inputs, resized, dynamic_kw, repeat, progress, task, notes, tol) -> Result:
    """Export one job into a partial file and check it; a failed row leaves no file.

    The file is renamed to ``job.path`` by :func:`_commit` once every row has run.
    Raises :class:`_Refused` for a user error (a rule of the target, a bad argument):
    it holds for every exporter, so the other one is not tried.
    """
    result = Result(job)
    try:
        _export_job(job, result, net, inputs, resized, dynamic_kw, repeat, progress, task, notes, tol)
    except _Refused:
        _remove(result.partial)
        raise
    except Exception as exc:  # noqa: BLE001 - a failed row says why in the table, never a traceback
        result.problem = result.problem or f"{type(exc).__name__}: {one_line(exc)}"
        result.attempts.append((result.exporter, f"stopped at the CLI's checks: {result.problem}", []))
    if not result.ok:
        _remove(result.partial)
        result.partial = None
    return result


def _export_job(job: Job, result: Result, net, inputs, resized, dynamic_kw, repeat, progress, task, notes, tol):
    """Export (retrying with TorchScript when the dynamo path fails), time in ONNX Runtime, check the second size."""
    from .. import api
    from ..errors import MissingKernelError

    label = f"{job.method}@{job.opset}"
    exporters = [job.exporter]
    if not job.exporter_chosen and job.exporter == "dynamo" and _torchscript_allows(job.opset):
        exporters.append("torchscript")
    atol, rtol = tol
    verify = job.extra.get("verify", True)
    partial = _partial_path(job.path)
    result.partial = partial
    for exporter in exporters:
        progress.update(task, description=f"{label}: exporting ({exporter})")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = api.export(
                    net,
                    tuple(inputs.tensors),
                    partial,
                    opset_version=job.opset,
                    method=job.asked or job.method,
                    dynamo=exporter == "dynamo",
                    input_names=list(inputs.names),
                    # The dtype's default goes as None: export() then applies its reference rules
                    # (float16 against a float32 copy, deform_onnx.verification); a stricter bound is explicit.
                    **_explicit_tolerance(atol, rtol, inputs.tensors),
                    fallback=not job.exporter_chosen,  # --exporter forces that exporter
                    # export() checks the file at the second size (and writes nothing when it fails there).
                    verify_shapes=[tuple(resized.shape)] if resized is not None else None,
                    **dynamic_kw[exporter] if dynamic_kw else {},
                    **job.extra,
                )
        except api.VerificationError as exc:
            result.exporter, result.problem = exporter, one_line(exc)
            result.attempts.append((exporter, *stage_and_detail(exc, verification=True)))
            return
        except ValueError as exc:  # the target's rules, the arguments: the same for either exporter
            result.attempts.append((exporter, *stage_and_detail(exc)))
            raise _Refused(_cli_wording(one_line(exc))) from None
        except MissingKernelError as exc:  # the runtime lacks a kernel: the other exporter meets it too
            result.exporter, result.problem = exporter, _cli_wording(one_line(exc))
            result.attempts.append((exporter, *stage_and_detail(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - the exporter's own failures: report, try the next exporter or give up
            result.exporter, result.problem = exporter, f"{type(exc).__name__}: {one_line(exc)}"
            result.attempts.append((exporter, *stage_and_detail(exc)))
            if exporter != exporters[-1]:
                notes.append(f"{label}: the dynamo exporter failed ({result.problem}); trying TorchScript")
            continue
        for w in caught:
            if str(w.message).startswith("deform_onnx"):
                notes.append(f"{label}: {one_line(w.message)}")
        if report.fallback_reason:
            result.attempts.append((exporter, f"stopped: {report.fallback_reason}", []))
            result.attempts.append((report.exporter, "exported (deform_onnx.export's own fallback)", []))
        else:
            result.attempts.append((exporter, "exported", []))
        result.problem = None
        result.exporter = report.exporter + (
            " (fallback)" if report.fallback_reason or exporter != job.exporter else ""
        )
        result.nodes, result.size, result.error = report.node_count, report.file_size, report.max_error
        break
    else:
        return
    if not verify:
        result.unverified = True
        return
    progress.update(task, description=f"{label}: timing ONNX Runtime")
    session = _session(partial)
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs.tensors)}
    result.ort_ms = _median_ms(lambda: session.run(None, feed), repeat)
    if resized is not None:  # checked by export() (deform_onnx.dynamic_check): it raised if the file failed there
        result.resized_error = max((v.max_error for v in report.size_checks), default=None)
        result.resized_ok = bool(report.size_checks)


def _cli_wording(text: str) -> str:
    """The Python spellings (``verify=False``, ``force=True``) in the CLI's (``--no-verify``, ``--force``)."""
    for python, cli in (
        ("verify=False (CLI: --no-verify)", "--no-verify"),
        ("verify=False", "--no-verify"),
        ("force=True (CLI: --force)", "--force"),
        ("force=True", "--force"),
    ):
        text = text.replace(python, cli)
    return text


def _partial_path(path: Path) -> Path:
    """A hidden file beside ``path`` that this run writes first (renamed by :func:`_commit`)."""
    import os

    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def _remove(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _discard(results: list[Result]) -> None:
    """Remove every partial file of this run (a user error or an interrupt: nothing is written)."""
    for r in results:
        _remove(r.partial)
        r.partial = None


def _commit(results: list[Result]) -> None:
    """Rename each passed row's partial file to its path (atomic); failed rows have none.

    A file of the same name from an earlier run is replaced by a passed row's and left as it was
    by a failed row (it may be the user's; the failure line says it is not this run's).
    """
    import os

    for r in results:
        if r.partial is not None and r.ok:
            os.replace(r.partial, r.job.path)
        else:
            _remove(r.partial)
            if not r.ok and r.job.path.exists():
                r.problem = f"{r.problem} ({r.job.path} is an earlier file, left as it was)"
        r.partial = None


def _check_onnxruntime() -> None:
    """ONNX Runtime checks every file: a one-line error naming the extra when no distribution provides it."""
    from ..ort_distribution import MISSING, find

    if find() is None:
        raise UserError(MISSING + "; or pass --no-verify to write the files unchecked")


def check_example_deps() -> None:
    """The bundled example's photo needs scikit-image (the ``[example]`` extra)."""
    from .._extras import EXAMPLE_MISSING, has_skimage

    if not has_skimage():
        raise UserError(EXAMPLE_MISSING)


def _explicit_tolerance(atol: float, rtol: float, tensors) -> dict:
    """``{}`` when ``(atol, rtol)`` is the verification default of the inputs' dtype, else ``{"atol", "rtol"}``."""
    from ..verification import DEFAULT_TOLERANCES

    dtype = next((str(t.dtype).removeprefix("torch.") for t in tensors if t.is_floating_point()), "float32")
    default = DEFAULT_TOLERANCES.get(dtype)
    return {} if default is not None and default == (rtol, atol) else {"atol": atol, "rtol": rtol}


def _torchscript_allows(opset: int) -> bool:
    from ._limits import TORCHSCRIPT_MAX_OPSET

    return opset <= TORCHSCRIPT_MAX_OPSET


def _resized_input(net, x, name: str):
    """A second input for dynamic models: the size :mod:`deform_onnx.sizes` picks for dynamic N, H, W (the
    one place that picks second sizes, shared with ``deform_onnx.export``), from the photo where it fits."""
    from .. import sizes

    axes = sizes.dynamic_axes_of((x,), dynamic_axes={name: {0: "N", x.dim() - 2: "H", x.dim() - 1: "W"}},
                                 input_names=[name])  # fmt: skip
    picked, _ = sizes.second_inputs(net, (x,), axes)
    if not picked:  # PyTorch runs none: export() then refuses each row, naming the sizes it tried
        return None
    return from_specs([InputSpec(None, picked[0][1][0])], str(x.dtype).removeprefix("torch.")).tensors[0]


def _dynamic_kwargs(rank: int, name: str) -> dict[str, dict]:
    """Keyword arguments of :func:`deform_onnx.export` that make N and the last two axes dynamic, per exporter."""
    from torch.export import Dim

    axes = {0: "N", rank - 2: "H", rank - 1: "W"}
    return {
        "dynamo": {"dynamic_shapes": ({axis: Dim(label) for axis, label in axes.items()},)},
        "torchscript": {"dynamic_axes": {name: axes}},
    }


def _session(path: Path):
    from ..ort_distribution import require

    ort = require()

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _resized_check(session, net, x, atol: float, rtol: float) -> tuple[float, bool]:
    """Max abs error at the resized input, and whether every output is within ``atol + rtol*|torch|``.

    Raises:
        RuntimeError: PyTorch or ONNX Runtime fails at that size (the message says which, in one line).
    """
    import numpy as np
    import torch

    try:
        with torch.no_grad():
            want = net(x)
    except Exception as exc:  # noqa: BLE001 - the model is user code
        raise RuntimeError(f"the model fails in PyTorch: {type(exc).__name__}: {one_line(exc)}") from None
    try:
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    except Exception as exc:  # noqa: BLE001 - ORT's own error types
        raise RuntimeError(f"ONNX Runtime fails on the file: {type(exc).__name__}: {one_line(exc)}") from None
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    err, ok = 0.0, True
    for g, w in zip(got, wants):
        g64, w64 = g.astype(np.float64), w.numpy().astype(np.float64)
        if g64.shape != w64.shape:
            raise RuntimeError(f"ONNX Runtime gives shape {list(g64.shape)}, PyTorch {list(w64.shape)}")
        diff = np.abs(g64 - w64)
        err = max(err, float(diff.max()) if diff.size else 0.0)
        ok = ok and bool(np.all(diff <= atol + rtol * np.abs(w64)))
    return err, ok


def _median_ms(fn, repeat: int) -> float:
    for _ in range(3):  # warm-up: first-run allocation, kernel selection, thread-pool start
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _table(results: list[Result], torch_ms: float, title: str, dynamic: bool):
    from rich.table import Table

    table = Table(title=title)
    for column in ("method", "opset", "exporter", "nodes", "file size", "max abs error"):
        table.add_column(column, justify="left" if column in ("method", "exporter") else "right")
    if dynamic:
        table.add_column("error, resized", justify="right")
    table.add_column("ORT ms", justify="right")
    table.add_column("PyTorch ms", justify="right")
    table.add_column("ok", justify="center")
    for r in results:
        row = [
            r.job.method,
            str(r.job.opset),
            r.exporter,
            "-" if r.nodes is None else str(r.nodes),
            "-" if r.size is None else _size(r.size),
            "-" if r.error is None else f"{r.error:.2e}",
        ]
        if dynamic:
            row.append("-" if r.resized_error is None else f"{r.resized_error:.2e}")
        row += [
            "-" if r.ort_ms is None else f"{r.ort_ms:.2f}",
            f"{torch_ms:.2f}",
            "[bold yellow]UNVERIFIED[/]" if r.unverified and r.ok else "[green]yes[/]" if r.ok else "[red]NO[/]",
        ]
        table.add_row(*row)
    return table


def _size(n: int) -> str:
    if n < 1024:  # a one-node file (e.g. one GridSample) read "0 KiB"
        return f"{n} B"
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def _where(jobs: list[Job]) -> str:
    folders = {str(j.path.parent) for j in jobs}
    return ", ".join(sorted(folders))
