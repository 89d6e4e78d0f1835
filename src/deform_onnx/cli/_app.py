"""The typer app every command module registers itself on (kept apart from ``cli/__init__`` so that
the command modules import it without an import circle).
"""

from __future__ import annotations

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
    version: bool | None = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Export, lower, check and benchmark deformable convolution in ONNX."""
    from ._common import refresh_widths

    refresh_widths()
