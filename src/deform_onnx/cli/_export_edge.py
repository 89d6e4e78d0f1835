"""``deform-onnx export ... -o model.pte | .tflite | .mlpackage``: one export to a torch.export format.

The model and its inputs are checked and loaded as for ONNX (:mod:`._export_steps`); then one call of
:func:`deform_onnx.export` writes the file after running it in its runtime (Core ML: converted, not
run) and one row is printed. Exit codes as for ONNX: 2 for a user error (an option the format does
not take, a missing extra), 1 when the export or the check failed (nothing written).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from rich.table import Table

from ._common import CHECK_FAILED, UserError, console, err_console, fail, one_line, user_errors
from ._export_steps import ExportArgs, check_arguments

#: Options of ``deform-onnx export`` that mean nothing for a torch.export format, and their flags.
_ONNX_ONLY = {"opset": "--opset", "exporter": "--exporter", "target": "--target", "ir_version": "--ir-version"}


def edge_format(output):
    """The torch.export format ``-o`` names (``None`` for ONNX, a folder, or any other suffix)."""
    from ..formats import FORMATS

    suffix = output.suffix.lower()
    for name in ("executorch", "litert", "coreml", "openvino"):
        if suffix in FORMATS[name].suffixes:
            return FORMATS[name]
    return None


def _check(a: ExportArgs, fmt) -> None:
    """The options the format cannot take, and its extra, before loading anything."""
    if a.verify_runtime or a.keep_artifacts is not None:
        raise UserError(
            f"--verify-runtime/--keep-artifacts run an ONNX file elsewhere; {fmt.title} files do not take it"
        )
    if fmt.name == "openvino":  # an ONNX export first (its options apply), converted to IR and run in OpenVINO
        _require(fmt)
        return
    for field, flag in _ONNX_ONLY.items():
        if getattr(a, field) is not None:
            raise UserError(f"{flag} is an ONNX option; {fmt.title} files ({a.output.suffix}) do not take it")
    if a.force:
        raise UserError(f"--force is an ONNX target option; {fmt.title} files do not take it")
    if a.dynamic and fmt.name != "executorch":
        raise UserError(f"--dynamic: {fmt.title} files are written at the example's size; drop --dynamic")
    if a.method == "native":
        raise UserError(f"--method native keeps torchvision::deform_conv2d, which {fmt.title} has no kernel for")
    _require(fmt)


def _require(fmt) -> None:
    """The format's extra, as a user error."""
    from ..formats import require

    try:
        require(fmt)
    except ModuleNotFoundError as exc:
        raise UserError(str(exc)) from None


def _dynamic_shapes(tensors):
    """H and W of the first input dynamic (each from half to twice the example's), the rest static.

    N stays static: ExecuTorch plans every tensor at the upper bounds, and a file for edge devices runs
    one image; ``deform_onnx.export(..., dynamic_shapes=...)`` takes any ``Dim`` (a batch one too).
    """
    import torch

    first = tensors[0]
    if first.dim() < 3:
        raise UserError("--dynamic makes H and W dynamic: the input needs at least 3 dimensions")
    h, w = first.shape[-2], first.shape[-1]
    dims = {
        first.dim() - 2: torch.export.Dim("H", min=max(2, h // 2), max=h * 2),
        first.dim() - 1: torch.export.Dim("W", min=max(2, w // 2), max=w * 2),
    }
    return (dims, *([None] * (len(tensors) - 1)))


def run_edge(a: ExportArgs, fmt) -> None:
    """Export once to ``fmt`` at ``a.output`` and print its row.

    Raises:
        typer.Exit: 2 on a user error, 1 when the export or its check failed.
    """
    import typer

    from ._export_steps import _shown
    from ._models import cast_inputs, check_input_ranks, from_npz, from_specs, load_model, model_dtype

    with user_errors(ValueError):
        _check(a, fmt)
        # The ONNX checks of the model and inputs, with the output taken as a file in its folder.
        asked = check_arguments(dataclasses.replace(a, output=a.output.with_suffix(".onnx"), no_verify=True))
        net = load_model(a.model, asked.kind)
        if asked.want_dtype is not None:  # --dtype casts the model as for ONNX, not the inputs alone
            import torch

            net = net.to(getattr(torch, asked.want_dtype))
        dtype = asked.want_dtype or model_dtype(net)
        if asked.archived is not None:
            inputs = cast_inputs(asked.archived, asked.want_dtype)
        elif asked.npz is not None and a.inputs_npz is not None:
            inputs = from_npz(asked.npz, asked.want_dtype, a.inputs_npz)
        else:
            inputs = from_specs(asked.specs, dtype)
        check_input_ranks(net, inputs, _shown(a, asked))
        options = _options(a, fmt, inputs)
    import deform_onnx

    started = time.perf_counter()
    try:
        # No rich status spinner: it swaps sys.stderr for a proxy that would show the runtimes' log lines.
        err_console.print(f"exporting to {fmt.title} and running the file ...", highlight=False)
        report = deform_onnx.export(net, tuple(inputs.tensors), a.output, **options)
    except (ValueError, ModuleNotFoundError) as exc:
        fail(str(exc))
    except Exception as exc:  # the export or the check failed: nothing written  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
        said = one_line(str(exc))
        if a.dynamic and "at its declared" in said:  # --dynamic's guess of H and W, not the user's
            said += (
                " (--dynamic takes the input's last two dimensions for H and W, as in [N, C, H, W]; for a "
                "channels-last [N, H, W, C] input pass dynamic_shapes to deform_onnx.export in Python)"
            )
        err_console.print(f"[bold red]failed:[/] {said}", highlight=False, soft_wrap=True)
        raise typer.Exit(CHECK_FAILED) from None
    _print_row(report, fmt, time.perf_counter() - started)


def _options(a: ExportArgs, fmt, inputs) -> dict:
    """export()'s keywords for the format: an OpenVINO IR takes the ONNX export's options (it is one, converted)."""
    options: dict[str, Any] = {"method": a.method, "verify": not a.no_verify}
    if a.precision is not None:  # Core ML only (export_cmd refuses it for the other formats)
        options["precision"] = a.precision
    if fmt.name != "openvino":
        return {**options, "dynamic_shapes": _dynamic_shapes(inputs.tensors) if a.dynamic else None}
    names = list(inputs.names)
    options.update(opset_version=a.opset, target=a.target, force=a.force, ir_version=a.ir_version, input_names=names)
    if a.exporter is not None:
        options["dynamo"] = a.exporter == "dynamo"
    if a.dynamic:  # N, H and W of the first input, as --dynamic does for .onnx files
        rank = inputs.tensors[0].dim()
        options["dynamic_axes"] = {names[0]: {0: "N", rank - 2: "H", rank - 1: "W"}}
    return options


def _print_row(report, fmt, seconds: float) -> None:
    table = Table("format", "file", "ran in", "max err", "sizes", "KiB", "s")
    ran = report.runtime or "not run (converted and validated only)"
    err = "-" if report.max_error is None else f"{report.max_error:.1e}"
    table.add_row(fmt.title, str(report.path), ran, err, str(len(report.checked_shapes)), f"{report.file_size / 1024:.0f}",
                  f"{seconds:.1f}")  # fmt: skip
    console.print(table)
    for note in report.notes:
        err_console.print(f"note: {note}", highlight=False)
