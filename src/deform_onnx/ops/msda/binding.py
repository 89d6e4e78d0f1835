"""``deform_onnx::ms_deform_attn`` (:mod:`deform_onnx.ops.msda.op`) in both exporters.

Every method resolves to the one fused lowering (:mod:`deform_onnx.ops.msda.lower`,
opset >= 11): ONNX has no native MSDA op, and the per-level GridSample form is
what the plain PyTorch code already exports to.
"""

from __future__ import annotations

from ..registry import resolve
from .op import OP_NAME

TORCHSCRIPT_OP = OP_NAME


def emit_ms_deform_attn(
    b, method: str, target_opset: int, value, spatial_shapes, level_start_index, sampling_locations, attention_weights
):
    """Lower one ``ms_deform_attn`` call with ``b``.

    Raises:
        ValueError: unknown method, an opset below 11, or inputs of the wrong rank.
    """
    lowering = resolve("ms_deform_attn", method, target_opset)
    return lowering.fn(b, value, spatial_shapes, level_start_index, sampling_locations, attention_weights)


def make_symbolic(method: str = "auto"):
    """The TorchScript symbolic for ``deform_onnx::ms_deform_attn``."""
    from ...builder.torchscript import TorchScriptBuilder

    def ms_deform_attn(g, value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
        return emit_ms_deform_attn(
            TorchScriptBuilder(g),
            method,
            g.opset,
            value,
            spatial_shapes,
            level_start_index,
            sampling_locations,
            attention_weights,
        )

    return ms_deform_attn


def translations(method: str, opset: int | None, build_opset, builder) -> dict:
    """Dynamo translation of ``torch.ops.deform_onnx.ms_deform_attn`` (see :func:`translation_table`)."""
    import torch

    def ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
        build = build_opset(opset or 18)
        target = opset if opset is not None else build
        return emit_ms_deform_attn(
            builder(build),
            method,
            target,
            value,
            spatial_shapes,
            level_start_index,
            sampling_locations,
            attention_weights,
        )

    return {torch.ops.deform_onnx.ms_deform_attn.default: ms_deform_attn}
