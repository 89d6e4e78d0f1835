"""Input specifications of the CLI: ``--input-shape [NAME=]D1,D2,...[:DTYPE]``, ``--dtype``, ``--inputs file.npz``.

Parsing needs no numpy or torch (argument errors answer at once); the arrays
are made by the commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..ops.registry import METHODS  # a light module: an argument error answers without numpy
from ._common import UserError


def check_method(method: str) -> None:
    """Raises :class:`UserError` for a name that is not one of :data:`METHODS`."""
    if method not in METHODS:
        raise UserError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


#: Floating dtypes the CLI feeds and exports (torch and numpy share these names).
DTYPES = ("float32", "float16", "float64")
#: Accepted spellings -> canonical name.
DTYPE_ALIASES = {
    "float32": "float32",
    "f32": "float32",
    "float": "float32",
    "float16": "float16",
    "f16": "float16",
    "half": "float16",
    "float64": "float64",
    "f64": "float64",
    "double": "float64",
}


def parse_dtype(text: str, where: str = "--dtype") -> str:
    """``"f16"`` -> ``"float16"``.

    Raises:
        UserError: not one of :data:`DTYPES` (or an alias).
    """
    dtype = DTYPE_ALIASES.get(text.strip().lower())
    if dtype is None:
        raise UserError(f"{where} {text!r}: choose one of {', '.join(DTYPES)}")
    return dtype


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``"1,3,224,224"`` (``x`` also separates: ``1x3x224x224``) into positive ints.

    Raises:
        UserError: empty, non-integer or non-positive dimensions.
    """
    parts = [p.strip() for p in text.replace("x", ",").replace("X", ",").split(",")]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UserError(f"bad input shape {text!r}: give comma-separated positive integers, e.g. 1,3,224,224") from None
    if not shape or any(d <= 0 for d in shape):
        raise UserError(f"bad input shape {text!r}: every dimension must be a positive integer, e.g. 1,3,224,224")
    return shape


@dataclass(frozen=True)
class InputSpec:
    """One ``--input-shape``: an optional input name, the shape, an optional dtype."""

    name: str | None
    shape: tuple[int, ...]
    dtype: str | None = None

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        """``"x=1,3,64,64:float16"``, ``"1,3,64,64"``, ``"1x3x64x64:f64"``.

        Raises:
            UserError: a bad shape or dtype (the message quotes the option).
        """
        given, sep, rest = text.partition("=")
        name: str | None = given
        if not sep:
            name, rest = None, text
        elif not given.strip():
            raise UserError(f"bad --input-shape {text!r}: give NAME=D1,D2,..., e.g. x=1,3,64,64")
        dims, colon, dtype = rest.partition(":")
        where = f"--input-shape {text!r}:"
        return cls(
            name.strip() if name else None,
            parse_shape(dims),
            parse_dtype(dtype, where) if colon else None,
        )

    def __str__(self) -> str:
        text = ",".join(map(str, self.shape))
        return (f"{self.name}=" if self.name else "") + text + (f":{self.dtype}" if self.dtype else "")


def parse_specs(texts: list[str]) -> list[InputSpec]:
    """Every ``--input-shape``; several must each be named, and names must differ.

    Raises:
        UserError: a bad spec, unnamed specs among several, a repeated name.
    """
    specs = [InputSpec.parse(t) for t in texts]
    if len(specs) > 1 and any(s.name is None for s in specs):
        raise UserError("several --input-shape options need a name each: --input-shape x=1,3,64,64 --input-shape y=...")
    names = [s.name for s in specs if s.name]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserError(f"--input-shape names {', '.join(repeated)} more than once")
    return specs


def load_npz(path: Path) -> dict:
    """The arrays of an ``.npz`` file by name, in the file's order.

    Raises:
        UserError: a missing file or one numpy cannot read as ``.npz``.
    """
    import numpy as np

    if path.is_dir():
        raise UserError(f"--inputs {path}: is a directory, not an .npz file")
    if not path.is_file():
        raise UserError(f"--inputs {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise UserError(f"--inputs {path}: a single .npy array; save named arrays with numpy.savez")
            return {k: data[k] for k in data.files}
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError, OSError, zipfile errors
        raise UserError(f"--inputs {path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
