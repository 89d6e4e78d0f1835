"""``deform-onnx export --verbose``: each exporter tried, where it stopped, and the details."""

from __future__ import annotations

from ._common import err_console, one_line


def stage_and_detail(exc: BaseException, verification: bool = False) -> tuple[str, list[str]]:
    """``("stopped at ...", detail lines)`` for an exception of :func:`deform_onnx.export`."""
    where = "the check against PyTorch in ONNX Runtime" if verification else _stage(exc)
    return f"stopped at {where}", _detail(exc)


def _stage(exc: BaseException) -> str:
    """Where an export stopped, from the exception :func:`deform_onnx.export` raised."""
    text = str(exc)
    if isinstance(exc, ValueError):
        return "the argument and lowering checks (before or while translating the deformable op)"
    if "torch.export could not capture" in text:
        return "torch.export (capturing the model's graph)"
    if "version converter" in text:
        return "onnx's version converter (converting the dynamo export down to the opset)"
    if "not valid ONNX" in text or "DeformConv nodes remain" in text:
        return "validation of the written graph (onnx.checker)"
    return f"the exporter ({type(exc).__module__}.{type(exc).__name__})"


def _detail(exc: BaseException, max_lines: int = 40) -> list[str]:
    """The whole message, the notes (e.g. the TorchScript IR around the op) and the chain of causes."""
    lines = str(exc).strip().splitlines()[:max_lines]
    for note in getattr(exc, "__notes__", []):
        lines += str(note).splitlines()
    cause = exc.__cause__ or exc.__context__
    depth = 0
    while cause is not None and depth < 3:
        lines.append(f"caused by {type(cause).__name__}: {one_line(cause)}")
        for note in getattr(cause, "__notes__", []):
            lines += str(note).splitlines()
        cause, depth = cause.__cause__ or cause.__context__, depth + 1
    return lines


def print_attempts(results: list) -> None:
    """``--verbose``: each exporter tried for each row, where it stopped, and the details."""
    for r in results:
        for exporter, outcome, detail in r.attempts:
            err_console.print(
                f"[bold]{r.job.method}@{r.job.opset}[/] {exporter} exporter: {outcome}", highlight=False, soft_wrap=True
            )
            for line in detail:
                err_console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)
