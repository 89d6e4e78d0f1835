"""Command-line interface: ``deform-onnx export | lower | check | bench``.

One module per command; each registers itself on :data:`app`. Command modules
import torch, onnx and the runtimes inside the command functions only, so
``--help``, ``--version`` and argument errors answer without loading them
(tests/test_cli_startup.py counts the modules imported).
"""

from __future__ import annotations

from typing import Optional

import typer
from typer.core import TyperGroup


def _plain_switches(params: list) -> list:
    """Show boolean flags as plain switches in ``--help`` (typer 0.29's rich help prints ``<bool>``)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class _Group(TyperGroup):
    """The app's group: plain switches in its own help and in every subcommand's."""

    def get_params(self, ctx):
        return _plain_switches(super().get_params(ctx))

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_switches(command.get_params(ctx))
        return command


app = typer.Typer(
    name="deform-onnx",
    help="Export, lower, check and benchmark deformable convolution in ONNX.",
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"deform-onnx {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Export, lower, check and benchmark deformable convolution in ONNX."""


# Command modules register themselves on `app` when imported.
from . import commands  # noqa: E402,F401


def main() -> None:
    """Entry point of the ``deform-onnx`` console script."""
    app()
