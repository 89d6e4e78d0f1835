"""``deform-onnx export``: export a model (the bundled example by default) with each lowering and check it.

Every planned export goes through :func:`deform_onnx.export` (validation,
ONNX Runtime vs PyTorch check, atomic write); the command then times the file
in ONNX Runtime and prints one table row per export. The steps (check the
arguments, plan, load, run the rows, report) are :mod:`._export_steps`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ._app import app
from ._common import fail, user_errors
from ._export_checks import DEFAULT_PLAN as DEFAULT_PLAN
from ._export_edge import edge_format, run_edge
from ._export_rows import _resized_input
from ._export_steps import ExportArgs, check_arguments, load, plan_jobs, report, run_rows, torch_median_ms


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
        False,
        "--dynamic",
        help="Make N, H and W of the input dynamic (.pte: H and W, each from half to twice the example's), "
        "and check the file at another size too.",
    ),
    output: Path = typer.Option(
        Path("deform_onnx_out"),
        "--output-dir",
        "--output",
        "-o",
        help="Output folder (created if missing), or a .onnx file path (in an existing folder) when one export "
        "is planned; a .pte (ExecuTorch), .tflite (LiteRT) or .mlpackage (Core ML) path writes that format "
        "(one export, run in its runtime; Core ML converted, not run).",
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
    verify_runtime: list[str] = typer.Option(
        [],
        "--verify-runtime",
        help="Also convert each file with this runtime's own converter and run it there against PyTorch before "
        "writing it (repeatable, or comma-separated): mnn, ncnn, tflite, tvm, onnx2torch, openvino (deform-onnx check).",
    ),
    keep_artifacts: Path | None = typer.Option(
        None, "--keep-artifacts", help="Folder to keep the --verify-runtime converters' outputs in (.mnn, ...)."
    ),
    no_verify_runtime: bool = typer.Option(
        False,
        "--no-verify-runtime",
        help="Do not run the file in the runtime --target names (mnn, ncnn, tflite, tvm, onnx2torch, openvino), "
        "which export does by default before writing it.",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="Compute precision of a .mlpackage (Core ML): float32 (default) or float16 (coremltools' own default).",
    ),
) -> None:
    """Export with each lowering, check every file in ONNX Runtime against PyTorch, print a table.

    Exit code 0 when every file matches PyTorch by deform_onnx.export's own rule (float32:
    |ort - torch| <= 1e-4 + 1e-4*|torch|, or as close to a float64 run as PyTorch is; docs/verification.md),
    1 when an export or a check failed (a failed row writes no file), 2 on a user
    error (bad argument, or a graph the target refuses: nothing is written then).
    With --no-verify the files are written unchecked and exit code 0 says only that they were written.
    """
    a = ExportArgs(model, input_shape, inputs_npz, dtype, opset, method, exporter, dynamic, output, repeat, verbose,
                   target, force, ir_version, no_verify,
                   [r.strip() for spec in verify_runtime for r in spec.split(",") if r.strip()], keep_artifacts,
                   no_verify_runtime, precision)  # fmt: skip
    edge = edge_format(output)
    if precision is not None and (edge is None or edge.name != "coreml"):
        fail(f"--precision is a Core ML option (-o model.mlpackage); {edge.title if edge else 'ONNX'} files compute "
             "in the model's dtype (--dtype)")  # fmt: skip
    if edge is not None:
        run_edge(a, edge)
        return
    with user_errors(ValueError):
        asked = check_arguments(a)
        loaded = load(a, asked, plan_jobs(a, asked))
    torch_ms = torch_median_ms(loaded, repeat)
    with user_errors(ValueError):
        inputs = loaded.inputs
        resized = _resized_input(loaded.net, inputs.tensors[0], inputs.names[0]) if dynamic else None
    if loaded.one_form:
        loaded.notes.append(loaded.one_form)
    results = run_rows(a, loaded, resized)
    report(a, asked, loaded, results, (torch_ms, resized))
