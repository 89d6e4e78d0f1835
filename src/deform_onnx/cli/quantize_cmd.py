"""``deform-onnx quantize``: an INT8 file of a deformable model (:func:`deform_onnx.quantize`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from ..core.atomic_io import check_output_path
from ._app import app
from ._common import CHECK_FAILED, UserError, console, err_console, one_line, user_errors

_TARGETS = (
    "onnxruntime",
    "tensorrt",
    "openvino",
)  # deform_onnx.quantize.TARGETS (spelled out: no import at parse time)


def _floats(text: str | None, option: str) -> tuple[float, float, float] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"{option} {text!r}: give three numbers, R,G,B (e.g. 0.485,0.456,0.406)") from None
    if len(values) != 3:
        raise UserError(f"{option} {text!r}: give three numbers, R,G,B")
    return values


def _size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UserError(f"--size {text!r}: give HxW, e.g. 224x224")
    return int(parts[0]), int(parts[1])


def _quantize(src: Path, output: Path, calibration: Path, options: dict):
    """:func:`deform_onnx.quantize` under a progress bar; a file below the accuracy gate: one line, exit 1."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..quantize import quantize
    from ..quantize.gate import AccuracyError

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("read", total=1)

            def step(name: str, done: int, total: int) -> None:
                bar.update(task, description=name, completed=done, total=max(total, 1))

            return quantize(src, output, str(calibration), progress=step, **options)
    except AccuracyError as exc:  # the file was made and measured, and refused: nothing written
        err_console.print(f"[bold red]failed:[/] {escape(one_line(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(CHECK_FAILED) from None


@app.command("quantize")
def quantize_command(
    src: Path = typer.Argument(..., help="Float ONNX file (DeformConv nodes are lowered first)."),
    output: Path = typer.Option(..., "--output", "-o", help="Quantized file to write (.onnx; .xml for openvino)."),
    calibration: Path = typer.Option(
        ..., "--calibration", "-c", help="An .npz (one array per input, samples stacked) or a folder of images."
    ),
    target: str = typer.Option("onnxruntime", "--target", "-t", help=f"Runtime: {', '.join(_TARGETS)}."),
    method: str | None = typer.Option(
        None, "--method", "-m", help="Lowering of deformable nodes: grid_sample, gather, native (keep DeformConv)."
    ),
    size: str | None = typer.Option(None, "--size", help="Images: resize to HxW (default: the model's input size)."),
    mean: str | None = typer.Option(None, "--mean", help="Images: per-channel mean R,G,B on the [0, 1] scale."),
    std: str | None = typer.Option(None, "--std", help="Images: per-channel std R,G,B on the [0, 1] scale."),
    layout: str = typer.Option("NCHW", "--layout", help="Images: NCHW or NHWC."),
    scale: float = typer.Option(1.0, "--scale", help="Images: pixel range after reading, [0, SCALE] (255 for raw)."),
    eval_npz: Path | None = typer.Option(
        None,
        "--eval",
        help="Held-out inputs the INT8 file is measured and gated on: an .npz (samples stacked) or a folder of "
        "images (default: the calibration samples).",
    ),
    table: bool = typer.Option(False, "--table", help="Print the per-layer error table."),
    skip_lowering_check: bool = typer.Option(
        False,
        "--skip-lowering-check",
        help="Do not check the lowered float model against SRC (needed when ONNX Runtime cannot run SRC).",
    ),
    min_cosine: float = typer.Option(
        0.99, "--min-cosine", help="Accuracy gate: each output's smallest cosine to the float model's, per input."
    ),
    max_error: float = typer.Option(
        0.35,
        "--max-error",
        help="Accuracy gate: each output's largest |int8 - float| as a fraction of its largest |float|, per input.",
    ),
    accept_accuracy: bool = typer.Option(
        False, "--accept-accuracy", help="Write the INT8 file even below the accuracy gate (the report says so)."
    ),
) -> None:
    """Write an INT8 (QDQ) file that keeps the offset path float, calibrated on CALIBRATION.

    ONNX Runtime and TensorRT: onnxruntime.quantization (quantize_static,
    per-channel int8 weights); OpenVINO: nncf. Writes atomically. Exit code
    1 when the INT8 file misses the accuracy gate (--min-cosine, --max-error
    against the float model on the --eval inputs; nothing written, unless
    --accept-accuracy); 2 on a missing file, an output folder it cannot write
    (checked first), bad options or calibration data the model cannot take.
    """
    with user_errors(ValueError, FileNotFoundError, NotADirectoryError, PermissionError, ImportError):
        if target not in _TARGETS:
            raise UserError(f"--target {target!r}: use one of {', '.join(_TARGETS)}")
        if layout not in ("NCHW", "NHWC"):
            raise UserError(f"--layout {layout!r}: use NCHW or NHWC")
        if not src.is_file():
            raise UserError(f"{src}: no such file")
        # The CLI's own words for quantize()'s dst/method checks (it names its Python parameters).
        want = ".xml" if target == "openvino" else ".onnx"
        if output.suffix != want:
            raise UserError(f"-o {output}: --target {target} writes a {want} file; name it {output.with_suffix(want)}")
        check_output_path(output, "-o")  # a folder it cannot write: one line, exit 2, before any work
        if method not in (None, "grid_sample", "gather", "native"):
            raise UserError(f"--method {method!r}: use grid_sample, gather or native")
        if not calibration.exists():
            raise UserError(f"--calibration {calibration}: no such file or folder")
        if calibration.is_file() and calibration.suffix != ".npz":
            raise UserError(f"--calibration {calibration}: give an .npz file or a folder of images")
        if eval_npz is not None and not (eval_npz.is_dir() or (eval_npz.is_file() and eval_npz.suffix == ".npz")):
            raise UserError(f"--eval {eval_npz}: give an .npz file or a folder of images")
        if not -1.0 <= min_cosine <= 1.0:
            raise UserError(f"--min-cosine {min_cosine}: give a number in [-1, 1] (default 0.99)")
        if not max_error > 0:
            raise UserError(f"--max-error {max_error}: give a positive fraction of the output's scale (default 0.35)")
        size_hw, mean_rgb, std_rgb = _size(size), _floats(mean, "--mean"), _floats(std, "--std")

        from ..quantize import Preprocess

        preprocess = None
        if calibration.is_dir() or (eval_npz is not None and eval_npz.is_dir()):
            preprocess = Preprocess(size=size_hw, layout=layout, scale=scale)  # mean, std: Preprocess's defaults
            if mean_rgb is not None:
                preprocess = dataclasses.replace(preprocess, mean=mean_rgb)
            if std_rgb is not None:
                preprocess = dataclasses.replace(preprocess, std=std_rgb)
        options = {
            "target": target,
            "method": method,
            "preprocess": preprocess,
            "eval_inputs": str(eval_npz) if eval_npz is not None else None,
            "skip_lowering_check": skip_lowering_check,
            "min_cosine": min_cosine,
            "max_error": max_error,
            "accept": accept_accuracy,
        }
        report = _quantize(src, output, calibration, options)
    text = str(report)
    console.print(text if table else text.split("\n\n")[0], highlight=False, soft_wrap=True)
    below = " (below the accuracy bound: written because --accept-accuracy was given)" if report.accepted else ""
    console.print(f"wrote {output}{below}", highlight=False, soft_wrap=True)
