"""``F.grid_sample``'s registry entry: one GridSample node or the gather form (imported by the registry's discovery)."""

from __future__ import annotations

from ..registry import Lowering, OpEntry, register
from . import lower

#: ``F.grid_sample``'s lowerings: its native form is one ``GridSample`` node.
LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", lower.NATIVE_MIN_OPSET, lower.lower_native, node="GridSample"),
    "gather": Lowering("gather", lower.GATHER_MIN_OPSET, lower.lower_gather),
}
#: Both GridSample methods mean one GridSample node (DCNv3 samples with these too).
SAMPLER_METHODS = {"native": "native", "grid_sample": "native", "gather": "gather"}

ENTRY = register(
    OpEntry(
        name="grid_sample",
        title="grid_sample",
        lowerings=LOWERINGS,
        methods=SAMPLER_METHODS,
        auto=("native", "gather"),
        # The dispatcher names F.grid_sample aten::grid_sampler_2d / _3d (aten::grid_sampler is composite).
        torch_ops=("aten::grid_sampler",),
        onnx_nodes=(("", "GridSample"),),
        order=20,
        spells="method {!r} writes F.grid_sample as GridSample, which",
        binding="deform_onnx.ops.grid_sample.binding",
        sources="deform_onnx.ops.grid_sample.sources",
        rules="deform_onnx.ops.grid_sample.rules",
        decompositions="deform_onnx.ops.grid_sample.decompose",
    )
)
