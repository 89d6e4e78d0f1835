"""``deform-onnx bench``: time an op's contenders side by side (the harness of :mod:`deform_onnx.bench`)."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from ._app import app
from ._common import UserError, console, err_console, user_errors

#: ``--op`` names (spelled here so that parsing imports no heavy package; a test keeps them the harness's).
OPS = ("deform_conv", "grid_sample", "msda", "grid_sample_5d", "grid_sample_bicubic")
#: ``--ort-opt-level`` names (likewise: ``deform_onnx.bench.ORT_OPT_LEVELS``).
ORT_OPT_LEVELS = ("disabled", "basic", "extended", "layout", "all")
#: ``--quick``: fewer shapes and rounds, for a first look (about a minute).
QUICK_RUNS, QUICK_WARMUP = 5, 1
#: Default: the median of 30 rounds after 3 warm-up rounds (about 5 minutes on 2 cores).
FULL_RUNS, FULL_WARMUP = 30, 3


@app.command("bench")
def bench_command(
    op: str = typer.Option(
        "deform_conv",
        "--op",
        help="What to time: deform_conv (torchvision deform_conv2d), grid_sample (F.grid_sample bilinear zeros), "
        "msda (multi-scale deformable attention, a Deformable-DETR encoder layer), grid_sample_5d (5-D trilinear: "
        "GridSample-20 vs the gather form), grid_sample_bicubic (GridSample cubic vs the 16-tap gather form).",
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help=f"The op's small shape set, {QUICK_WARMUP} warm-up + {QUICK_RUNS} rounds (default: its BENCHMARKS.md shapes, {FULL_RUNS} rounds).",
    ),
    shape: list[str] | None = typer.Option(
        None,
        "--shape",
        help="Shape to time instead of the default set, repeatable. deform_conv: N,C,H[,og=G][,stride=S][,mask=0]; "
        "grid_sample: N,C,H[,grid=G]; msda: Q|all[,levels=HxW/HxW/...][,heads=M][,points=P][,channels=C].",
    ),
    contender: list[str] | None = typer.Option(
        None,
        "--contender",
        "-c",
        help="Only these contenders, repeatable (default: all of the op's). deform_conv: torch, ort-native, "
        "ort-grid_sample, ort-gather, ort-old, ort-dense, ov-extension, ov-lowered; grid_sample: torch, "
        "ort-grid_sample, ort-gather; msda: torch, ort-plain-grid_sample, ort-plain-gather, ort-fused. "
        "An ONNX Runtime one may carry a level: ort-gather@basic.",
    ),
    ort_opt_level: list[str] | None = typer.Option(
        None,
        "--ort-opt-level",
        help="Also time every selected ONNX Runtime contender at this graph optimisation level, as KEY@LEVEL "
        f"rows, repeatable: {', '.join(ORT_OPT_LEVELS)} (plain rows use ORT's default, all).",
    ),
    runs: int | None = typer.Option(
        None, "--runs", min=1, help=f"Timed rounds (median over them). Default {FULL_RUNS}."
    ),
    warmup: int | None = typer.Option(None, "--warmup", min=0, help=f"Untimed rounds first. Default {FULL_WARMUP}."),
    threads: int = typer.Option(2, "--threads", min=1, help="Intra-op threads of every runtime."),
    memory: bool = typer.Option(
        True, "--memory/--no-memory", help="Measure peak memory of one inference (a fresh process per model)."
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Also write the tables as markdown; an existing file keeps its text outside the generated block.",
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Keep the exported models in this folder (default: temporary)."
    ),
) -> None:
    """Time an op side by side: PyTorch, ONNX Runtime (native or plain graphs and this project's lowerings), OpenVINO.

    All contenders run in one process, interleaved round-robin; the table
    shows the median ms per call and the ratio to the op's reference
    (deform_conv: ONNX Runtime's native DeformConv, and also to a dense Conv
    of the same shape, the limit; grid_sample: ORT's GridSample; msda: the
    plain export's GridSample graph). Contenders that cannot run here show n/a.
    """
    with user_errors(ValueError):
        if op not in OPS:
            raise ValueError(f"unknown --op {op!r}; choose from {', '.join(OPS)}")
        bad = [level for level in ort_opt_level or [] if level not in ORT_OPT_LEVELS]
        if bad:
            raise ValueError(f"unknown --ort-opt-level {', '.join(bad)}; choose from {', '.join(ORT_OPT_LEVELS)}")
        from .. import bench

        suite = bench.suite(op)
        if shape:
            shapes = [suite.parse_shape(s) for s in shape]
        else:
            shapes = list(suite.quick_shapes if quick else suite.full_shapes)
        contenders = suite.select(contender, ort_opt_level or ())
        if output is not None and not output.parent.is_dir():
            raise UserError(f"output folder {output.parent} does not exist; create it first")
    result = bench.run_suite(
        suite,
        shapes,
        contenders,
        runs=runs if runs is not None else (QUICK_RUNS if quick else FULL_RUNS),
        warmup=warmup if warmup is not None else (QUICK_WARMUP if quick else FULL_WARMUP),
        threads=threads,
        memory=memory,
        workdir=workdir,
        log=lambda msg: err_console.print(f"[dim]{msg}[/]", highlight=False),
    )
    args = [] if op == "deform_conv" else ["--op", op]
    args += ["--quick"] if quick else []
    args += [a for s in shape or [] for a in ("--shape", s)]
    args += [a for c in contender or [] for a in ("--contender", c)]
    args += [a for level in ort_opt_level or [] for a in ("--ort-opt-level", level)]
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
