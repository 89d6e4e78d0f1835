"""Helpers shared by the CLI commands: consoles, user errors, input shapes, model factories.

User errors (a bad argument, a model that cannot be loaded) end the command
with a one-line message on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

#: Exit code of a user error (as click uses for usage errors).
USER_ERROR = 2
#: Exit code when the command ran but a check failed (e.g. an error above tolerance).
CHECK_FAILED = 1


def _width(stream) -> int | None:
    """Terminal width on a terminal; else ``$COLUMNS`` or 120 (rich's 80 would cut the tables in logs)."""
    if stream.isatty():
        return None
    return int(os.environ.get("COLUMNS", "0")) or 120


#: Tables and results.
console = Console(width=_width(sys.stdout))
#: Progress, notes and errors (keeps stdout clean for the results).
err_console = Console(stderr=True, width=_width(sys.stderr))


def refresh_widths() -> None:
    """Read the width again for this invocation (``$COLUMNS`` may differ from the one at import, e.g. in tests)."""
    console.width = _width(sys.stdout)  # type: ignore[assignment]  # None: rich's own choice
    err_console.width = _width(sys.stderr)  # type: ignore[assignment]


class UserError(Exception):
    """A problem with the command's arguments or inputs; the message names the problem and the fix."""


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (first line only) on stderr and exit with code 2."""
    from rich.markup import escape

    first = one_line(message) or "unknown error"
    # escape: a message may hold brackets that are not markup (pip's extras: 'deform-onnx[example]').
    err_console.print(f"[bold red]error:[/] {escape(first)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(USER_ERROR)


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Turn :class:`UserError` (and any of ``types``) raised inside the block into :func:`fail`."""
    caught: tuple[type[BaseException], ...] = (UserError, *types)
    try:
        yield
    except caught as exc:
        fail(str(exc))


def check_output_folder(folder: Path, option: str = "-o") -> None:
    """An existing folder this process can write in (probed by creating a temporary file in it).

    Raises:
        UserError: missing, a file, or not writable (the message names the folder and the fix).
    """
    import tempfile

    if folder.exists() and not folder.is_dir():
        raise UserError(f"{option}: {folder} is a file, not a folder; give a folder or a path inside one")
    if not folder.is_dir():
        raise UserError(f"{option}: output folder {folder} does not exist; create it first")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UserError(f"{option}: cannot write to the output folder {folder}: {exc.strerror or exc}") from None


def make_output_folder(folder: Path, option: str = "-o") -> None:
    """Create ``folder`` (and parents) if missing, then :func:`check_output_folder`.

    Raises:
        UserError: a path component is a file, or the folder cannot be created or written.
    """
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{option}: cannot create the output folder {folder}: {parent} is a file")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{option}: cannot create the output folder {folder}: {exc.strerror or exc}") from None
    check_output_folder(folder, option)


def load_factory(spec: str):
    """Import ``MODULE:FACTORY`` and return the factory (a callable returning an ``nn.Module``).

    ``MODULE`` is a dotted module name importable from the current folder (it is
    put on ``sys.path``) or a path to a ``.py`` file.

    Raises:
        UserError: malformed spec, import failure, missing or non-callable attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"bad model {spec!r}: give MODULE:FACTORY, e.g. mypackage.models:build_model")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise UserError(f"cannot import {module_name!r}: no such file")
            spec_obj = importlib.util.spec_from_file_location(path.stem, path)
            if spec_obj is None or spec_obj.loader is None:
                raise UserError(f"cannot import {module_name!r}: not a Python source file")
            module = importlib.util.module_from_spec(spec_obj)
            spec_obj.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - any error while importing user code is the user's
        raise UserError(f"cannot import {module_name!r}: {type(exc).__name__}: {one_line(exc)}") from None
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise UserError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise UserError(f"{spec!r} is not callable: FACTORY must be a function or class returning an nn.Module")
    return factory


def one_line(exc: BaseException | str) -> str:
    """The first line of an exception's (or warning's) message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
