"""``deform-onnx export``: export a model (the bundled example by default) with each lowering and check it.

Every planned export goes through :func:`deform_onnx.export` (validation,
ONNX Runtime vs PyTorch check, atomic write); the command then times the file
in ONNX Runtime and prints one table row per export.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ._app import app
from ._attempts import print_attempts
from ._common import (
    CHECK_FAILED,
    UserError,
    check_output_folder,
    console,
    err_console,
    fail,
    make_output_folder,
    user_errors,
)
from ._export_checks import DEFAULT_PLAN as DEFAULT_PLAN
from ._export_checks import EXPORTERS, _check_creatable, _check_onnxruntime, _one_form, _plan, _stem
from ._export_checks import check_example_deps as check_example_deps
from ._export_report import _bound, _table, _where
from ._export_rows import Result, _commit, _discard, _dynamic_kwargs, _median_ms, _Refused, _resized_input, _run_job
from ._inputs import InputSpec, check_method, load_npz, parse_dtype, parse_specs
from ._models import (
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
#: (atol, rtol) between ONNX Runtime and PyTorch per dtype: ``|ort - torch| <= atol + rtol*|torch|``.
#: float32: 1e-4 absolute (README). float16: 1e-2 + 1e-2 relative, a few units in the last
#: place of its 10-bit mantissa (tests/test_dtypes.py). float64: 1e-8 (summation order only).
TOLERANCES = {"float32": (1e-4, 0.0), "float16": (1e-2, 1e-2), "float64": (1e-8, 0.0)}
#: Back-compatible name: the float32 bound.
TOLERANCE = TOLERANCES["float32"][0]


@app.command("export")
def export_command(
    model: str | None = typer.Argument(
        None,
        metavar="[MODEL]",
        help="MODULE:FACTORY (a function or class returning an nn.Module; MODULE may be a dotted name or a .py "
        "file), a TorchScript archive (model.pt, from torch.jit.save) or a torch.export archive (model.pt2). "
        "Default: the bundled DCNv2 example on a photo.",
        show_default=False,
    ),
    input_shape: list[str] = typer.Option(
        [],
        "--input-shape",
        "-s",
        help="Example input: [NAME=]D1,D2,...[:DTYPE], e.g. 1,3,224,224 or 1x3x224x224 or x=1,3,64,64:float16; "
        "repeat it, each with a NAME, for several inputs (in forward order).",
    ),
    inputs_npz: Path | None = typer.Option(
        None, "--inputs", help=".npz file with the example inputs, in forward order (names become input names)."
    ),
    dtype: str | None = typer.Option(
        None,
        "--dtype",
        help="float32, float16 or float64: the model and its floating inputs are cast to it. "
        "Default: the model's own dtype.",
    ),
    opset: int | None = typer.Option(
        None, "--opset", help="Default-domain opset. Default: grid_sample@17, gather@11, native@20."
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        "-m",
        help="Lowering: auto, native, grid_sample or gather. Default: each one the opset allows.",
    ),
    exporter: str | None = typer.Option(
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
    target: str | None = typer.Option(
        None, "--target", "-t", help="Runtime target (deform-onnx targets): picks method and opset; explicit ones win."
    ),
    force: bool = typer.Option(False, "--force", help="Write a combination the target is known to mishandle (warns)."),
    ir_version: int | None = typer.Option(
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
        archived = None  # a torch.export archive given no inputs: the example inputs it was exported with
        if kind == "example":
            specs = specs or [InputSpec(None, (1, 3, EXAMPLE_SIZE, EXAMPLE_SIZE))]
            shape = specs[0].shape
            if len(specs) != 1 or len(shape) != 4 or shape[1] != 3:
                raise UserError(f"the example takes one image input N,3,H,W, not {', '.join(map(str, specs))}")
        elif not specs and npz is None and kind == "exported" and model is not None:
            archived = archive_inputs(model)  # loads torch and the archive (once: load_model reuses it)
        elif not specs and npz is None:
            raise UserError(
                "give the example input with --input-shape (e.g. --input-shape 1,3,224,224) or --inputs FILE.npz"
            )
        count = len(npz) if npz is not None else len(archived.tensors) if archived is not None else len(specs)
        if dynamic and count != 1:
            raise UserError(
                "--dynamic makes N, H and W of one input dynamic; the model is given several inputs: drop "
                "--dynamic, or export in Python with deform_onnx.export(..., dynamic_shapes=...) (one entry per input)"
            )
        first_rank = archived.tensors[0].dim() if archived is not None else len(specs[0].shape) if specs else 3
        if dynamic and npz is None and first_rank < 3:
            raise UserError("--dynamic makes N, H and W dynamic: the input needs at least 3 dimensions")
        if output.suffix == ".onnx":
            check_output_folder(output.parent, "-o")
        else:
            _check_creatable(output)
        if kind == "example":
            check_example_deps()
        if not no_verify:
            _check_onnxruntime()
        name = "example" if model is None else _stem(model, kind)  # model_kind: None is the example
        if target is not None:  # hook (issue 12): the target picks method/opset; a known fault is exit 2
            from ..targets.hooks import for_export

            choice = for_export(target, method, opset, True, force)
            method, opset = choice.method, choice.opset
            picked = choice.target
            if picked is None:  # for_export resolves the target it is given
                raise RuntimeError(f"internal error: --target {target!r} resolved to no target")
            if dynamic and "static shapes" in picked.options and not force:
                raise UserError(f"target {picked.name!r} takes static shapes only; drop --dynamic "
                                "(or pass --force to write the file anyway)")  # fmt: skip
        # torch.export cannot capture a ScriptModule: a TorchScript archive goes to the TorchScript exporter.
        jobs = _plan(
            name, method, opset, exporter or ("torchscript" if kind == "torchscript" else None), output, dynamic
        )
        from ..core.irversion import check_requested

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
        if archived is not None:
            inputs = cast_inputs(archived, want_dtype)
        else:
            inputs = (
                from_npz(npz, want_dtype, inputs_npz)
                if npz is not None and inputs_npz is not None  # npz is loaded from inputs_npz
                else from_specs(specs, dtype_name)
            )
        if npz is not None:
            shown = f"the inputs of {inputs_npz}"
        elif archived is not None:
            shown = "the archive's example inputs"
        elif len(specs) == 1:
            shown = f"an input of shape {','.join(map(str, specs[0].shape))}"
        else:
            shown = f"the inputs {' '.join(map(str, specs))}"
        from ..ops.registry import check_modules

        # Before running it: torchvision's kernel divides by zero on a DeformConv2d with stride 0.
        check_modules(net).close()
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
    from ._written_forms import label_written_forms

    label_written_forms(results, net, inputs.tensors)  # -m auto: a 5-D grid_sample row holds the gather form
    _commit(results)

    title = f"deform-onnx export: {name} on {inputs.description}"
    console.print(_table(results, torch_ms, title, dynamic=resized is not None))
    if kind == "example":
        from .example import offset_stats

        stats = ", ".join(f"{s:.2f}" for s in offset_stats(net, inputs.tensors[0]))
        console.print(f"mean |offset| of each deformable convolution on this input (px): {stats}")
    if resized is not None and not no_verify:
        console.print(f"dynamic N, H, W: also checked at {','.join(map(str, resized.shape))}")
    if not no_verify:
        from ..runtimes.ort_distribution import describe

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
    what = "the export matches" if len(results) == 1 else f"all {len(results)} exports match"
    console.print(f"{what} PyTorch ({bound}); files in {_where(jobs)}", highlight=False)
