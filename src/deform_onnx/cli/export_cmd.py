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
from typing import Optional

import typer

from . import app
from ._common import CHECK_FAILED, UserError, console, err_console, load_factory, one_line, parse_shape, user_errors

#: The main job: one export per lowering, each at an opset that runtimes commonly
#: hold (17: widest standard-op support; 11: the oldest the project reaches; 20:
#: native DeformConv on a recent opset).
DEFAULT_PLAN: tuple[tuple[str, int], ...] = (("grid_sample", 17), ("gather", 11), ("native", 20))
#: Max abs error allowed between ONNX Runtime and PyTorch (float32).
TOLERANCE = 1e-4
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

    @property
    def ok(self) -> bool:
        return (
            self.problem is None
            and self.error is not None
            and self.error <= TOLERANCE
            and (self.resized_error is None or self.resized_error <= TOLERANCE)
        )


@app.command("export")
def export_command(
    model: Optional[str] = typer.Argument(
        None,
        metavar="[MODULE:FACTORY]",
        help="A function or class returning an nn.Module (MODULE may be a dotted name or a .py file). "
        "Default: the bundled DCNv2 example on a photo.",
        show_default=False,
    ),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", "-s", help="Example input shape, e.g. 1,3,224,224 (required with MODULE:FACTORY)."
    ),
    opset: Optional[int] = typer.Option(
        None, "--opset", help="Default-domain opset. Default: grid_sample@17, gather@11, native@20."
    ),
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help="Lowering: auto, native, grid_sample or gather. Default: each one the opset allows."
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
        help="Output folder (created if missing), or a .onnx file path when one export is planned.",
    ),
    repeat: int = typer.Option(10, "--repeat", min=1, help="Timed runs per latency (the median is shown)."),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Runtime target (deform-onnx targets): picks method and opset; explicit ones win."
    ),
    force: bool = typer.Option(False, "--force", help="Write a combination the target is known to mishandle (warns)."),
    ir_version: Optional[int] = typer.Option(
        None, "--ir-version", help="IR version of the files. Default: the lowest their opsets need."
    ),
) -> None:
    """Export with each lowering, check every file in ONNX Runtime against PyTorch, print a table.

    Exit code 0 when every max abs error is <= 1e-4, 1 when an export or a
    check failed, 2 on a user error (nothing is written then).
    """
    import torch

    from ..example import EXAMPLE_SIZE, example_model, offset_stats

    with user_errors(ValueError):
        # Cheap checks first: a bad option fails before the model is built.
        shape = parse_shape(input_shape) if input_shape is not None else None
        if model is None:
            name = "example"
            shape = shape or (1, 3, EXAMPLE_SIZE, EXAMPLE_SIZE)
            if len(shape) != 4 or shape[1] != 3:
                raise UserError(f"the example takes images N,3,H,W, not {','.join(map(str, shape))}")
        else:
            if shape is None:
                raise UserError("give the example input's shape with --input-shape, e.g. --input-shape 1,3,224,224")
            name = model.rpartition(":")[2].replace(".", "_")
        if dynamic and len(shape) < 3:
            raise UserError("--dynamic makes N, H and W dynamic: the input needs at least 3 dimensions")
        if target is not None:  # hook (issue 12): the target picks method/opset; a known fault is exit 2
            from ..targets.hooks import for_export

            choice = for_export(target, method, opset, True, force)
            method, opset = choice.method, choice.opset
        jobs = _plan(name, method, opset, exporter, output, dynamic)
        from ..irversion import check_requested

        for job in jobs:
            check_requested(ir_version, job.opset)
            job.extra = {"target": target, "force": force, "ir_version": ir_version}
        net = example_model() if model is None else _build(load_factory(model), model)
        inputs, input_note = _example_input(shape)
        net.eval()
        # Before running it: torchvision's kernel divides by zero on a DeformConv2d with stride 0.
        from ..api import check_deform_modules

        check_deform_modules(net).close()
        with torch.no_grad():
            try:
                torch_ms = _median_ms(lambda: net(inputs), repeat)
            except Exception as exc:
                raise UserError(
                    f"the model fails on an input of shape {','.join(map(str, shape))}: {type(exc).__name__}: {one_line(exc)}"
                ) from None
        if output.suffix != ".onnx":
            if output.exists() and not output.is_dir():
                raise UserError(f"-o {output} is a file, not a folder; give a folder or a .onnx path")
            try:
                output.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"cannot create the output folder {output}: {exc.strerror or exc}") from None

    dynamic_kw = _dynamic_kwargs(len(shape)) if dynamic else {}
    resized = _resized_input(shape) if dynamic else None
    results: list[Result] = []
    notes: list[str] = []
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
        for job in jobs:
            result = _run_job(job, net, inputs, resized, dynamic_kw, repeat, progress, task, notes)
            results.append(result)
            progress.advance(task)

    title = f"deform-onnx export: {name} on {input_note}"
    console.print(_table(results, torch_ms, title, dynamic=resized is not None))
    if model is None:
        stats = ", ".join(f"{s:.2f}" for s in offset_stats(net, inputs))
        console.print(f"mean |offset| of each deformable convolution on this input (px): {stats}")
    if resized is not None:
        console.print(f"dynamic N, H, W: also checked at {','.join(map(str, resized.shape))}")
    for note in notes:
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    for r in results:
        if r.problem is not None:
            err_console.print(f"[red]failed[/] {r.job.method}@{r.job.opset}: {r.problem}", highlight=False, soft_wrap=True)
    failed = [r for r in results if not r.ok]
    if failed:
        err_console.print(f"[red]{len(failed)} of {len(results)} exports failed the check (tolerance {TOLERANCE:g})[/]")
        raise typer.Exit(CHECK_FAILED)
    console.print(f"all {len(results)} exports match PyTorch within {TOLERANCE:g}; files in {_where(jobs)}")


