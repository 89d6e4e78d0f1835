"""The op family, one folder per op, and the op registry.

- :mod:`.deform_conv`: deformable convolution (torchvision ``deform_conv2d``);
- :mod:`.grid_sample`: ``F.grid_sample``;
- :mod:`.msda`: multi-scale deformable attention, and :func:`ms_deform_attn`, the
  torch op deform-onnx defines and exports in one piece;
- :mod:`.dcnv3`: DCNv3/DCNv4, PyTorch reference forms written so that they export;
- :mod:`.registry`: the op registry (each folder's ``register.py`` adds its entry; the registry
  imports none) and the one method/opset check;
- :mod:`.file_nodes`: the one interface between ``lower`` and each op's file nodes.

The torch-side names below are loaded on first use (PEP 562): defining the op
imports torch, and the file rewriter and CLI import this package without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Public name -> submodule that defines it.
_EXPORTS = {
    "ms_deform_attn": ".msda.op",
    "ms_deform_attn_reference": ".msda.op",
    "MSDeformAttnCore": ".msda.op",
    "MSDeformAttnReference": ".msda.op",
}

__all__ = ["ms_deform_attn", "ms_deform_attn_reference", "MSDeformAttnCore", "MSDeformAttnReference"]

if TYPE_CHECKING:
    from .msda.op import MSDeformAttnCore, MSDeformAttnReference, ms_deform_attn, ms_deform_attn_reference


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
