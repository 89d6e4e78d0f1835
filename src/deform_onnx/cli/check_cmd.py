"""``deform-onnx check``: run a model on every runtime and path, compare, time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.table import Table

from . import app
from ..lowering import METHODS
from ._common import CHECK_FAILED, UserError, console, fail, parse_shape

#: Offsets are drawn as randn * OFFSET_SCALE so that many samples fall outside the image.
OFFSET_SCALE = 2.0


def parse_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,32,32", ...]`` -> ``{"x": (1, 3, 32, 32)}``.

    Raises:
        ValueError: a spec without ``=`` or with a non-positive / non-integer dim
            (dims may also be separated by ``x``).
    """
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        if not sep or not name:
            raise ValueError(f"--input-shape {spec!r}: expected NAME=D1,D2,..., e.g. x=1,3,32,32")
        try:
            shapes[name] = parse_shape(dims)
        except UserError as e:
            raise ValueError(f"--input-shape {spec!r}: {e}") from None
    return shapes


def input_roles(model) -> dict[str, str]:
    """Graph inputs that are the offset or mask of a deformable node, or named like one."""
    from ..rewrite import find_nodes

    roles: dict[str, str] = {}
    graph_inputs = {v.name for v in model.graph.inputs}
    for node, src in find_nodes(model):
        for role in ("offset", "mask"):
            i = src.role_index(role)
            if i is not None and i < len(node.inputs) and node.inputs[i] is not None:
                name = node.inputs[i].name
                if name in graph_inputs:
                    roles[name] = role
    for name in graph_inputs:
        low = name.lower()
        if name not in roles:
            if "offset" in low:
                roles[name] = "offset"
            elif "mask" in low:
                roles[name] = "mask"
    return roles


