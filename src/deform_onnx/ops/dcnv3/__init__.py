"""DCNv3 / DCNv4 (InternImage, FlashInternImage), top to bottom.

- :mod:`.reference`: what it is: PyTorch reference forms (:func:`dcnv3_core`,
  :func:`dcnv4_core`, the :class:`DCNv3` layer) written so that they export;
- :mod:`.dcnv4`: the :class:`DCNv4` layer (FlashInternImage), with DCNv4's own parameter names;
  shapes and the source of the semantics are in their docstrings;
- :mod:`.lower`: :class:`~.lower.DCNv3Spec` and the lowering, sampled with
  ``grid_sample``'s lowerings (:mod:`deform_onnx.ops.grid_sample`);
- :mod:`.sources`: the file nodes that mean it (mmdeploy's ``TRTDCNv3``).

No torch binding: the reference forms export through ``F.grid_sample``.
``deform_onnx.ops.dcnv3`` is public: its names load on first use (PEP 562),
since :mod:`.reference` imports torch and the file rewriter runs without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Public name -> submodule that defines it.
_EXPORTS = {
    "dcnv3_core": ".reference",
    "dcnv4_core": ".reference",
    "DCNv3": ".reference",
    "DCNv4": ".dcnv4",
    "kernel_points": ".lower",
}

__all__ = ["dcnv3_core", "dcnv4_core", "DCNv3", "DCNv4", "kernel_points"]

if TYPE_CHECKING:
    from .dcnv4 import DCNv4
    from .lower import kernel_points
    from .reference import DCNv3, dcnv3_core, dcnv4_core


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
