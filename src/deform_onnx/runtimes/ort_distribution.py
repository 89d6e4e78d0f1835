"""Which ONNX Runtime distribution provides the ``onnxruntime`` module, without importing it.

ONNX Runtime ships as several pip distributions that all install the same
``onnxruntime`` module (``onnxruntime``, ``onnxruntime-gpu``,
``onnxruntime-openvino``, ``onnxruntime-directml``, ...); two of them in one
environment overwrite each other's files. deform-onnx depends on none of them
(the ``deform-onnx[onnxruntime]`` extra installs the CPU one) and works with
whichever is installed: it verifies on the CPU execution provider, which every
distribution has. The distribution is read from ``importlib.metadata``
(``packages_distributions()``: the distributions whose files include the module).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

__all__ = ["MISSING", "OrtDistribution", "describe", "find", "require"]

#: The one-line error when no distribution provides the module; names the extra and the alternatives.
MISSING = (
    "ONNX Runtime is not installed (deform-onnx checks every file in it): "
    "pip install 'deform-onnx[onnxruntime]', or install onnxruntime-gpu, onnxruntime-openvino or "
    "onnxruntime-directml"
)


@dataclass(frozen=True)
class OrtDistribution:
    """The installed distribution(s) of the ``onnxruntime`` module.

    Attributes:
        names: distribution names, e.g. ``("onnxruntime-gpu",)``; more than one means
            they overwrote each other's files (the module is whichever was installed last).
        version: the first one's version.
    """

    names: tuple[str, ...]
    version: str

    def __str__(self) -> str:
        text = f"{self.names[0]} {self.version}"
        if len(self.names) > 1:
            text += f" (also installed: {', '.join(self.names[1:])}, which share its onnxruntime module)"
        return text


def find(path: list[str] | None = None) -> OrtDistribution | None:
    """The distribution(s) that install the ``onnxruntime`` module, or ``None``.

    Args:
        path: folders to search (``sys.path`` when ``None``; tests pass a folder of fake metadata).
    """
    names: list[str] = []
    if path is None:
        import importlib.util

        if importlib.util.find_spec("onnxruntime") is None:  # no module: nothing to scan
            return None
        dists = [d for d in map(_installed, KNOWN) if d is not None] or list(metadata.distributions())
    else:
        dists = list(metadata.distributions(path=path))
    for dist in dists:
        if _provides_module(dist, "onnxruntime"):
            name = dist.metadata["Name"] or ""
            if name and name not in names:
                names.append(name)
    if not names:
        return None
    names.sort(key=lambda n: (n.lower().replace("_", "-") != "onnxruntime", n.lower()))
    version = metadata.distribution(names[0]).version if path is None else _version(names[0], path)
    return OrtDistribution(tuple(names), version)


#: Distributions known to install the ``onnxruntime`` module (looked up by name first: scanning
#: every installed distribution takes most of a second); any other is found by the full scan.
KNOWN = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "onnxruntime-qnn",
    "onnxruntime-training",
    "onnxruntime-rocm",
    "onnxruntime-migraphx",
    "onnxruntime-cann",
    "ort-nightly",
    "ort-nightly-gpu",
)


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _version(name: str, path: list[str]) -> str:
    for dist in metadata.distributions(path=path):
        if dist.metadata["Name"] == name:
            return dist.version
    return "?"


def _provides_module(dist: metadata.Distribution, module: str) -> bool:
    """Whether ``dist`` installs the top-level ``module`` (``top_level.txt``, else its RECORD)."""
    top = dist.read_text("top_level.txt")
    if top is not None:
        return module in top.split()
    for f in dist.files or ():
        parts = f.parts
        if parts and (parts[0] == module or parts[0] == f"{module}.py"):
            return True
    return False


def describe() -> str:
    """``"onnxruntime-gpu 1.23.2"``, or ``"none installed"``."""
    found = find()
    return str(found) if found is not None else "none installed"


def require():
    """Import and return the ``onnxruntime`` module.

    Raises:
        ModuleNotFoundError: none installed, with :data:`MISSING` as the one-line message.
    """
    try:
        import onnxruntime
    except ModuleNotFoundError as exc:
        if exc.name != "onnxruntime":
            raise
        raise ModuleNotFoundError(MISSING, name="onnxruntime") from None
    return onnxruntime
