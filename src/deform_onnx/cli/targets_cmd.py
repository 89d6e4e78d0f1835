"""``deform-onnx targets``: the runtime targets, what each picks and why."""

from __future__ import annotations

import typer
from rich.table import Table

from ._app import app
from ._common import console


@app.command("targets")
def targets_command(
    name: str = typer.Argument(
        None,
        help="Show one target (e.g. rknn, onnxruntime<1.25, webgpu>=1.30: a version pin on the runtime's version).",
        show_default=False,
    ),
) -> None:
    """Print the runtime targets: what each picks (method, opset, graph rules) and why, with the source.

    Exit code 2 on an unknown target name.
    """
    from ..targets import all_targets, resolve_target
    from ._common import fail

    if name is not None:
        try:
            targets = [resolve_target(name)]
        except ValueError as e:
            fail(str(e))
    else:
        targets = all_targets()
    rows = []
    for t in targets:
        refused = [f"refuses {f.what}" for f in t.all_faults]
        per_class = [f"{c.op} {c.shape_class}: {c.method}" for c in t.class_methods]
        rows.append((
            t.name,
            t.runtime,
            f"{t.method}@{t.opset}" + (f" (forms: {', '.join(t.forms)})" if t.forms else "")
            + "".join(f"; {p}" for p in per_class)
            + f"; F.grid_sample 5-D: {'GridSample-20' if '5-D' in t.grid_sample else 'gather'}, "
            f"bicubic: {'GridSample cubic' if 'cubic' in t.grid_sample else 'gather'}",
            "; ".join([*t.rules, *refused]) or "-",
            "; ".join([t.reason, *(f"{c.op} {c.shape_class}: {c.method}, {c.reason}" for c in t.class_methods)]),
            f"{t.source} [{t.status}]",
        ))  # fmt: skip
    columns = ("target", "runtime", "picks", "rules and refusals", "why", "source")
    if name is not None:  # one target: one field per line, readable at any width
        table = Table(title=f"deform-onnx target {targets[0].name}", show_header=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for column, value in zip(columns, rows[0]):
            table.add_row(column, value)
    else:
        table = Table(title="deform-onnx runtime targets (--target NAME; explicit --method/--opset win)")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
    console.print(table)
