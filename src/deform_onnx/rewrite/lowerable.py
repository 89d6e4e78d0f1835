"""Which nodes of a file a method lowers: the one decision ``lower``, ``check`` and ``run_paths`` share.

Deformable-convolution nodes (DeformConv, mmcv's, OpenVINO's) and the MSDA and
DCNv3 plugin nodes are lowered by every method; default-domain ``GridSample``
nodes only by the methods that resolve ``F.grid_sample`` to its gather form
(``gather``, and ``auto`` below opset 16: :mod:`deform_onnx.ops.grid_sample.sources`).
Each op's file-node module (:attr:`deform_onnx.ops.registry.OpEntry.sources`) answers for its nodes.
"""

from __future__ import annotations

import onnx_ir as ir

from ..ops.registry import sources
from .model_io import default_opset


def nodes_lowered(model: ir.Model, method: str, opset: int | None = None) -> list[ir.Node]:
    """The nodes of ``model`` that ``lower(model, method=method, opset=opset)`` replaces.

    Args:
        opset: the opset lowered at; ``None``: the model's own default-domain opset.

    Raises:
        ValueError: unknown method, a node inside a model-local function, or a method that
            cannot hold the model's GridSample nodes at that opset.
    """
    at = opset if opset is not None else default_opset(model)
    return [node for module in sources() for node in module.nodes_lowered(model, method, at)]