def make_feeds(
    model, shapes: dict[str, tuple[int, ...]], npz: dict[str, np.ndarray] | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for every graph input that is not an initializer.

    Floating inputs: ``randn``, offsets ``randn * 2``, masks ``rand``
    (see :func:`input_roles`); integer and bool inputs: zeros. ``npz`` values
    take precedence.

    Raises:
        ValueError: an input with a dynamic or unknown shape and no
            ``--input-shape``, or ``--inputs``/``--input-shape`` naming an
            input the model does not have.
    """
    rng = np.random.default_rng(seed)
    roles = input_roles(model)
    inputs = [v for v in model.graph.inputs if v.name not in model.graph.initializers]
    names = {v.name for v in inputs}
    for source, keys in (("--input-shape", shapes), ("--inputs", npz or {})):
        unknown = sorted(set(keys) - names)
        if unknown:
            raise ValueError(f"{source} names {', '.join(unknown)}, but the model's inputs are {', '.join(sorted(names))}")
    feeds = {}
    for v in inputs:
        if npz and v.name in npz:
            feeds[v.name] = np.asarray(npz[v.name])
            continue
        dtype = np.dtype(v.dtype.numpy()) if v.dtype is not None else np.dtype(np.float32)
        shape = shapes.get(v.name)
        if shape is None:
            dims = list(v.shape) if v.shape is not None else None
            if dims is None or not all(isinstance(d, int) for d in dims):
                shown = "unknown" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"
                raise ValueError(
                    f"input {v.name} has a dynamic or unknown shape {shown}; give it with "
                    f"--input-shape {v.name}=D1,D2,..."
                )
            shape = tuple(dims)
        if dtype.kind == "f":
            role = roles.get(v.name)
            if role == "offset":
                a = rng.standard_normal(shape) * OFFSET_SCALE
            elif role == "mask":
                a = rng.random(shape)
            else:
                a = rng.standard_normal(shape)
            feeds[v.name] = a.astype(dtype)
        else:
            feeds[v.name] = np.zeros(shape, dtype=dtype)
    return feeds


@app.command("check")
def check_command(
    model_path: Path = typer.Argument(..., metavar="MODEL.onnx", help="ONNX file to check."),
    runtime: list[str] = typer.Option(
        ["ort,openvino"], "--runtime", "-r", help="Runtimes, comma-separated or repeated: ort, openvino."
    ),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="Shape of an input with dynamic dims, e.g. x=1,3,32,32 (repeatable)."
    ),
    inputs: Optional[Path] = typer.Option(None, "--inputs", help=".npz file with input arrays by name."),
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help=f"Lowering for the lowered paths: {', '.join(METHODS)}. Default: the target's, else auto."
    ),
    precision: str = typer.Option("f32", "--precision", help="OpenVINO inference precision hint (f32, f16, bf16)."),
    tolerance: float = typer.Option(1e-4, "--tolerance", help="Max abs error allowed against the reference."),
    repeat: int = typer.Option(5, "--repeat", help="Timed runs per path (median reported)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Runtime target: its method for the lowered paths, and its graph rules checked."
    ),
    force: bool = typer.Option(False, "--force", help="Run a lowering the target is known to mishandle."),
) -> None:
    """Run MODEL on every runtime and path and compare against a reference.

    Paths: ONNX Runtime as is; ONNX Runtime after lower(); OpenVINO with the
    deform-onnx extension; OpenVINO after lower(). Reference: ONNX Runtime as
    is when it runs, else the ONNX reference implementation (small inputs).
    Inputs are random (offsets randn*2, masks rand) unless --inputs is given.
    Exit code 1 if a path that ran exceeds --tolerance (or nothing ran), 2 on
    a bad file or option.
    """
    from ..rewrite import read_model
    from ..runtimes import max_abs_error, reference, run_paths

    if method is not None and method not in METHODS:
        fail(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    rule_notes: list[str] = []
    if target is not None:  # hook (issue 12): the target's method and rules
        from ..targets import hooks as target_hooks

        try:
            rule_notes, method = target_hooks.for_check(model_path, target, method, force)
        except (ValueError, OSError) as e:
            fail(str(e))
    method = method or "auto"
    runtimes = [r.strip() for spec in runtime for r in spec.split(",") if r.strip()]
    try:
        model = read_model(model_path)
        npz = None
        if inputs is not None:
            if not inputs.is_file():
                raise ValueError(f"{inputs}: no such file")
            with np.load(inputs) as data:
                npz = {k: data[k] for k in data.files}
        feeds = make_feeds(model, parse_shapes(input_shape), npz, seed)
        results = run_paths(model_path, feeds, runtimes=runtimes, method=method, precision=precision, repeat=repeat)
    except (ValueError, OSError) as e:
        fail(str(e))
    want, ref_label = reference(model_path, feeds, results)

    table = Table(title=f"{model_path.name}: reference = {ref_label if want is not None else 'none'}")
    for col in ("runtime", "path", "status", "precision", "max abs err", "latency ms"):
        table.add_column(col, justify="right" if col in ("max abs err", "latency ms") else "left")
    bad = []
    for r in results:
        if not r.ran:
            table.add_row(r.runtime, r.path, f"[yellow]not run[/yellow]: {r.reason}", "", "", "")
            continue
        if want is None:
            err_text = "n/a"
        elif r.outputs is want:
            err_text = "reference"
        else:
            err = max_abs_error(r.outputs, want)
            ok = err <= tolerance
            if not ok:
                bad.append(r)
            shown = "mismatch" if math.isinf(err) else f"{err:.2e}"
            err_text = f"[green]{shown}[/green]" if ok else f"[red]{shown}[/red]"
        table.add_row(r.runtime, r.path, "[green]ran[/green]", r.precision or "", err_text, f"{r.latency_ms:.3f}")
    console.print(table)
    for note in rule_notes:
        console.print(f"[yellow]target:[/yellow] {note}", highlight=False)
    if want is None:
        console.print(ref_label, highlight=False)
    ran = [r for r in results if r.ran]
    if not ran:
        console.print("[red]no path ran[/red]")
        raise typer.Exit(CHECK_FAILED)
    if bad:
        console.print(
            f"[red]{len(bad)} path(s) exceed the tolerance {tolerance:g}:[/red] "
            + ", ".join(f"{r.runtime} {r.path}" for r in bad)
        )
        raise typer.Exit(CHECK_FAILED)
    console.print(f"all paths that ran match within {tolerance:g}", highlight=False)
