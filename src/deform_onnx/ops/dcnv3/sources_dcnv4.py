"""``lower`` for the ``custom_op::DCNv4_Plugin`` node (DCNv4 as NVIDIA's public TensorRT plugin): standard ops.

DCNv4's own repository (OpenGVLab/DCNv4) has no ONNX symbolic and no TensorRT plugin (its issue #62 asks for
one). The public node form is NVIDIA's DL4AGX sample ``AV-Solutions/dcnv4-trt``: ``tools/export_onnx.py``
registers a symbolic for ``DCNv4Function`` that writes ``custom_op::DCNv4_Plugin(input, offset_mask)`` with int
attributes ``kh, kw, sh, sw, ph, pw, dh, dw, group, group_channels, step, remove_center`` and float
``offscale`` (the function's arguments in order; ``d_stride``, ``block_thread`` and ``softmax`` are dropped).
Its plugin (``plugins/dcnv4Plugin/dcnv4_plugin.cpp`` / ``.cu``, ``forward_kernel_dcn_reg``) runs with
``softmax = false``: input ``[N, H, W, group * group_channels]`` (NHWC), ``offset_mask [N, Ho, Wo, D]`` read per
group ``g`` at ``g * P * 3``: ``2P`` offsets ``(dx, dy)`` then ``P`` point weights used as given (``D`` padded,
the rest ignored), the same positions, bilinear rule and point order as DCNv3, output NHWC: the semantics of
:func:`deform_onnx.ops.dcnv3.dcnv4_core` with ``softmax=False``. ``step`` (``im2col_step``) has no effect on
values. Missing attributes take :class:`~.lower.DCNv3Spec`'s defaults (the plugin's creator has none).

Replaced by :func:`deform_onnx.ops.dcnv3.lower.lower_dcnv3` after splitting ``offset_mask`` (Slice, Reshape),
on the sampler the method resolves to (GridSample at opset >= 16, gather from 11).
"""

from __future__ import annotations

import onnx_ir as ir

from ...builder import TapeBuilder
from ..registry import resolve
from .lower import DCNv3Spec
from .node_spec import node_spec

DOMAIN, OP_TYPE = "custom_op", "DCNv4_Plugin"
#: The plugin's int fields -> DCNv3Spec's names.
_INTS = {
    "kh": "kernel_h",
    "kw": "kernel_w",
    "sh": "stride_h",
    "sw": "stride_w",
    "ph": "pad_h",
    "pw": "pad_w",
    "dh": "dilation_h",
    "dw": "dilation_w",
    "group": "group",
    "group_channels": "group_channels",
}


def is_node(node: ir.Node) -> bool:
    """Whether ``node`` is a ``custom_op::DCNv4_Plugin`` node."""
    return node.op_type == OP_TYPE and node.domain == DOMAIN


def _where(node: ir.Node) -> str:
    return f"node {node.name or '<unnamed>'} ({DOMAIN}::{OP_TYPE})"


def spec_for_node(node: ir.Node) -> DCNv3Spec:
    """The node's :class:`~deform_onnx.ops.dcnv3.lower.DCNv3Spec`.

    Raises:
        ValueError: unknown attributes, wrong attribute types or values, or not 2 inputs; the message names the node.
    """
    defaults = DCNv3Spec()
    return node_spec(
        node,
        _where(node),
        fields=_INTS,
        defaults={theirs: getattr(defaults, ours) for theirs, ours in _INTS.items()},
        scale="offscale",
        step="step",
        inputs=("input", "offset_mask"),
    )


def lower_node(node: ir.Node, b: TapeBuilder, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the DCNv3 lowering for one ``DCNv4_Plugin`` node, its ``offset_mask`` split into offsets and weights.

    Raises:
        ValueError: as :func:`spec_for_node`; an ``offset_mask`` narrower than ``group * P * 3`` where its width
            is known.
    """
    spec = spec_for_node(node)
    lowering = resolve("dcnv3", method, opset)
    x, offset_mask = node.inputs
    G, P = spec.group, len(spec.points())
    shape = offset_mask.shape if offset_mask is not None else None
    width = shape[3] if shape is not None and len(shape) == 4 else None
    if isinstance(width, int) and width < G * P * 3:
        raise ValueError(
            f"{_where(node)}: offset_mask has {width} channels, fewer than group * points * 3 = {G * P * 3}"
        )

    def part(value, start: int, end: int, axis: int):
        return b.op("Slice", value, b.i64([start]), b.i64([end]), b.i64([axis]))

    packed = b.reshape(part(offset_mask, 0, G * P * 3, 3), [0, 0, 0, G, 3 * P])  # [N, Ho, Wo, G, 3P]
    offset = b.reshape(part(packed, 0, 2 * P, 4), [0, 0, 0, G * P * 2])
    mask = b.reshape(part(packed, 2 * P, 3 * P, 4), [0, 0, 0, G * P])
    return lowering.fn(b, spec, x, offset, mask), lowering.name
