"""DCNv3's registry entry: a model-level op sampled with ``grid_sample``'s lowerings (imported by the registry's discovery).

No torch binding: the reference forms (:mod:`.reference`) export through ``F.grid_sample``;
``lower`` replaces mmdeploy's ``TRTDCNv3`` and DCNv4's ``custom_op::DCNv4_Plugin`` file nodes (:mod:`.sources`).
"""

from __future__ import annotations

from functools import partial

from ..grid_sample.register import LOWERINGS as SAMPLERS
from ..grid_sample.register import SAMPLER_METHODS
from ..registry import Lowering, OpEntry, register
from .lower import lower_dcnv3

#: One DCNv3 lowering per sampler, named after it (``native``: GridSample, ``gather``).
LOWERINGS: dict[str, Lowering] = {
    name: Lowering(name, sampler.min_opset, partial(lower_dcnv3, sampler=sampler.fn))
    for name, sampler in SAMPLERS.items()
}

ENTRY = register(
    OpEntry(
        name="dcnv3",
        title="DCNv3",
        lowerings=LOWERINGS,
        methods=SAMPLER_METHODS,
        auto=("native", "gather"),
        onnx_nodes=(("mmdeploy", "TRTDCNv3"), ("custom_op", "DCNv4_Plugin")),
        order=30,
        spells="method {!r} samples DCNv3 with GridSample, which",
        sources="deform_onnx.ops.dcnv3.sources",
    )
)
