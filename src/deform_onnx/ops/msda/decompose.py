"""``deform_onnx::ms_deform_attn`` as core ATen ops, for torch.export stacks (:func:`deform_onnx.decompositions`).

The fused gather lowering of :mod:`.lower` (the one ONNX writes), driven by the torch-ops builder.
Deformable DETR's per-level PyTorch core (``F.grid_sample`` 4-D) needs no decomposition.
"""

from __future__ import annotations

from ...builder.torch_ops import DECOMPOSITION_OPSET, TorchOpsBuilder


def decompositions(method: str) -> dict:
    """``{torch.ops.deform_onnx.ms_deform_attn.default: fn}`` (one form whatever ``method``)."""
    from . import op  # noqa: F401  (registers torch.ops.deform_onnx.ms_deform_attn)
    from .binding import translations

    return translations(method, DECOMPOSITION_OPSET, lambda _default: DECOMPOSITION_OPSET, TorchOpsBuilder)
