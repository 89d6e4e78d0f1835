"""``deform-onnx check --runtime mnn|ncnn|tflite|tvm|onnx2torch``: the deployed runtimes' table."""

from __future__ import annotations

import math
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ._common import UserError, console, err_console

#: The runtimes ``check`` runs as paths (as is, lowered) in this interpreter; the rest are deployed families.
PATH_RUNTIMES = ("ort", "onnxruntime", "openvino", "ov")


def split_runtimes(runtimes: list[str]) -> tuple[list[str], list[str]]:
    """``(path runtimes, deployed families)`` of the names given; an unknown one is a one-line ``UserError``."""
    from ..runtimes.deployed import family, names

    paths, deployed = [], []
    for r in runtimes:
        if r.lower() in PATH_RUNTIMES:
            paths.append(r.lower())
            continue
        try:
            deployed.append(family(r).name)
        except ValueError:
            raise UserError(f"unknown runtime {r!r}; choose from {', '.join(names())}") from None
    return paths, list(dict.fromkeys(deployed))


def run_deployed(model_path: Path, deployed: list[str], feeds: dict, options: dict) -> bool:
    """Run ``model_path`` on each deployed family, print one row each; whether any failed.

    ``options``: ``tolerance`` (``None``: the dtype's), ``repeat``, ``timeout``, ``keep`` (a folder or ``None``).
    """
    from ..runtimes.deployed.check import check_runtimes, describe, failed

    keep = options.get("keep")
    if keep is not None and not Path(keep).is_dir():
        raise UserError(f"--keep-artifacts: {keep} is not a folder; create it first")
    tolerance = options.get("tolerance")
    with err_console.status("deployed runtimes", spinner="dots") as status:

        def log(line: str) -> None:
            if line.startswith(("creating the ", "waiting for ")):  # a runtime's first use: kept on screen
                err_console.print(f"deform-onnx: {escape(line)}", highlight=False, soft_wrap=True)
            status.update(escape(line[:120]))

        rows = check_runtimes(model_path, deployed, inputs=feeds, keep_artifacts=keep,
                              atol=tolerance, rtol=0.0 if tolerance is not None else None,
                              repeats=options.get("repeat", 5), timeout=options.get("timeout", 1800), log=log)  # fmt: skip
    table = Table(
        title=f"{model_path.name} through each runtime's own converter: every output against onnxruntime as is, per element"
    )
    for col in ("runtime", "version", "status", "max abs err", "worst output", "tolerance", "latency ms"):
        table.add_column(col, justify="right" if col in ("max abs err", "tolerance", "latency ms") else "left")
    for r in rows:
        if r.error is not None:
            status_text, err = f"[red]not run[/red]: {escape(r.error)}", ""
        else:
            shown = "mismatch" if r.max_error is None or math.isinf(r.max_error) else f"{r.max_error:.2e}"
            status_text = "[green]ran[/green]" if r.ok else "[red]wrong[/red]"
            err = f"[green]{shown}[/green]" if r.ok else f"[red]{shown}[/red]"
        ms = "" if r.ms is None else f"{r.ms:.3f}"
        tol = f"{r.tolerance:.2g}" + (f" + {r.rtol:.2g}*|ref|" if r.rtol else "")
        worst = escape(r.worst_output or "") if r.error is None else ""
        table.add_row(r.runtime, escape(r.version or ""), status_text, err, worst, tol, ms)
    console.print(table)
    kept = [str(p) for r in rows for p in r.artifacts]
    if kept:
        console.print(f"kept: {', '.join(kept)}", highlight=False, soft_wrap=True)
    bad = failed(rows)
    if bad:
        console.print(f"[red]check failed:[/red] {len(bad)} of {len(rows)} runtimes: "
                      + "; ".join(escape(describe(r)) for r in bad), highlight=False, soft_wrap=True)  # fmt: skip
        for line in target_hints(model_path, [r.runtime for r in bad]):
            console.print(escape(line), highlight=False, soft_wrap=True)
    else:
        console.print(f"all {len(rows)} runtime(s) ran and match the reference", highlight=False)
    return bool(bad)


def target_hints(model_path: Path, families: list[str]) -> list[str]:
    """For each failed runtime that is a target whose rules the file breaks: one line naming the first broken rule
    and the ``lower --target`` command that rewrites the file for it (a default export run with ``--runtime
    onnx2torch`` said only '"allowzero=1" is not implemented', found by the new-user trial).
    """
    import onnx

    from ..targets import TARGETS
    from ..targets.rules import violations

    model = None
    hints = []
    for name in dict.fromkeys(families):
        target = TARGETS.get(name)
        if target is None or not target.rules:
            continue
        model = model if model is not None else onnx.load(str(model_path), load_external_data=False)
        found = violations(model, target.rules)
        if found:
            hints.append(
                f"{name}: the file breaks {len(found)} rule(s) of target {name}, the first: {found[0]}; `deform-onnx "
                f"lower {model_path.name} --target {name} -o OUT.onnx` writes it in the form {name} takes, where it can"
            )
        elif repaired := _repairs_that_apply(model, target.repairs):
            # a file no rule refuses may still hold what the runtime gets wrong and the target rewrites (ncnn: Reduce*)
            hints.append(
                f"{name}: target {name}'s repairs rewrite this file ({repaired[0]}); `deform-onnx lower "
                f"{model_path.name} --target {name} -o OUT.onnx` writes them"
            )
    return hints


def _repairs_that_apply(model, repairs: tuple[str, ...]) -> list[str]:
    """What ``repairs`` (``Target.repairs``) would change in ``model`` (run on a copy), one line each."""
    import onnx

    from ..targets.repairs import REPAIRS

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return [line for name in repairs for line in REPAIRS[name](copy)]