def _plan(
    name: str, method: str | None, opset: int | None, exporter: str | None, output: Path, dynamic: bool
) -> list[Job]:
    """The exports to run; raises ``UserError``/``ValueError`` for arguments that cannot work."""
    from .. import api
    from ..exporters import dynamo, torchscript
    from ..lowering import LOWERINGS, resolve_method
    from ..semantics import MIN_OPSET

    if exporter is not None and exporter not in EXPORTERS:
        raise UserError(f"unknown exporter {exporter!r}; choose dynamo or torchscript")
    if method is None and opset is None:
        pairs = list(DEFAULT_PLAN)
    elif method is None:
        resolve_method("auto", opset)  # raises for an opset below 11
        pairs = [(m, opset) for m in ("grid_sample", "gather", "native") if LOWERINGS[m].min_opset <= opset]
    else:
        pairs = [(method, opset if opset is not None else dict(DEFAULT_PLAN).get(method, api.DEFAULT_OPSET))]
    ranges = {
        # Dynamic shapes read sizes with Shape, which the dynamo path cannot convert below 15.
        "dynamo": (dynamo.DYNAMIC_MIN_OPSET if dynamic else api.DYNAMO_MIN_OPSET, api.DYNAMO_MAX_OPSET),
        "torchscript": (MIN_OPSET, torchscript.MAX_OPSET),
    }
    jobs = []
    for m, o in pairs:
        lowering = resolve_method(m, o)  # raises a clear ValueError for unknown methods and too-low opsets
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
        jobs.append(Job(lowering.name, o, chosen, exporter is not None, output / f"{name}_{lowering.name}_op{o}.onnx"))
    if output.suffix == ".onnx":
        if len(jobs) != 1:
            raise UserError(f"-o {output} names one file but {len(jobs)} exports are planned; give a folder or --method")
        if not output.parent.is_dir():
            raise UserError(f"output folder {output.parent} does not exist; create it first")
        jobs[0].path = output
    return jobs


