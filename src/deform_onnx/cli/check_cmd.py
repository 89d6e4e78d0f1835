"""``deform-onnx check``: run a model on every runtime and path, compare, time."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ._app import app
from ._common import CHECK_FAILED, UserError, console, err_console, user_errors
from ._feeds import make_feeds, parse_shapes
from ._inputs import check_method, load_npz

#: How ``deform_onnx.targets.hooks.for_check`` words a rule the file as is breaks.
BREAKS = "the file as is breaks"

#: OpenVINO's inference precision hints (its CPU plugin has no f64 inference).
PRECISIONS = ("f32", "f16", "bf16")
#: Default seconds each path (and the reference) may run.
DEFAULT_TIMEOUT = 120.0


@app.command("check")
def check_command(
    ctx: typer.Context,
    model_path: Path = typer.Argument(..., metavar="MODEL.onnx", help="ONNX file to check."),
    runtime: list[str] = typer.Option(
        ["ort,openvino"],
        "--runtime",
        "-r",
        help="Runtimes, comma-separated or repeated: ort, openvino (as is and lowered, here); mnn, ncnn, tflite, tvm, "
        "onnx2torch (converted with the runtime's own converter, run in a cached venv of its own: docs/runtimes.md).",
    ),
    input_shape: list[str] = typer.Option(
        [],
        "--input-shape",
        "-s",
        help="Shape of an input with dynamic dims, e.g. x=1,3,32,32 or x=1x3x32x32 (repeatable).",
    ),
    inputs: Path | None = typer.Option(None, "--inputs", help=".npz file with input arrays by name."),
    method: str | None = typer.Option(
        None,
        "--method",
        "-m",
        help="Lowering for the lowered paths: auto, native, grid_sample or gather. Default: the target's, else auto.",
    ),
    precision: str = typer.Option(
        "f32", "--precision", help="OpenVINO inference precision hint: f32, f16 or bf16 (OpenVINO has no f64)."
    ),
    tolerance: float | None = typer.Option(
        None,
        "--tolerance",
        help="Max abs error allowed against the reference. Default: the outputs' dtype's "
        "tolerance (float32 1e-4, float16 1e-2 + 1e-2*max|reference|, float64 1e-8; deform_onnx.exporting.verification).",
        show_default=False,
    ),
    repeat: int = typer.Option(5, "--repeat", min=0, help="Timed runs per path after the first (median reported)."),
    timeout: float = typer.Option(
        DEFAULT_TIMEOUT,
        "--timeout",
        min=0.001,
        help="Seconds each path and the reference may run; past it the row says 'timed out'.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    target: str | None = typer.Option(
        None, "--target", "-t", help="Runtime target: its method for the lowered paths, and its graph rules checked."
    ),
    force: bool = typer.Option(False, "--force", help="Run a lowering the target is known to mishandle."),
    keep_artifacts: Path | None = typer.Option(
        None,
        "--keep-artifacts",
        help="Folder to keep each converter's output in (.mnn, .ncnn.param/.bin, .tflite), "
        "only for the runtimes that matched.",
    ),
) -> None:
    """Run MODEL on every runtime and path and compare against a reference.

    Paths: ONNX Runtime as is; ONNX Runtime after lower(); OpenVINO with the
    deform-onnx extension; OpenVINO after lower() (a file without deformable
    nodes has no lower() rows). Reference: ONNX Runtime as is when it runs,
    else ONNX Runtime's DeformConv kernel on the file re-stamped at opset 19,
    else onnx.reference with torchvision's deform_conv2d; for MSDA / DCNv3
    plugin nodes, onnx.reference with their PyTorch references; for OpenVINO's
    own DeformableConv2D nodes, OpenVINO on the file (f32). Inputs are random
    (offsets randn*2, masks rand) unless --inputs is given; a second input
    (rows "..., border input") moves every sample into the 1-pixel band around the image,
    where border rules differ (OpenVINO's bilinear_interpolation_pad=false:
    up to ~1.4), when the offsets are graph inputs. Exit code 1 if a
    path did not run (failed, timed out, lower() failed), exceeds --tolerance or
    had no reference to compare with, or the file breaks a rule of --target
    (the summary line names the paths); a runtime that is not installed and
    was not named with --runtime is skipped (said in the table). 2 on a bad
    file or option.
    """
    a = CheckArgs(model_path, runtime, input_shape, inputs, method, precision, repeat, timeout, seed, target, force)
    with user_errors(ValueError, OSError):
        read = _read(a)
    deployed_failed = False
    if read.deployed:  # the deployed runtimes' own table (cli/_deployed.py)
        from ._deployed import run_deployed

        opts = {"tolerance": tolerance, "repeat": repeat, "timeout": max(timeout, 600), "keep": keep_artifacts}
        with user_errors(ValueError, OSError):
            deployed_failed = run_deployed(model_path, read.deployed, read.feeds, opts)
        if not read.runtimes:
            raise typer.Exit(CHECK_FAILED if deployed_failed else 0)
    runs = _run(a, read)
    rule_notes, want, ref_label = read.rule_notes, runs.want, runs.ref_label
    if tolerance is None:
        tolerance = dtype_tolerance(want)
    from ..runtimes import RUNTIME_NAMES

    # Only a runtime the user named must be installed; the default list's are skipped when missing.
    named = {RUNTIME_NAMES.get(r, r) for r in read.runtimes} if _given(ctx, "runtime") else set()
    outcomes = _print_tables(a, read, runs, tolerance, named)
    for note in rule_notes:
        console.print(f"[yellow]target:[/yellow] {note}", highlight=False)
    broken = [n for n in rule_notes if BREAKS in n]
    if broken:  # the file as given does not suit the target, whatever its rows say
        err_console.print(f"[red]error:[/] {model_path.name} breaks {len(broken)} rule(s) of target {target!r}: "
                          f"{escape(broken[0].partition(BREAKS)[2].strip())} (`deform-onnx lower {escape(model_path.name)} --target "
                          f"{target} -o OUT.onnx` writes a file that follows the target's rules, where it can)", highlight=False, soft_wrap=True)  # fmt: skip
        raise typer.Exit(CHECK_FAILED)
    if want is None:
        console.print(ref_label, highlight=False, soft_wrap=True)
    failed, summary = summarize(outcomes, tolerance)
    console.print(summary, highlight=False, soft_wrap=True)
    if failed or deployed_failed:
        raise typer.Exit(CHECK_FAILED)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (on the command line or by an environment variable), not defaulted."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors click: compared by name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


#: What each row of the check table came to: ``(label, problem)``; ``problem`` is one of
#: :data:`PROBLEMS`, ``"skipped"`` (not installed, not named) or ``None`` (ran and matched).
Outcome = tuple[str, str | None]
#: The problems that fail the check (exit code 1), in the order the summary names them.
PROBLEMS = ("did not run", "exceeded the tolerance", "had no reference")


@dataclass(frozen=True)
class CheckArgs:
    """The command line of ``deform-onnx check``, as given (the options' meanings: :func:`check_command`)."""

    model_path: Path
    runtime: list[str]
    input_shape: list[str]
    inputs: Path | None
    method: str | None
    precision: str
    repeat: int
    timeout: float
    seed: int
    target: str | None
    force: bool


@dataclass
class _Read:
    """The checked arguments: the model read, its feeds, the runtimes, the method and the target's notes."""

    model: Any
    feeds: dict
    runtimes: list[str]
    method: str
    rule_notes: list[str]
    deployed: list[str]


@dataclass
class _Runs:
    """Every path's result and the reference, at the random input and (when the offsets are inputs) the border one."""

    results: list
    want: Any
    ref_label: str
    deformable: bool
    to_lower: bool
    border_why: str = ""
    border_results: list | None = None
    border_want: Any = None
    border_label: str = ""


def _read(a: CheckArgs) -> _Read:
    """Check the options and read the file (a target's notes on it first); ``UserError`` names a bad one."""
    method: str | None = a.method
    rule_notes: list[str] = []
    if method is not None:
        check_method(method)
    if a.model_path.is_dir():
        raise UserError(f"{a.model_path}: is a directory, not an ONNX file")
    if not a.model_path.is_file():
        raise UserError(f"{a.model_path}: no such file")
    if a.target is not None:  # hook (issue 12): the target's method and rules
        from ..targets import hooks as target_hooks

        rule_notes, method = target_hooks.for_check(a.model_path, a.target, method, a.force)
    runtimes = [r.strip() for spec in a.runtime for r in spec.split(",") if r.strip()]
    _check_precision(a.precision, runtimes)
    from ..rewrite import read_model
    from ._deployed import split_runtimes

    npz = load_npz(a.inputs) if a.inputs is not None else None
    runtimes, deployed = split_runtimes(runtimes)
    model = read_model(a.model_path)
    initialized = set(model.graph.initializers)
    names = [v.name for v in model.graph.inputs if v.name is not None and v.name not in initialized]
    shapes = parse_shapes(a.input_shape, names)
    feeds = make_feeds(model, shapes, npz, a.seed)
    return _Read(model, feeds, runtimes, method or "auto", rule_notes, deployed)


def _run(a: CheckArgs, read: _Read) -> _Runs:
    """Run every path and the reference, under a progress line; then the same at the border input."""
    from ..ops.deform_conv.sources import find_nodes
    from ..runtimes import lowered_here, reference, run_paths
    from ..runtimes.border import border_feeds

    model, feeds, method = read.model, read.feeds, read.method
    # with a target and no --method, lower() takes the target's own choice, its per-class forms included
    lower_method = None if a.target is not None and a.method is None else method
    deformable = bool(find_nodes(model))
    to_lower = bool(lowered_here(model, lower_method, a.target, a.force))  # what run_paths and lower() decide
    with user_errors(ValueError):
        border, border_why = border_feeds(model, feeds, a.seed) if deformable else (None, "")
    paths = functools.partial(
        run_paths, runtimes=read.runtimes, method=lower_method, target=a.target, force=a.force, precision=a.precision,
        timeout=a.timeout,
    )  # fmt: skip
    with _progress() as show:
        results = paths(a.model_path, feeds, repeat=a.repeat, defaults=True,
                        progress=lambda what: show(f"{what}: running", 0, None))  # fmt: skip
        want, ref_label = reference(a.model_path, feeds, results, timeout=a.timeout, progress=show)
        runs = _Runs(results, want, ref_label, deformable, to_lower, border_why)
        if border is not None:  # the border input: correctness only, no timing
            runs.border_results = paths(
                a.model_path, border, repeat=0, progress=lambda what: show(f"{what} (border input): running", 0, None)
            )
            runs.border_want, runs.border_label = reference(
                a.model_path, border, runs.border_results, timeout=a.timeout, progress=show
            )
    return runs


def _print_tables(a: CheckArgs, read: _Read, runs: _Runs, tolerance: float, named: set[str]) -> list[Outcome]:
    """The paths' table, the border input's, and why there are no lower() rows; returns each row's outcome.

    ``named``: the runtimes the user named (:func:`_add_rows`).
    """
    from ..runtimes.border import BAND

    table = Table(title=f"{a.model_path.name}: reference = {runs.ref_label if runs.want is not None else 'none'}")
    for col in ("runtime", "path", "status", "precision", "max abs err", "latency ms"):
        table.add_column(col, justify="right" if col in ("max abs err", "latency ms") else "left")
    outcomes = _add_rows(table, runs.results, runs.want, tolerance, named)
    console.print(table)
    for r in runs.results:
        if r.defaults and r.ran and runs.want is not None:  # what OpenVINO chose with no config, and its rule
            rule = PRECISION_DTYPES.get(r.precision or "", r.precision)
            console.print(f"{r.runtime} {r.path}: compiled with no config (compile_model(model, \"CPU\")), OpenVINO "
                          f"ran {r.precision} on this CPU; judged by the {rule} rule: max abs error "
                          f"{precision_tolerance(r.precision, runs.want, tolerance):.2g}", highlight=False,
                          soft_wrap=True)  # fmt: skip
    if any(r.runtime == "onnxruntime" and r.ran for r in runs.results):
        from ..runtimes.ort_distribution import describe

        console.print(f"onnxruntime rows: {describe()}, CPU execution provider", highlight=False)
    if (
        runs.border_results is not None
    ):  # its own rows: a border-rule mismatch shows even when the random input hides it
        shown = runs.border_label if runs.border_want is not None else "none"
        border_table = Table(title=f"border input, {BAND}: reference = {shown}")
        for col in ("runtime", "path", "status", "precision", "max abs err"):
            border_table.add_column(col, justify="right" if col == "max abs err" else "left")
        for r in runs.border_results:
            r.path += ", border input"
        outcomes += _add_rows(border_table, runs.border_results, runs.border_want, tolerance, named, border=True)
        console.print(border_table)
    elif runs.deformable:
        console.print(f"border input: none ({runs.border_why})", highlight=False)
    if not runs.to_lower:
        from ..rewrite.lowerable import nothing_to_lower  # one wording with `deform-onnx lower`

        console.print(f"{nothing_to_lower(read.model, read.method)}: lower() would not change this file, so it has no "
                      "lower() rows", highlight=False, soft_wrap=True)  # fmt: skip
    return outcomes


def _add_rows(table: Table, results, want, tolerance: float, named: set[str], border: bool = False) -> list[Outcome]:
    """One table row per path (the border table has no latency column); returns each path's outcome.

    A path that did not run fails the check, except one of a runtime that is not installed and that
    the user did not name (``named``): that row says "skipped".
    """
    from ..runtimes import max_abs_error

    outcomes: list[Outcome] = []
    for r in results:
        label = f"{r.runtime} {r.path.removesuffix(', border input')}" + (" (border input)" if border else "")
        problem: str | None = None
        if not r.ran:
            if not r.installed and r.runtime not in named:
                status, problem = f"[yellow]skipped[/yellow]: {escape(r.reason or '')}", "skipped"
            else:
                status, problem = f"[red]not run[/red]: {escape(r.reason or '')}", "did not run"
            table.add_row(r.runtime, r.path, status, "", "", *([] if border else [""]))
            outcomes.append((label, problem))
            continue
        if want is None:
            err_text, problem = "[red]n/a[/red]", "had no reference"
        elif r.outputs is want:
            err_text = "reference"
        else:
            err = max_abs_error(r.outputs, want)
            shown = "mismatch" if math.isinf(err) else f"{err:.2e}"
            bound = precision_tolerance(r.precision, want, tolerance) if r.defaults else tolerance
            if err > bound or math.isnan(err):
                err_text, problem = f"[red]{shown}[/red]", "exceeded the tolerance"
            else:
                err_text = f"[green]{shown}[/green]"
        precision = f"{r.precision} (default)" if r.defaults and r.precision else (r.precision or "")
        latency = [] if border else [f"{r.latency_ms:.3f}"]
        table.add_row(r.runtime, r.path, "[green]ran[/green]", precision, err_text, *latency)
        outcomes.append((label, problem))
    return outcomes


def summarize(outcomes: list[Outcome], tolerance: float) -> tuple[bool, str]:
    """``(failed, line)``: whether the check fails, and the summary line naming the paths at fault.

    E.g. ``check failed: 2 of 4 paths did not run (onnxruntime as is, openvino extension); 1 of 4 paths exceeded
    the tolerance 0.0001 (openvino lower(auto))``.
    """
    skipped = [label for label, p in outcomes if p == "skipped"]
    counted = len(outcomes) - len(skipped)
    parts = []
    for problem in PROBLEMS:
        at_fault = [label for label, p in outcomes if p == problem]
        if at_fault:
            what = f"{problem} {tolerance:g}" if problem == "exceeded the tolerance" else problem
            parts.append(f"{len(at_fault)} of {counted} paths {what} ({', '.join(at_fault)})")
    if not counted:
        parts.append("no path ran")
    skip = f"; skipped, not installed: {', '.join(skipped)}" if skipped else ""
    if parts:
        return True, "[red]check failed:[/red] " + "; ".join(parts) + skip
    return False, f"all {counted} paths ran and match the reference within {tolerance:g}{skip}"


def dtype_tolerance(want) -> float:
    """The max abs error allowed by the reference outputs' dtypes: per output ``atol + rtol * max|reference|``
    with :func:`deform_onnx.exporting.verification.tolerance_for` (float16 files must not fail at float32's 1e-4).
    """
    import numpy as np

    from ..exporting.verification import tolerance_for

    if not want:
        return tolerance_for("float32").atol
    bounds = []
    for w in want:
        w = np.asarray(w)
        tol = tolerance_for(w.dtype)
        # float32 stays the flat 1e-4 it always was here; low precision scales with the output (its rtol).
        low = tol.dtype in ("float16", "bfloat16")
        scale = float(np.nanmax(np.abs(w.astype(np.float64)))) if low and w.size else 0.0
        bounds.append(tol.atol + tol.rtol * scale)
    return min(bounds)


#: OpenVINO's inference precisions -> the dtype whose rule a row run at that precision is judged by.
PRECISION_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def precision_tolerance(precision: str | None, want, tolerance: float) -> float:
    """The bound of a row OpenVINO ran at its own default ``precision``: ``tolerance`` for f32; for f16/bf16 the
    larger of ``tolerance`` and that dtype's rule on the reference (``atol + rtol * max|reference|``, per output,
    :func:`deform_onnx.exporting.verification.tolerance_for`): bf16 inference is held to bfloat16's rule, not
    float32's (on CPUs with AMX OpenVINO's default is bf16).
    """
    import numpy as np

    from ..exporting.verification import tolerance_for

    dtype = PRECISION_DTYPES.get(precision or "")
    if dtype is None or dtype == "float32" or not want:
        return tolerance
    tol = tolerance_for(dtype)
    bounds = [tol.atol + tol.rtol * (float(np.nanmax(np.abs(np.asarray(w, np.float64)))) if np.size(w) else 0.0)
              for w in want]  # fmt: skip
    return max(tolerance, min(bounds))


def _check_precision(precision: str, runtimes: list[str]) -> None:
    """``--precision`` is OpenVINO's hint: one it has, and a plain refusal of f64."""
    p = precision.strip().lower()
    if p in ("f64", "float64", "double"):
        if any(r in ("openvino", "ov") for r in runtimes):
            raise UserError(
                "OpenVINO has no f64 inference (its CPU plugin runs f32, f16 or bf16): use --precision f32, "
                "or --runtime ort to run a float64 model on ONNX Runtime alone"
            )
        raise UserError(
            "--precision is OpenVINO's inference precision (f32, f16, bf16); ONNX Runtime runs the model's own dtypes"
        )
    if p not in PRECISIONS:
        raise UserError(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}")


def _progress():
    """A transient rich progress display on stderr; yields ``show(description, completed, total)``."""
    import contextlib

    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    @contextlib.contextmanager
    def display():
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as progress:
            task = progress.add_task("checking", total=None)

            def show(description: str, completed: int, total: int | None) -> None:
                progress.update(task, description=description, completed=completed, total=total)

            yield show

    return display()
