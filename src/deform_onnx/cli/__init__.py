"""Command-line interface: ``deform-onnx export | lower | check | bench``.

One module per command; each registers itself on :data:`app`. Command modules
import torch, onnx and the runtimes inside the command functions only, so
``--help``, ``--version`` and argument errors answer without loading them
(tests/test_cli_startup.py counts the modules imported).
"""

from __future__ import annotations

# Command modules register themselves on `app` when imported.
from . import commands  # noqa: F401
from ._app import app


def main() -> None:
    """Entry point of the ``deform-onnx`` console script."""
    app()