def _run_job(job: Job, net, inputs, resized, dynamic_kw, repeat, progress, task, notes) -> Result:
    """Export one job (retrying with TorchScript when dynamo cannot reach the opset), time it in ORT."""
    from .. import api

    result = Result(job)
    label = f"{job.method}@{job.opset}"
    exporters = [job.exporter]
    if not job.exporter_chosen and job.exporter == "dynamo" and _torchscript_allows(job.opset):
        exporters.append("torchscript")
    for exporter in exporters:
        progress.update(task, description=f"{label}: exporting ({exporter})")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = api.export(
                    net,
                    (inputs,),
                    job.path,
                    opset_version=job.opset,
                    method=job.method,
                    dynamo=exporter == "dynamo",
                    input_names=["input"],
                    rtol=0.0,
                    atol=TOLERANCE,
                    **dynamic_kw[exporter] if dynamic_kw else {},
                    **job.extra,
                )
        except api.VerificationError as exc:
            result.exporter, result.problem = exporter, one_line(exc)
            return result
        except Exception as exc:  # the exporter's own failures: report, try the next exporter or give up
            result.exporter, result.problem = exporter, f"{type(exc).__name__}: {one_line(exc)}"
            if exporter != exporters[-1]:
                notes.append(f"{label}: the dynamo exporter failed ({result.problem}); trying TorchScript")
            continue
        for w in caught:
            if str(w.message).startswith("deform_onnx"):
                notes.append(f"{label}: {one_line(w.message)}")
        result.problem = None
        result.exporter = report.exporter + (" (fallback)" if report.fallback_reason or exporter != job.exporter else "")
        result.nodes, result.size, result.error = report.node_count, report.file_size, report.max_error
        break
    else:
        return result

    progress.update(task, description=f"{label}: timing ONNX Runtime")
    session = _session(job.path)
    feed = {session.get_inputs()[0].name: inputs.numpy()}
    result.ort_ms = _median_ms(lambda: session.run(None, feed), repeat)
    if resized is not None:
        progress.update(task, description=f"{label}: checking at {tuple(resized.shape)}")
        result.resized_error = _max_error(session, net, resized)
    return result


def _torchscript_allows(opset: int) -> bool:
    from ..exporters import torchscript

    return opset <= torchscript.MAX_OPSET


def _build(factory, spec: str):
    import torch

    try:
        net = factory()
    except Exception as exc:  # the factory is user code
        raise UserError(f"{spec}() failed: {type(exc).__name__}: {one_line(exc)}") from None
    if not isinstance(net, torch.nn.Module):
        raise UserError(f"{spec}() returned {type(net).__name__}, not a torch.nn.Module")
    return net


def _example_input(shape: tuple[int, ...]):
    """The photo for image shapes ``N,3,H,W`` (N copies), else seeded normal noise; and a description."""
    import torch

    from ..example import load_photo

    if len(shape) == 4 and shape[1] == 3:
        photo = load_photo((shape[2], shape[3]))
        return photo.expand(shape[0], -1, -1, -1).contiguous(), f"the astronaut photo {_dims(shape)}"
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=gen), f"seeded normal noise {_dims(shape)}"


def _resized_input(shape: tuple[int, ...]):
    """A second input for dynamic models: N+1 and H, W (the last two axes) + 32, from the photo where it fits."""
    new = (shape[0] + 1, *shape[1:-2], shape[-2] + 32, shape[-1] + 32)
    return _example_input(new)[0]


def _dynamic_kwargs(rank: int) -> dict[str, dict]:
    """Keyword arguments of :func:`deform_onnx.export` that make N and the last two axes dynamic, per exporter."""
    from torch.export import Dim

    axes = {0: "N", rank - 2: "H", rank - 1: "W"}
    return {
        "dynamo": {"dynamic_shapes": ({axis: Dim(label) for axis, label in axes.items()},)},
        "torchscript": {"dynamic_axes": {"input": axes}},
    }


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _max_error(session, net, x) -> float:
    import numpy as np
    import torch

    with torch.no_grad():
        want = net(x)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    return max(float(np.abs(g.astype(np.float64) - w.numpy().astype(np.float64)).max()) for g, w in zip(got, wants))


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
            "[green]yes[/]" if r.ok else "[red]NO[/]",
        ]
        table.add_row(*row)
    return table


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def _where(jobs: list[Job]) -> str:
    folders = {str(j.path.parent) for j in jobs}
    return ", ".join(sorted(folders))


