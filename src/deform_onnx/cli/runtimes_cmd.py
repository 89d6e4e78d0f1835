"""``deform-onnx runtimes list | install | remove``: the cached runtime venvs of ``check --runtime``.

Each deployed runtime (MNN, ncnn, TFLite/LiteRT, TVM, onnx2torch) runs in a venv of its own under
``$DEFORM_ONNX_VENVS`` (default ``~/.cache/deform-onnx/venvs``), created on first use; these commands
show them, create them ahead of time (a CI image) and remove them, under the same per-venv lock as
first use (:mod:`deform_onnx.runtimes.venvs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from ._app import _Group, app
from ._common import console, err_console, fail

if TYPE_CHECKING:
    from ..runtimes.deployed import Family

runtimes_app = typer.Typer(
    name="runtimes",
    help="List, install ahead of time, or remove the cached runtime venvs of check --runtime.",
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(runtimes_app)

NAMES_HELP = "Runtimes (mnn, ncnn, tflite, tvm, onnx2torch, or another cached venv's folder name)."


def _size(n: int) -> str:
    """Bytes as ``154 MB`` / ``2.6 GB``."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _others() -> list[str]:
    """Folders in the cache that no family owns (e.g. scripts' old ONNX Runtime builds), sorted."""
    from ..runtimes.deployed import FAMILIES
    from ..runtimes.venvs import venv_root

    owned = {f.venv for f in FAMILIES.values()}
    root = venv_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in owned) if root.is_dir() else []  # fmt: skip


def _pick(names: list[str], every: bool, verb: str) -> list[tuple[str, Family | None]]:
    """``(name, family or None)`` for each name (a family, alias or other cached folder); one-line errors."""
    from ..runtimes.deployed import FAMILIES, family
    from ..runtimes.deployed import names as all_names

    if every and names:
        fail(f"runtimes {verb}: give runtime names or --all, not both")
    if every:
        return [(f.name, f) for f in FAMILIES.values() if f.venv is not None] + (
            [(o, None) for o in _others()] if verb == "remove" else []
        )
    if not names:
        fail(f"runtimes {verb}: name the runtimes ({', '.join(all_names())}) or give --all")
    others = _others()
    picked: list[tuple[str, Family | None]] = []
    for name in names:
        if verb == "remove" and name in others:
            picked.append((name, None))
            continue
        try:
            fam = family(name)
        except ValueError as exc:
            fail(f"{exc}{'; or a cached venv: ' + ', '.join(others) if verb == 'remove' and others else ''}")
        if fam.venv is None:
            extra = fam.modules[0][1] if fam.modules else fam.name
            fail(f"{fam.name} runs in this interpreter, not a cached venv: pip install 'deform-onnx[{extra}]'")
        picked.append((fam.name, fam))
    return list(dict.fromkeys(picked))


@runtimes_app.command("list")
def list_command() -> None:
    """Print every runtime: installed or not, the versions installed, size on disk, and where."""
    import importlib.util
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from ..runtimes.deployed import FAMILIES
    from ..runtimes.venvs import venv_info, venv_root

    table = Table(title=f"deform-onnx runtimes (cached venvs in {venv_root()})")
    for column in ("runtime", "state", "versions", "size", "path"):
        table.add_column(column, overflow="fold", justify="right" if column == "size" else "left")
    for fam in FAMILIES.values():
        if fam.venv is None:
            mods = [m for m, _ in fam.modules]
            here = all(importlib.util.find_spec(m) is not None for m in mods)
            try:
                versions = ", ".join(f"{m} {version(m)}" for m in mods) if here else ""
            except PackageNotFoundError:
                versions = ""
            state = "this interpreter" if here else f"missing: pip install 'deform-onnx[{fam.modules[0][1]}]'"
            table.add_row(fam.name, state, versions or "-", "-", escape(sys.executable))
            continue
        info = venv_info(fam.venv, fam.requirements, fam.options, fam.inherit)
        versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
        table.add_row(fam.name, info.state, versions or "-", _size(info.size) if info.size else "-",
                      escape(str(info.path)))  # fmt: skip
    for name in _others():
        info = venv_info(name)
        table.add_row(f"{name} (other)", info.state, f"{len(info.versions)} packages", _size(info.size),
                      escape(str(info.path)))  # fmt: skip
    console.print(table)


@runtimes_app.command("install")
def install_command(
    names: list[str] = typer.Argument(None, help=NAMES_HELP, show_default=False),
    every: bool = typer.Option(False, "--all", help="Every runtime that runs in a cached venv."),
    stall: float = typer.Option(300, "--stall", help="Seconds a pip step may go without output or transfer."),
) -> None:
    """Create the runtimes' venvs now (e.g. in a CI image), as their first use would; exit code 1 if one fails.

    Each venv is created once, under its lock: a second install or check waits for it.
    """
    from ..runtimes.deployed import interpreter

    picked = _pick(names or [], every, "install")
    failed = False
    for name, fam in picked:
        assert fam is not None  # install picks families only
        with err_console.status(f"{name}", spinner="dots") as status:

            def log(line: str, name: str = name) -> None:
                if line.startswith(("creating the ", "waiting for ")):
                    err_console.print(f"deform-onnx: {escape(line)}", highlight=False, soft_wrap=True)
                status.update(escape(f"{name}: {line[:120]}"))

            try:
                python = interpreter(fam, stall, log)
            except RuntimeError as exc:
                err_console.print(f"[bold red]error:[/] {name}: {escape(str(exc).splitlines()[0])}", soft_wrap=True)
                failed = True
                continue
        console.print(f"{name}: installed ({escape(str(python.parent.parent))})", highlight=False)
    if failed:
        raise typer.Exit(1)


@runtimes_app.command("remove")
def remove_command(
    names: list[str] = typer.Argument(None, help=NAMES_HELP, show_default=False),
    every: bool = typer.Option(False, "--all", help="Every cached runtime venv."),
) -> None:
    """Remove the runtimes' cached venvs (waiting for a process creating one); they are rebuilt on next use."""
    from ..runtimes.venvs import remove_venv

    for name, fam in _pick(names or [], every, "remove"):
        folder = (fam.venv if fam is not None else None) or name

        def log(line: str) -> None:
            err_console.print(f"deform-onnx: {escape(line)}", highlight=False, soft_wrap=True)

        console.print(f"{name}: {'removed' if remove_venv(folder, log) else 'not installed'}", highlight=False)
