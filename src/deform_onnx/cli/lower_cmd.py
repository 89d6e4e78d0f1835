"""``deform-onnx lower``: rewrite deformable-convolution nodes of an ONNX file."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from . import app
from ..lowering import METHODS
from ._common import console, err_console, fail, one_line


@app.command("lower")
def lower_command(
    src: Path = typer.Argument(..., help="ONNX file with DeformConv or mmcv deformable-convolution nodes."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the result."),
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help=f"Lowering: {', '.join(METHODS)}. Default: the target's, else auto."
    ),
    opset: Optional[int] = typer.Option(None, "--opset", help="Convert the model to this default-domain opset."),
    in_place: bool = typer.Option(False, "--in-place", help="Overwrite SRC (instead of -o)."),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Runtime target (deform-onnx targets): picks the method (and opset if needed)."
    ),
    force: bool = typer.Option(False, "--force", help="Write a result the target is known to mishandle (warns)."),
    ir_version: Optional[int] = typer.Option(
        None, "--ir-version", help="IR version of the result. Default: the lowest its opsets need."
    ),
) -> None:
    """Replace DeformConv / mmcv deformable-convolution nodes by a lowering.

    Writes atomically (temporary file, then rename); SRC is only written with
    --in-place. Exit code 2 on a missing or unreadable file or a model the
    lowering cannot handle.
    """
    from ..rewrite import lower_file

    if in_place and output is not None and output.resolve() != src.resolve():
        fail("give either -o OUT.onnx or --in-place, not both")
    if not in_place and output is None:
        fail("give -o OUT.onnx (or --in-place to overwrite the input)")
    dst = src if in_place else output
    assert dst is not None
    if not in_place and dst.resolve() == src.resolve():
        fail(f"-o {dst} is the input file; pass --in-place to overwrite it")
    if method is not None and method not in METHODS:
        fail(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = lower_file(src, dst, method=method, opset=opset, target=target, force=force, ir_version=ir_version)
    except (ValueError, OSError) as e:
        fail(str(e))
    for w in caught:
        if str(w.message).startswith("deform_onnx"):
            err_console.print(f"warning: {one_line(w.message)}", highlight=False, soft_wrap=True)
    if report.replaced:
        table = Table(title=f"replaced {len(report.replaced)} node(s) with the {report.lowering} lowering")
        table.add_column("node")
        table.add_column("op")
        table.add_column("lowering")
        for r in report.replaced:
            table.add_row(r.node, r.op, r.lowering)
        console.print(table)
    else:
        console.print("no deformable-convolution nodes found")
    counts: dict[str, int] = {}
    for r in report.replaced:
        counts[r.op] = counts.get(r.op, 0) + 1
    if counts:
        console.print("counts: " + ", ".join(f"{op} x{n}" for op, n in counts.items()), highlight=False)
    if report.opset_before != report.opset_after:
        console.print(f"opset: {report.opset_before} -> {report.opset_after}", highlight=False)
    else:
        console.print(f"opset: {report.opset_after}", highlight=False)
    if report.ir_version_before != report.ir_version_after:
        console.print(f"IR version: {report.ir_version_before} -> {report.ir_version_after}", highlight=False)
    if report.removed_domains:
        console.print(f"removed opset imports: {', '.join(report.removed_domains)}", highlight=False)
    if in_place and not report.changed:
        console.print(f"{dst} left unchanged", highlight=False)
    else:
        console.print(f"wrote {dst}", highlight=False)

