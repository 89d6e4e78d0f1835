"""``deform-onnx lower``: rewrite deformable-convolution nodes of an ONNX file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from . import app
from ..lowering import METHODS
from ._common import console, fail


@app.command("lower")
def lower_command(
    src: Path = typer.Argument(..., help="ONNX file with DeformConv or mmcv deformable-convolution nodes."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the result."),
    method: str = typer.Option("auto", "--method", "-m", help=f"Lowering: {', '.join(METHODS)}."),
    opset: Optional[int] = typer.Option(None, "--opset", help="Convert the model to this default-domain opset."),
    in_place: bool = typer.Option(False, "--in-place", help="Overwrite SRC (instead of -o)."),
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
    if method not in METHODS:
        fail(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    try:
        report = lower_file(src, dst, method=method, opset=opset)
    except (ValueError, OSError) as e:
        fail(str(e))
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
    if report.removed_domains:
        console.print(f"removed opset imports: {', '.join(report.removed_domains)}", highlight=False)
    if in_place and not report.changed:
        console.print(f"{dst} left unchanged", highlight=False)
    else:
        console.print(f"wrote {dst}", highlight=False)

