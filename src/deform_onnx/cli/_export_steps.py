"""``deform-onnx export`` in named steps: check the arguments, plan the jobs, load the model, run the rows, report.

The command (:mod:`.export_cmd`) holds the options; each step here reads them from one
frozen :class:`ExportArgs` and what the steps before it found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from ._attempts import print_attempts
from ._common import CHECK_FAILED, UserError, check_output_folder, console, err_console, fail, make_output_folder
from ._export_checks import EXPORTERS, _check_creatable, _check_onnxruntime, _one_form, _plan, _stem, check_example_deps
from ._export_report import _table, _where
from ._export_rows import Job, Result, RowContext, _commit, _discard, _dynamic_kwargs, _median_ms, _Refused, _run_job
from ._inputs import InputSpec, check_method, load_npz, parse_dtype, parse_specs
from ._models import (
    ExampleInputs,
    archive_inputs,
    cast_inputs,
    check_input_ranks,
    from_npz,
    from_specs,
    load_model,
    model_dtype,
    model_kind,
)

#: Size of the bundled example's photo (deform_onnx.cli.example.EXAMPLE_SIZE; not imported: it loads torch).
EXAMPLE_SIZE = 128


@dataclass(frozen=True)
class ExportArgs:
    """The command line of ``deform-onnx export``, as given (the options' meanings: :mod:`.export_cmd`)."""

    model: str | None
    input_shape: list[str]
    inputs_npz: Path | None
    dtype: str | None
    opset: int | None
    method: str | None
    exporter: str | None
    dynamic: bool
    output: Path
    repeat: int
    verbose: bool
    target: str | None
    force: bool
    ir_version: int | None
    no_verify: bool
    verify_runtime: list[str] = field(default_factory=list)
    keep_artifacts: Path | None = None
    no_verify_runtime: bool = False
    precision: str | None = None


@dataclass
class Asked:
    """The arguments, checked (no torch loaded): the model's kind and name, its example inputs as given."""

    kind: str
    name: str
    specs: list[InputSpec]
    want_dtype: str | None
    npz: dict | None = None
    #: a torch.export archive given no inputs: the example inputs it was exported with.
    archived: ExampleInputs | None = None


@dataclass
class Loaded:
    """The model and its inputs, checked, and the jobs left to run (one when every method writes one form)."""

    net: Any
    inputs: ExampleInputs
    dtype_name: str
    jobs: list[Job]
    one_form: str = ""
    #: the output folder this command created (removed again when a user error stops every row).
    created: Path | None = None
    notes: list[str] = field(default_factory=list)


def check_arguments(a: ExportArgs) -> Asked:
    """The cheap checks first (no torch): a bad option answers at once.

    Raises:
        UserError: a bad or contradictory option, naming it.
    """
    kind = model_kind(a.model)
    specs = parse_specs(a.input_shape)
    want_dtype = parse_dtype(a.dtype) if a.dtype is not None else None
    if a.method is not None:
        check_method(a.method)
    if a.exporter is not None and a.exporter not in EXPORTERS:
        raise UserError(f"unknown exporter {a.exporter!r}; choose dynamo or torchscript")
    if a.inputs_npz is not None and specs:
        raise UserError("give either --inputs FILE.npz or --input-shape, not both")
    npz = load_npz(a.inputs_npz) if a.inputs_npz is not None else None
    asked = Asked(kind, "example" if a.model is None else _stem(a.model, kind), specs, want_dtype, npz)
    _check_example_inputs(a, asked)
    _check_dynamic(a, asked)
    if a.keep_artifacts is not None:  # before any conversion work
        check_output_folder(a.keep_artifacts, "--keep-artifacts")
    if a.output.suffix == ".onnx":
        check_output_folder(a.output.parent, "-o")
    else:
        _check_suffix(a.output)
        _check_creatable(a.output)
    if kind == "example":
        check_example_deps()
    if not a.no_verify:
        _check_onnxruntime()
    return asked


def _check_suffix(output: Path) -> None:
    """A ``-o`` that is neither a file kind deform-onnx writes nor an existing folder, but has a suffix (``m.txt``,
    ``m.ONNX``), is refused: it was taken for a folder to create and the files went inside it.
    """
    if not output.suffix or output.is_dir():
        return
    from ..formats import FORMATS

    known = [s for f in FORMATS.values() for s in f.suffixes]
    near = next((s for s in known if s == output.suffix.lower()), None)
    hint = f" (suffixes are lower case: {output.with_suffix(near).name})" if near else ""
    raise UserError(
        f"-o {output}: {output.suffix} is not a file deform-onnx writes ({', '.join(known)}){hint}; give one of "
        "those, or a folder (one that exists is used whatever its name)"
    )


def _check_example_inputs(a: ExportArgs, asked: Asked) -> None:
    """The bundled example's one image input, an archive's own inputs, or an input the user must give."""
    if asked.kind == "example":
        asked.specs = asked.specs or [InputSpec(None, (1, 3, EXAMPLE_SIZE, EXAMPLE_SIZE))]
        shape = asked.specs[0].shape
        if len(asked.specs) != 1 or len(shape) != 4 or shape[1] != 3:
            raise UserError(f"the example takes one image input N,3,H,W, not {', '.join(map(str, asked.specs))}")
    elif not asked.specs and asked.npz is None and asked.kind == "exported" and a.model is not None:
        asked.archived = archive_inputs(a.model)  # loads torch and the archive (once: load_model reuses it)
    elif not asked.specs and asked.npz is None:
        raise UserError(
            "give the example input with --input-shape (e.g. --input-shape 1,3,224,224) or --inputs FILE.npz"
        )


def _check_dynamic(a: ExportArgs, asked: Asked) -> None:
    """``--dynamic`` makes N, H and W of one input of rank 3 or more dynamic."""
    if not a.dynamic:
        return
    npz, archived, specs = asked.npz, asked.archived, asked.specs
    count = len(npz) if npz is not None else len(archived.tensors) if archived is not None else len(specs)
    if count != 1:
        raise UserError(
            "--dynamic makes N, H and W of one input dynamic; the model is given several inputs: drop "
            "--dynamic, or export in Python with deform_onnx.export(..., dynamic_shapes=...) (one entry per input)"
        )
    first_rank = archived.tensors[0].dim() if archived is not None else len(specs[0].shape) if specs else 3
    if npz is None and first_rank < 3:
        raise UserError("--dynamic makes N, H and W dynamic: the input needs at least 3 dimensions")


def plan_jobs(a: ExportArgs, asked: Asked) -> list[Job]:
    """The exports to run: the target's pick (explicit values win; a known fault is exit 2), then the plan.

    Raises:
        UserError, ValueError: an option the plan cannot hold, or a combination the target mishandles.
    """
    method, opset = a.method, a.opset
    if a.target is not None:  # hook (issue 12): the target picks method/opset
        from ..targets.hooks import for_export

        choice = for_export(a.target, method, opset, True, a.force)
        method, opset = choice.method, choice.opset
        picked = choice.target
        if picked is None:  # for_export resolves the target it is given
            raise RuntimeError(f"internal error: --target {a.target!r} resolved to no target")
        if a.dynamic and "static shapes" in picked.options and not a.force:
            raise UserError(f"target {picked.name!r} takes static shapes only; drop --dynamic "
                            "(or pass --force to write the file anyway)")  # fmt: skip
    # torch.export cannot capture a ScriptModule: a TorchScript archive goes to the TorchScript exporter.
    exporter = a.exporter or ("torchscript" if asked.kind == "torchscript" else None)
    jobs = _plan(asked.name, method, opset, exporter, a.output, a.dynamic)
    from ..core.irversion import check_requested

    for job in jobs:
        check_requested(a.ir_version, job.opset)
        job.extra = {"target": a.target, "force": a.force, "ir_version": a.ir_version}
        job.from_target = a.target is not None and a.method is None
        if a.verify_runtime:  # hook (issue 28): each file also runs on these runtimes before it is written
            job.extra.update(verify_runtimes=a.verify_runtime, keep_artifacts=a.keep_artifacts)
        elif a.no_verify_runtime:  # issue 35: --target mnn (...) runs the file in MNN unless told not to
            job.extra.update(verify_runtimes=())
        elif a.keep_artifacts is not None:  # the target's own runtime keeps its converter's files
            job.extra.update(keep_artifacts=a.keep_artifacts)
        if asked.kind == "torchscript" and a.exporter is None:
            job.exporter_chosen = False
    return jobs


def load(a: ExportArgs, asked: Asked, jobs: list[Job]) -> Loaded:
    """Load the model and its inputs, check them (the ops' module checks, the input ranks), trim the jobs.

    Raises:
        UserError, ValueError: a model that does not load or does not take the inputs (named).
    """
    net = load_model(a.model, asked.kind)
    if asked.want_dtype is not None:
        import torch

        net = net.to(getattr(torch, asked.want_dtype))
    dtype_name = asked.want_dtype or model_dtype(net)
    if asked.archived is not None:
        inputs = cast_inputs(asked.archived, asked.want_dtype)
    elif asked.npz is not None and a.inputs_npz is not None:  # npz is loaded from inputs_npz
        inputs = from_npz(asked.npz, asked.want_dtype, a.inputs_npz)
    else:
        inputs = from_specs(asked.specs, dtype_name)
    from ..ops.registry import check_modules

    # Before running it: torchvision's kernel divides by zero on a DeformConv2d with stride 0.
    check_modules(net).close()
    check_input_ranks(net, inputs, _shown(a, asked))
    jobs, one_form = _one_form(jobs, net, inputs.tensors, a.method, asked.name, a.output)
    created = a.output if a.output.suffix != ".onnx" and not a.output.exists() else None
    if a.output.suffix != ".onnx":
        make_output_folder(a.output, "-o")
    return Loaded(net, inputs, dtype_name, jobs, one_form, created)


def _shown(a: ExportArgs, asked: Asked) -> str:
    """The inputs as an error message names them."""
    if asked.npz is not None:
        return f"the inputs of {a.inputs_npz}"
    if asked.archived is not None:
        return "the archive's example inputs"
    if len(asked.specs) == 1:
        return f"an input of shape {','.join(map(str, asked.specs[0].shape))}"
    return f"the inputs {' '.join(map(str, asked.specs))}"


def run_rows(a: ExportArgs, loaded: Loaded, resized) -> list[Result]:
    """Run every job under a progress bar; a user error met on a row stops them all (exit 2, nothing written)."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    inputs = loaded.inputs
    dynamic_kw = _dynamic_kwargs(inputs.tensors[0].dim(), inputs.names[0]) if a.dynamic else {}
    results: list[Result] = []
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
    )
    with Progress(*columns, TimeElapsedColumn(), console=err_console, transient=True) as progress:
        task = progress.add_task("exporting", total=len(loaded.jobs))
        ctx = RowContext(loaded.net, inputs, resized, dynamic_kw, a.repeat, progress, task, loaded.notes)
        try:
            for job in loaded.jobs:
                job.extra["verify"] = not a.no_verify
                results.append(_run_job(job, ctx))
                progress.advance(task)
        except _Refused as exc:  # a user error met while exporting: nothing is written
            _discard(results)
            if loaded.created is not None and not any(loaded.created.iterdir()):
                loaded.created.rmdir()
            progress.stop()
            fail(str(exc))
        except BaseException:
            _discard(results)
            raise
    from ._written_forms import label_written_forms

    label_written_forms(results, loaded.notes)  # rows named by the form written (a dynamic grid_sample row: gather)
    _commit(results)
    return results


def torch_median_ms(loaded: Loaded, repeat: int) -> float:
    """PyTorch's median time on the example inputs (the table's reference column)."""
    import torch

    with torch.no_grad():
        return _median_ms(lambda: loaded.net(*loaded.inputs.tensors), repeat)


def report(a: ExportArgs, asked: Asked, loaded: Loaded, results: list[Result], times: tuple[float, Any]) -> None:
    """Print the table, the notes and the verdict; exit 1 (:data:`CHECK_FAILED`) when a row failed.

    ``times``: PyTorch's median ms and the resized input of ``--dynamic`` (or ``None``).
    """
    torch_ms, resized = times
    console.print(_table(results, torch_ms, f"deform-onnx export: {asked.name} on {loaded.inputs.description}",
                         dynamic=resized is not None))  # fmt: skip
    if asked.kind == "example":
        from .example import offset_stats

        stats = ", ".join(f"{s:.2f}" for s in offset_stats(loaded.net, loaded.inputs.tensors[0]))
        console.print(f"mean |offset| of each deformable convolution on this input (px): {stats}")
    if resized is not None and not a.no_verify:
        console.print(f"dynamic N, H, W: also checked at {','.join(map(str, resized.shape))}")
    if not a.no_verify:
        from ..runtimes.ort_distribution import describe

        console.print(f"checked in ONNX Runtime: {describe()}, CPU execution provider", highlight=False)
    for r in results:  # --verify-runtime or --target's runtime: where each file ran (exporting.deployed_check)
        if r.runtimes:
            console.print(f"{r.job.path.name} also ran on: {'; '.join(r.runtimes)}", highlight=False, soft_wrap=True)
    for note in loaded.notes:
        err_console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if a.verbose:
        print_attempts(results)
    _verdict(a, loaded, results)


def _verdict(a: ExportArgs, loaded: Loaded, results: list[Result]) -> None:
    """The failed rows (exit 1), the unverified files, or the line that every export matches."""
    from ..exporting.verification import describe_rule

    for r in results:
        if r.problem is not None:
            err_console.print(f"[red]failed[/] {r.job.method}@{r.job.opset}: {escape(r.problem)}", highlight=False,
                              soft_wrap=True)  # fmt: skip
    bound = describe_rule(loaded.dtype_name)
    failed = [r for r in results if not r.ok]
    if failed:
        err_console.print(f"[red]{len(failed)} of {len(results)} exports failed the check ({bound}); "
                          "no file written for them[/]", highlight=False)  # fmt: skip
        if not a.verbose and any(r.problem for r in failed):
            err_console.print(
                "run again with --verbose to see each exporter tried and where it stopped", highlight=False
            )
        raise typer.Exit(CHECK_FAILED)
    if a.no_verify:
        err_console.print(f"[bold yellow]UNVERIFIED: {len(results)} file(s) written without running them in ONNX "
                          f"Runtime against PyTorch (--no-verify)[/]; files in {_where(loaded.jobs)}", highlight=False)  # fmt: skip
        return
    what = "the export matches" if len(results) == 1 else f"all {len(results)} exports match"
    console.print(f"{what} PyTorch ({bound}); files in {_where(loaded.jobs)}", highlight=False)
