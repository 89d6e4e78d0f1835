"""Atomic file output: a written file is complete or absent."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path


def file_mode() -> int:
    """The mode ``open()`` gives a new file here: ``0o666`` less the process umask (``0o644`` under umask 022).

    Every file deform-onnx writes for the user gets it, not the ``0o600`` of ``mkstemp`` or of the
    writers that save through a temporary file.
    """
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    The temporary file lives in the same folder (so the rename is atomic) and
    gets the permissions a normal ``open()`` would (``0o666`` less the umask),
    not ``mkstemp``'s ``0o600``. On any error it is removed and ``path`` is
    left as it was.

    Raises:
        FileNotFoundError: the folder of ``path`` does not exist.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"output folder {path.parent} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, file_mode())
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``Path(path)``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def commit_copies(pairs: Sequence[tuple[str | os.PathLike, str | os.PathLike]]) -> list[Path]:
    """Copy each ``(source, destination)`` to a temporary name beside its destination, then rename each into place.

    The renames run in the order given (put a file that names another after it: an IR's ``.bin`` before its
    ``.xml``). Every destination gets :func:`file_mode`, whatever the source's mode. Nothing is renamed until
    every copy is complete; on an error the temporary files are removed. Returns the destinations.

    Raises:
        FileNotFoundError: a destination's folder does not exist (before anything is copied).
    """
    staged: list[tuple[Path, Path]] = []
    for _, dst in pairs:
        if not Path(dst).parent.is_dir():
            raise FileNotFoundError(f"output folder {Path(dst).parent} does not exist; create it first")
    mode = file_mode()
    try:
        for src, dst in pairs:
            dst = Path(dst)
            fd, name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
            os.close(fd)
            staged.append((Path(name), dst))
            shutil.copyfile(src, name)
            os.chmod(name, mode)
        for tmp, dst in staged:
            os.replace(tmp, dst)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return [dst for _, dst in staged]


def check_output_path(path: str | os.PathLike, name: str = "output") -> None:
    """Refuse, before any work, an output ``path`` that :func:`atomic_path` could not write.

    The folder of ``path`` must exist, be a folder and take a new file: probed with
    ``os.access`` (which also sees a read-only mount) and by creating and removing a
    temporary file there (ACLs, quotas; running as root, a mode of 0o555 does not stop
    writes, and then the write would succeed too). ``path`` itself must not be a folder.
    ``name`` starts each message (the parameter or option the caller took ``path`` from).

    Raises:
        FileNotFoundError: the folder does not exist.
        NotADirectoryError: the folder is a file, or ``path`` itself is a folder.
        PermissionError: no new file can be made in the folder.
    """
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise NotADirectoryError(f"{name} {path} is a folder; give a file path inside it")
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{name} {path}: {folder} is a file, not a folder")
    if not folder.is_dir():
        raise FileNotFoundError(f"{name} {path}: folder {folder} does not exist; create it first")
    problem = _unwritable(folder)
    if problem is not None:
        raise PermissionError(f"{name} {path}: cannot write in the folder {folder} ({problem}); choose another folder")


def _unwritable(folder: Path) -> str | None:
    """Why no new file can be made in ``folder`` (``None``: one can), by ``os.access`` and a temporary file."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "permission denied"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_folder(folder: str | os.PathLike, name: str) -> None:
    """Refuse, before any work, a ``folder`` to write files into (``keep_artifacts``) that is missing, a file,
    or takes no new file (probed as :func:`check_output_path` probes). ``name`` starts each message.

    Raises:
        FileNotFoundError: the folder does not exist.
        NotADirectoryError: it is a file.
        PermissionError: no new file can be made in it.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{name} {folder} is a file, not a folder")
    if not folder.is_dir():
        raise FileNotFoundError(f"{name} {folder}: no such folder; create it first")
    problem = _unwritable(folder)
    if problem is not None:
        raise PermissionError(f"{name} {folder}: cannot write in the folder ({problem}); choose another folder")
