"""Which nodes of a file a method lowers: the one decision ``lower``, ``check`` and ``run_paths`` share.

Each op's file-node module (:attr:`deform_onnx.ops.registry.OpEntry.sources`) answers for its nodes:
for the package's ops, deformable-convolution nodes (DeformConv, mmcv's, OpenVINO's, TensorRT's plugins) and the MSDA and
DCNv3 plugin nodes are lowered by every method; default-domain ``GridSample`` nodes only by the
methods that resolve ``F.grid_sample`` to its gather form (``gather``, and ``auto`` below opset 16).
"""

from __future__ import annotations

import onnx_ir as ir

from ..ops.registry import OPS, sources
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


def nothing_to_lower(model: ir.Model, method: str) -> str:
    """The one wording, for ``lower`` and ``check``, of a file that ``lower(method=method)`` leaves as it is.

    It says whether another method would replace nodes: ``gather`` lowers every kind of node any
    method does (GridSample nodes included).
    """
    try:
        others = nodes_lowered(model, "gather")
    except ValueError:  # a node inside a model-local function: lower() says why
        others = []
    head = f"no node that lower(method={method!r}) replaces"
    if not others:
        foreign = _not_onnx_ops(model)
        if foreign:  # e.g. a DCNv2_TRT plugin (offset and mask split inside it): deformable, but not one lower knows
            known = sorted(
                {f"{d}::{op}" if d not in ("", "ai.onnx") else op for e in OPS.values() for d, op in e.onnx_nodes}
            )
            return (f"{head} (nor would any method: its node(s) {', '.join(foreign)} are not ONNX ops and not "
                    f"among the nodes lower knows: {', '.join(known)})")  # fmt: skip
        titles = [entry.title for entry in OPS.values() if entry.onnx_nodes]
        kinds = ", ".join(titles[:-1]) + f" or {titles[-1]}" if len(titles) > 1 else "".join(titles)
        return f"{head} (nor would any method: the file has no {kinds} node)"
    kinds = ", ".join(sorted({n.op_type for n in others}))
    return f"{head} (method 'gather' would replace {len(others)}: {kinds})"


def _not_onnx_ops(model: ir.Model) -> list[str]:
    """The kinds of ``model``'s graph nodes that are not ONNX ops (a custom domain, or an op type the default
    domain lacks), as ``domain::op x count``: a plugin node ``lower`` does not know reads as such, not as none.
    """
    import onnx.defs

    counts: dict[str, int] = {}
    for node in model.graph:
        if node.domain in ("", "ai.onnx") and onnx.defs.has(node.op_type):
            continue
        name = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        counts[name] = counts.get(name, 0) + 1
    return [f"{name} x{n}" for name, n in counts.items()]
