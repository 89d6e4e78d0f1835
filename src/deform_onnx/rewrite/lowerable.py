"""Which nodes of a file a method lowers: the one decision ``lower``, ``check`` and ``run_paths`` share.

Deformable-convolution nodes (DeformConv, mmcv's, OpenVINO's) and the MSDA and
DCNv3 plugin nodes are lowered by every method; default-domain ``GridSample``
nodes only by the methods that resolve ``F.grid_sample`` to its gather form
(``gather``, and ``auto`` below opset 16: :mod:`.grid_sample_nodes`).
"""

from __future__ import annotations

import onnx_ir as ir

from ..ops.dcnv3 import sources as dcnv3_nodes
from ..ops.grid_sample import sources as grid_sample_nodes
from ..ops.msda import sources as msda_nodes
from .model_io import default_opset
from .nodes import find_nodes


def nodes_lowered(model: ir.Model, method: str, opset: int | None = None) -> list[ir.Node]:
    """The nodes of ``model`` that ``lower(model, method=method, opset=opset)`` replaces.

    Args:
        opset: the opset lowered at; ``None``: the model's own default-domain opset.

    Raises:
        ValueError: unknown method, a node inside a model-local function, or a method that
            cannot hold the model's GridSample nodes at that opset.
    """
    at = opset if opset is not None else default_opset(model)
    found = [node for node, _ in find_nodes(model)]
    if at is not None:
        found += grid_sample_nodes.nodes_to_lower(model, method, at)
    return found + dcnv3_nodes.find(model) + msda_nodes.find(model)
