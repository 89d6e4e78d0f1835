"""Multi-scale deformable attention side by side: ``deform-onnx bench --op msda`` writing its BENCHMARKS.md section.

    python benchmarks/msda.py            # writes its section of BENCHMARKS.md
    python benchmarks/msda.py --quick    # levels 24x24..3x3, prints only

A Deformable-DETR-sized encoder layer's attention core (4 levels, 100x100 to
13x13, 8 heads, 4 points, 256 channels, batch 1; 1 query, 900 queries and
every pixel as a query): the plain export (one GridSample per level), the
plain export with ``method="gather"``, the fused ``deform_onnx.ops.ms_deform_attn``
export, and PyTorch eager, interleaved in one run. The contenders and the
measuring are those of ``deform-onnx bench --op msda`` (``deform_onnx.bench.sampling``);
every other argument is passed to it (``--threads``, ``--runs``, ``--shape``,
``--no-memory``, ``--ort-opt-level``, ...). Defaults here: 15 rounds after 2
warm-up rounds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deform_onnx.cli import app

RUNS, WARMUP = "15", "2"


def main(argv: list[str]) -> None:
    args = list(argv)
    if "--runs" not in args and "--quick" not in args:
        args += ["--runs", RUNS]
    if "--warmup" not in args and "--quick" not in args:
        args += ["--warmup", WARMUP]
    if "--output" not in args and "-o" not in args and "--quick" not in args:
        args += ["--output", "BENCHMARKS.md"]
    app(["bench", "--op", "msda", *args])


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)  # the repository root: paths below are relative to it
    main(sys.argv[1:])
