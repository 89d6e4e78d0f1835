"""``lower`` for multi-scale deformable attention plugin nodes: rewritten into standard ops.

Two node kinds, both with the inputs ``value [N, S, M, D]``, ``spatial_shapes [L, 2]``,
``level_start_index [L]``, ``sampling_locations [N, Lq, M, L, P, 2]``,
``attention_weights [N, Lq, M, L, P]`` in this order:

- mmdeploy's ``MMCVMultiScaleDeformableAttention`` (domain ``mmdeploy``; ``mmcv``
  too). Written by mmdeploy's symbolic rewrite of
  ``mmcv.ops.multi_scale_deform_attn.MultiScaleDeformableAttnFunction``
  (``mmdeploy/mmcv/ops/multi_scale_deform_attn.py``, ``ms_deform_attn_default``:
  ``g.op('mmdeploy::MMCVMultiScaleDeformableAttention', value, value_spatial_shapes,
  value_level_start_index, sampling_locations, attention_weights, im2col_step_i=...)``).
  One attribute, ``im2col_step`` (a batching hint of the CUDA kernel, no effect on
  the result). Output ``[N, Lq, M*D]`` (mmcv's ``MultiScaleDeformableAttnFunction``).
- TensorRT's ``MultiscaleDeformableAttnPlugin_TRT`` (TensorRT OSS
  ``plugin/multiscaleDeformableAttnPlugin/multiscaleDeformableAttnPlugin.cpp`` and its
  README; default domain or ``trt``). No attributes; ``spatial_shapes`` and
  ``level_start_index`` are int32; output ``[N, Lq, M, D]`` (``getOutputDimensions``:
  ``value.d[0], sampling_locations.d[1], value.d[2], value.d[3]``).

Both kernels sample as Deformable DETR's ``ms_deform_attn_im2col_bilinear``: pixel
``loc * size - 0.5``, bilinear, corners outside the level contribute 0 — the
semantics of :mod:`deform_onnx.ops.msda.lower`, whose single lowering (opset >= 11)
replaces every such node, whatever the method.
"""

from __future__ import annotations

import onnx_ir as ir

from ...builder import TapeBuilder
from ..file_nodes import describe
from ..registry import resolve
from .register import ENTRY

#: (domain, op_type) -> (attributes it may carry, output layout: "flat" [N, Lq, M*D] or "heads" [N, Lq, M, D]).
KINDS = {
    ("mmdeploy", "MMCVMultiScaleDeformableAttention"): ({"im2col_step"}, "flat"),
    ("mmcv", "MMCVMultiScaleDeformableAttention"): ({"im2col_step"}, "flat"),
    ("", "MultiscaleDeformableAttnPlugin_TRT"): (set(), "heads"),
    ("trt", "MultiscaleDeformableAttnPlugin_TRT"): (set(), "heads"),
}
assert set(KINDS) == set(ENTRY.onnx_nodes)

#: Name prefix of the new nodes of an unnamed node.
PREFIX = "deform_onnx_msda"


def _key(node: ir.Node) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def find(model: ir.Model) -> list[ir.Node]:
    """The MSDA plugin nodes of ``model``'s main graph and subgraphs.

    Raises:
        ValueError: such a node inside a model-local function (inline the functions first).
    """
    for function in model.functions.values():
        for node in function:
            if _key(node) in KINDS:
                raise ValueError(
                    f"node {node.name or '<unnamed>'} ({node.op_type}) is inside function {function.name}: "
                    "inline local functions first (onnx.inliner.inline_local_functions)"
                )
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if _key(n) in KINDS]


def nodes_lowered(model: ir.Model, method: str, opset: int | None) -> list[ir.Node]:
    """The nodes ``lower(model, method=method)`` replaces: every MSDA plugin node, whatever the method and
    opset (:func:`find`).
    """
    return find(model)


def needs_shapes(node: ir.Node) -> bool:
    """Whether an input has no element type in the file (the lowering's constants take the value's dtype)."""
    return any(v is not None and v.dtype is None for v in node.inputs)


def lower_node(node: ir.Node, b: TapeBuilder, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the fused lowering of one node with ``b``; returns its output and the lowering's name.

    Raises:
        ValueError: unknown attributes, a wrong input count or rank (the message names the node).
    """
    lowering = resolve("ms_deform_attn", method, opset)
    where = f"node {node.name or '<unnamed>'} ({describe(node)})"
    attrs, layout = KINDS[_key(node)]
    unknown = sorted(set(node.attributes) - attrs)
    if unknown:
        known = ", ".join(sorted(attrs)) or "none"
        raise ValueError(f"{where}: unknown attribute(s) {', '.join(unknown)}; known: {known}")
    inputs = list(node.inputs)
    if len(inputs) != 5 or any(v is None for v in inputs) or len(node.outputs) != 1:
        raise ValueError(
            f"{where}: expected 5 inputs (value, spatial_shapes, level_start_index, sampling_locations, "
            f"attention_weights) and 1 output, got {len(inputs)} and {len(node.outputs)}"
        )
    try:
        out = lowering.fn(b, *inputs)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if layout == "heads":  # TensorRT's plugin keeps heads apart: [N, Lq, M, D]
        out = b.reshape(out, [0, 0, b.dim(inputs[0], 2), b.dim(inputs[0], 3)])
    return out, lowering.name
