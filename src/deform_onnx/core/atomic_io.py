"""Atomic file output: a written file is complete or absent."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


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
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
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
    problem = None if os.access(folder, os.W_OK | os.X_OK) else "permission denied"
    if problem is None:
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            problem = exc.strerror or str(exc)
    if problem is not None:
        raise PermissionError(f"{name} {path}: cannot write in the folder {folder} ({problem}); choose another folder")
