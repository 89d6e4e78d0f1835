"""Output formats of :func:`deform_onnx.export`, chosen by the path's suffix (or ``format=``).

A :class:`Format` names what writes it: ``onnx`` is the export path itself; every other
format is a writer module (imported only when used) with ``write(model, args, path, **export_kwargs)
-> ExportReport``, which proves its artifact in the runtime that runs it before writing it, or
says in the report that it could not (Core ML on Linux). Its optional dependencies are an extra of
the package; a missing one is a one-line error naming the extra before any work (:func:`require`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FORMATS", "Format", "format_for", "register_format", "require", "unregister_format"]


@dataclass(frozen=True)
class Format:
    """One output format.

    Attributes:
        name: the format's name (``format=`` takes it).
        suffixes: the path suffixes that select it, lower case with the dot (``".pte"``).
        title: how messages and reports name it (``"ExecuTorch"``).
        writer: ``"module:function"`` of its writer, ``None`` for ONNX (the export path itself).
        extra: the package extra that installs what it needs (``pip install 'deform-onnx[extra]'``).
        modules: the modules that extra provides, looked up (not imported) by :func:`require`.
    """

    name: str
    suffixes: tuple[str, ...]
    title: str
    writer: str | None = None
    extra: str | None = None
    modules: tuple[str, ...] = ()

    def load_writer(self) -> Callable[..., Any]:
        """The writer function (imports its module)."""
        if self.writer is None:
            raise ValueError(f"format {self.name!r} has no writer: it is the ONNX export path")
        module, _, function = self.writer.partition(":")
        return getattr(importlib.import_module(module), function)


FORMATS: dict[str, Format] = {}


def register_format(fmt: Format) -> Format:
    """Add ``fmt`` to :data:`FORMATS`; a second format of the same name or suffix raises ``ValueError``."""
    taken = {s: f.name for f in FORMATS.values() for s in f.suffixes}
    clash = [s for s in fmt.suffixes if s in taken]
    if fmt.name in FORMATS or clash:
        raise ValueError(f"format {fmt.name!r}: the name or suffix {clash or fmt.name} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    """Remove a format added with :func:`register_format` (tests)."""
    FORMATS.pop(name, None)


def _suffix_of(path: Any) -> str | None:
    """The lower-case suffix of a path (``".mlpackage"`` of a folder path too); ``None`` for a file object."""
    if isinstance(path, str | os.PathLike):
        name = os.fspath(path).rstrip("/\\")
        base = os.path.basename(name)
        return os.path.splitext(base)[1].lower() if "." in base else ""
    return None


def format_for(path: Any, format: str | None = None) -> Format:
    """The format ``export`` writes to ``path``: ``format`` when given, else the path's suffix.

    Args:
        path: the output path (``str`` or ``os.PathLike``), or a binary file object (then ONNX unless
            ``format`` names another).
        format: a name of :data:`FORMATS`, overriding the suffix.

    Returns:
        The :class:`Format`.

    Raises:
        ValueError: an unknown ``format``, or a suffix no format has (one line listing the suffixes).
    """
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}: use one of {', '.join(FORMATS)}")
        return FORMATS[format]
    suffix = _suffix_of(path)
    if suffix is None:
        return FORMATS["onnx"]
    for fmt in FORMATS.values():
        if suffix in fmt.suffixes:
            return fmt
    known = ", ".join(f"{s} ({f.title})" for f in FORMATS.values() for s in f.suffixes)
    shown = f"suffix {suffix!r}" if suffix else "no suffix"
    raise ValueError(f"{os.fspath(path)!r} has {shown}: name the file with one of {known}, or pass format=")


def require(fmt: Format) -> None:
    """Raise a one-line ``ModuleNotFoundError`` naming the extra when ``fmt``'s dependencies are missing.

    Modules are looked up with ``importlib.util.find_spec``, not imported (some take seconds).
    """
    missing = [m for m in fmt.modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"writing {fmt.title} files needs {', '.join(missing)}: pip install 'deform-onnx[{fmt.extra}]'",
            name=missing[0],
        )


register_format(Format("onnx", (".onnx",), "ONNX"))
register_format(
    Format(
        "openvino",
        (".xml",),
        "OpenVINO IR",
        writer="deform_onnx.formats.openvino_ir:write",
        extra="openvino",
        modules=("openvino",),
    )
)
register_format(
    Format(
        "executorch",
        (".pte",),
        "ExecuTorch",
        writer="deform_onnx.formats.executorch:write",
        extra="executorch",
        modules=("executorch",),
    )
)
register_format(
    Format(
        "litert",
        (".tflite",),
        "LiteRT (litert-torch)",
        writer="deform_onnx.formats.litert:write",
        extra="litert",
        modules=("litert_torch", "ai_edge_litert"),
    )
)
register_format(
    Format(
        "coreml",
        (".mlpackage",),
        "Core ML",
        writer="deform_onnx.formats.coreml:write",
        extra="coreml",
        modules=("coremltools",),
    )
)
