"""``deform-onnx export``'s report: the table of rows and the lines under it."""

from __future__ import annotations

from ._export_rows import Job, Result


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
            "[bold yellow]UNVERIFIED[/]" if r.unverified and r.ok else "[green]yes[/]" if r.ok else "[red]NO[/]",
        ]
        table.add_row(*row)
    return table


def _size(n: int) -> str:
    if n < 1024:  # a one-node file (e.g. one GridSample) read "0 KiB"
        return f"{n} B"
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def _where(jobs: list[Job]) -> str:
    folders = {str(j.path.parent) for j in jobs}
    return ", ".join(sorted(folders))
