"""``deform-onnx lower``: rewrite deformable-convolution nodes of an ONNX file."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer
from rich.table import Table

from ._app import app
from ._common import UserError, check_output_folder, console, err_console, one_line, user_errors
from ._inputs import METHODS, check_method


@app.command("lower")
def lower_command(
    src: Path = typer.Argument(
        ...,
        help="ONNX file with DeformConv, mmcv/OpenVINO deformable-convolution, TRTDCNv3, DCNv4_Plugin, MSDA plugin or "
        "GridSample nodes.",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Where to write the result (its folder must exist)."
    ),
    method: str | None = typer.Option(
        None, "--method", "-m", help=f"Lowering: {', '.join(METHODS)}. Default: the target's, else auto."
    ),
    opset: int | None = typer.Option(None, "--opset", help="Convert the model to this default-domain opset."),
    in_place: bool = typer.Option(False, "--in-place", help="Overwrite SRC (instead of -o)."),
    target: str | None = typer.Option(
        None, "--target", "-t", help="Runtime target (deform-onnx targets): picks the method (and opset if needed)."
    ),
    force: bool = typer.Option(False, "--force", help="Write a result the target is known to mishandle (warns)."),
    ir_version: int | None = typer.Option(
        None, "--ir-version", help="IR version of the result. Default: the lowest its opsets need."
    ),
) -> None:
    """Replace deformable nodes (DeformConv, mmcv, OpenVINO, TRTDCNv3, DCNv4_Plugin, MSDA; GridSample with -m gather) by a lowering.

    Writes atomically (temporary file, then rename); SRC is only written with
    --in-place. Exit code 2 on a missing or unreadable file, an output folder
    that is missing or not writable, or a model the lowering cannot handle.
    """
    with user_errors(ValueError):
        if in_place and output is not None and output.resolve() != src.resolve():
            raise UserError("give either -o OUT.onnx or --in-place, not both")
        if not in_place and output is None:
            raise UserError("give -o OUT.onnx (or --in-place to overwrite the input)")
        dst = src if in_place else output
        assert dst is not None
        if not in_place and dst.resolve() == src.resolve():
            raise UserError(f"-o {dst} is the input file; pass --in-place to overwrite it")
        if src.is_dir():
            raise UserError(f"{src}: is a directory, not an ONNX file")
        if not src.is_file():
            raise UserError(f"{src}: no such file")
        if dst.is_dir():
            raise UserError(f"-o {dst}: is a directory; give a file path such as {dst / 'model_lowered.onnx'}")
        if method is not None:
            check_method(method)
        if opset is not None:
            import onnx

            from ..ops.deform_conv.spec import MIN_OPSET

            highest = onnx.defs.onnx_opset_version()
            if not MIN_OPSET <= opset <= highest:
                raise UserError(
                    f"--opset {opset} is out of range: this onnx ({onnx.__version__}) converts to opsets "
                    f"{MIN_OPSET} to {highest} here"
                )
        check_output_folder(dst.parent, "-o")
        from ..rewrite import lower_file

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = lower_file(src, dst, method=method, opset=opset, target=target, force=force, ir_version=ir_version)
    for w in caught:
        if str(w.message).startswith("deform_onnx"):
            err_console.print(f"warning: {one_line(w.message)}", highlight=False, soft_wrap=True)
    if report.replaced:
        used = list(dict.fromkeys(r.lowering for r in report.replaced))  # a target's class forms may mix them
        title = f"the {used[0]} lowering" if len(used) == 1 else f"the {' and '.join(used)} lowerings (per node below)"
        table = Table(title=f"replaced {len(report.replaced)} node(s) with {title}")
        table.add_column("node")
        table.add_column("op")
        table.add_column("lowering")
        for r in report.replaced:
            table.add_row(r.node, r.op, r.lowering)
        console.print(table)
    else:
        from ..rewrite import read_model
        from ..rewrite.lowerable import nothing_to_lower  # one wording with `deform-onnx check`

        console.print(nothing_to_lower(read_model(src), report.method or "auto"), highlight=False, soft_wrap=True)
    counts: dict[str, int] = {}
    for r in report.replaced:
        counts[r.op] = counts.get(r.op, 0) + 1
    if counts:
        console.print("counts: " + ", ".join(f"{op} x{n}" for op, n in counts.items()), highlight=False)
    if report.opset_before != report.opset_after:
        console.print(f"opset: {report.opset_before} -> {report.opset_after}", highlight=False)
    else:
        console.print(f"opset: {report.opset_after}", highlight=False)
    for repair in report.repairs:
        console.print(f"repair: {repair}", highlight=False)
    if report.ir_version_before != report.ir_version_after:
        console.print(f"IR version: {report.ir_version_before} -> {report.ir_version_after}", highlight=False)
    if report.removed_domains:
        console.print(f"removed opset imports: {', '.join(report.removed_domains)}", highlight=False)
    if in_place and not report.changed:
        console.print(f"{dst} left unchanged", highlight=False)
    else:
        console.print(f"wrote {dst}", highlight=False)
