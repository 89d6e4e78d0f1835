"""Command-line interface: ``deform-onnx export | lower | check | bench``.

One module per command; each registers itself on :data:`app`.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="deform-onnx",
    help="Export, lower, check and benchmark deformable convolution in ONNX.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules register themselves on `app` when imported.
from . import commands  # noqa: E402,F401


def main() -> None:
    """Entry point of the ``deform-onnx`` console script."""
    app()
