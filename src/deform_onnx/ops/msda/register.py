"""Multi-scale deformable attention's registry entry: one lowering for every method (imported by the registry's discovery)."""

from __future__ import annotations

from ..registry import METHODS, Lowering, OpEntry, register
from . import lower

#: The fused gather form, all levels at once (ONNX has no MSDA op).
LOWERINGS: dict[str, Lowering] = {"gather": Lowering("gather", lower.MIN_OPSET, lower.lower_gather)}

ENTRY = register(
    OpEntry(
        name="ms_deform_attn",
        title="ms_deform_attn",
        lowerings=LOWERINGS,
        methods=dict.fromkeys(METHODS[1:], "gather"),
        auto=("gather",),
        torch_ops=("deform_onnx::ms_deform_attn",),
        onnx_nodes=(
            ("mmdeploy", "MMCVMultiScaleDeformableAttention"),
            ("mmcv", "MMCVMultiScaleDeformableAttention"),
            ("", "MultiscaleDeformableAttnPlugin_TRT"),
            ("trt", "MultiscaleDeformableAttnPlugin_TRT"),
        ),
        order=40,
        binding="deform_onnx.ops.msda.binding",
        sources="deform_onnx.ops.msda.sources",
        decompositions="deform_onnx.ops.msda.decompose",
    )
)
