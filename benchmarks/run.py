"""Reproduce BENCHMARKS.md: ``python benchmarks/run.py`` (same as ``deform-onnx bench --output BENCHMARKS.md``).

Every argument is passed to ``deform-onnx bench`` (see ``--help``); without
``--output`` the tables go to BENCHMARKS.md at the repository root, replacing
only the generated block between its markers. The harness lives in
``deform_onnx.bench`` so that this script and the CLI measure the same way.

The "old exporter" row needs the benchmark-only package
``pip install deform-conv2d-onnx-exporter==1.2.0`` (never a dependency of
deform-onnx); without it that row shows n/a.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deform_onnx.cli import app

if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)  # the repository root: paths below are relative to it
    args = sys.argv[1:]
    if "--output" not in args and "-o" not in args:
        args += ["--output", "BENCHMARKS.md"]
    app(["bench", *args])
