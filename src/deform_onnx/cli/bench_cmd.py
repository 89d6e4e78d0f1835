"""``deform-onnx bench``: time deformable convolution side by side (the harness of :mod:`deform_onnx.bench`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional

import typer

from . import app
from ._common import UserError, console, err_console, user_errors

#: ``--quick``: fewer shapes and rounds, for a first look (about a minute).
QUICK_RUNS, QUICK_WARMUP = 5, 1
#: Default: the median of 30 rounds after 3 warm-up rounds (about 5 minutes on 2 cores).
FULL_RUNS, FULL_WARMUP = 30, 3


@app.command("bench")
def bench_command(
    quick: bool = typer.Option(
        False, "--quick", help=f"Two shapes, {QUICK_WARMUP} warm-up + {QUICK_RUNS} rounds (default: the 7 shapes of BENCHMARKS.md, {FULL_RUNS} rounds)."
    ),
    shape: Optional[List[str]] = typer.Option(
        None, "--shape", help="Layer to time instead of the default set, repeatable: N,C,H[,og=G][,stride=S][,mask=0]."
    ),
    contender: Optional[List[str]] = typer.Option(
        None, "--contender", "-c",
        help="Only these contenders, repeatable: torch, ort-native, ort-grid_sample, ort-gather, ort-old, "
        "ov-extension, ov-lowered (default: all).",
    ),
    runs: Optional[int] = typer.Option(None, "--runs", min=1, help=f"Timed rounds (median over them). Default {FULL_RUNS}."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help=f"Untimed rounds first. Default {FULL_WARMUP}."),
    threads: int = typer.Option(2, "--threads", min=1, help="Intra-op threads of every runtime."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Measure peak memory of one inference (a fresh process per model)."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o",
        help="Also write the tables as markdown; an existing file keeps its text outside the generated block.",
    ),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Keep the exported models in this folder (default: temporary)."),
) -> None:
    """Time torchvision, ONNX Runtime (native DeformConv, grid_sample, gather, the old pip exporter) and OpenVINO.

    All contenders run in one process, interleaved round-robin; the table
    shows the median ms per call and the ratio to ONNX Runtime's native
    DeformConv kernel. Contenders that cannot run here show n/a.
    """
    from .. import bench

    with user_errors(ValueError):
        if shape:
            shapes = [bench.BenchShape.parse(s) for s in shape]
        else:
            shapes = list(bench.QUICK_SHAPES if quick else bench.FULL_SHAPES)
        contenders = bench.select_contenders(contender)
        if output is not None and not output.parent.is_dir():
            raise UserError(f"output folder {output.parent} does not exist; create it first")
    result = bench.run_benchmark(
        shapes,
        contenders,
        runs=runs if runs is not None else (QUICK_RUNS if quick else FULL_RUNS),
        warmup=warmup if warmup is not None else (QUICK_WARMUP if quick else FULL_WARMUP),
        threads=threads,
        memory=memory,
        workdir=workdir,
        log=lambda msg: err_console.print(f"[dim]{msg}[/]", highlight=False),
    )
    args = ["--quick"] if quick else []
    args += [a for s in shape or [] for a in ("--shape", s)]
    args += [a for c in contender or [] for a in ("--contender", c)]
    args += [] if runs is None else ["--runs", str(runs)]
    args += [] if warmup is None else ["--warmup", str(warmup)]
    args += [] if threads == 2 else ["--threads", str(threads)]
    args += [] if memory else ["--no-memory"]
    args += [] if output is None else ["--output", str(output)]
    result.command = " ".join(["deform-onnx", "bench", *(shlex.quote(a) for a in args)])
    for table in bench.rich_tables(result):
        console.print(table)
    for line in bench.notes(result):
        console.print(f"note: {line}", highlight=False, soft_wrap=True)
    if output is not None:
        bench.write_markdown(result, output)
        err_console.print(f"wrote {output}")
