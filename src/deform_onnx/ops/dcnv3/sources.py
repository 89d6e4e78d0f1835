"""``lower`` for mmdeploy's ``TRTDCNv3`` node (InternImage's DCNv3 as a TensorRT plugin) and DCNv4's
``custom_op::DCNv4_Plugin`` (:mod:`.sources_dcnv4`): standard ops.

Written by InternImage's ``DCNv3Function.symbolic``
(``segmentation|detection/ops_dcnv3/functions/dcnv3_func.py``):
``mmdeploy::TRTDCNv3(input, offset, mask)`` with int attributes
``kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h,
dilation_w, group, group_channels, im2col_step``, float ``offset_scale`` and,
in later InternImage versions, int ``remove_center``. Run by mmdeploy's plugin
(open-mmlab/mmdeploy ``csrc/mmdeploy/backend_ops/tensorrt/modulated_deform_conv_v3/
trt_deform_conv_v3.cpp`` and ``trt_deform_conv_v3_kernel.cu``): input
``[N, H, W, group * group_channels]`` (NHWC), offset ``[N, Ho, Wo, group * K * 2]``
(``(dx, dy)`` per group and point, points x outer), mask ``[N, Ho, Wo, group * K]``
used as given (InternImage's layer softmaxes it before the op), output NHWC;
float32 only. Its creator's defaults (kernel 3, stride 1, pad 1, dilation 1,
group 28, group_channels 16, offset_scale 1) apply to missing attributes here too.

Two differences from mmdeploy's plugin, both deliberate: ``remove_center=1``
is honoured (InternImage's CUDA op drops the centre point; mmdeploy's plugin
has no such field and always samples all ``kernel_h * kernel_w`` points), and the
output size is the convolution's ``(H + 2 pad - dilation (k - 1) - 1) // stride + 1``
read from the offset (the plugin's ``getOutputDimensions`` writes
``(H + 2 pad - dilation (k - 1) + 1) // stride - 1``, one row short at stride 2).

Replaced by :func:`deform_onnx.ops.dcnv3.lower.lower_dcnv3` on the sampler the
method resolves to for ``grid_sample`` (GridSample at opset >= 16, gather from 11).
"""

from __future__ import annotations

import onnx_ir as ir

from ...builder import TapeBuilder
from ..registry import resolve
from . import sources_dcnv4
from .lower import DCNv3Spec
from .node_spec import node_spec

DOMAIN, OP_TYPE = "mmdeploy", "TRTDCNv3"
#: Name prefix of the new nodes of an unnamed node.
PREFIX = "deform_onnx_dcnv3"
_INTS = (
    "kernel_h",
    "kernel_w",
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "dilation_h",
    "dilation_w",
    "group",
    "group_channels",
)
#: mmdeploy's TRTDCNv3Creator defaults.
_DEFAULTS = dict(
    kernel_h=3,
    kernel_w=3,
    stride_h=1,
    stride_w=1,
    pad_h=1,
    pad_w=1,
    dilation_h=1,
    dilation_w=1,
    group=28,
    group_channels=16,
)


def find(model: ir.Model) -> list[ir.Node]:
    """The ``mmdeploy::TRTDCNv3`` and ``custom_op::DCNv4_Plugin`` nodes of ``model`` (main graph and subgraphs)."""
    return [
        n
        for n in ir.traversal.RecursiveGraphIterator(model.graph)
        if (n.op_type == OP_TYPE and n.domain == DOMAIN) or sources_dcnv4.is_node(n)
    ]


def nodes_lowered(model: ir.Model, method: str, opset: int | None) -> list[ir.Node]:
    """The nodes ``lower(model, method=method)`` replaces: every ``mmdeploy::TRTDCNv3`` and
    ``custom_op::DCNv4_Plugin`` node, whatever the method and opset (:func:`find`).
    """
    return find(model)


def _where(node: ir.Node) -> str:
    return f"node {node.name or '<unnamed>'} ({DOMAIN}::{OP_TYPE})"


def spec_for_node(node: ir.Node) -> DCNv3Spec:
    """The node's :class:`~deform_onnx.ops.dcnv3.lower.DCNv3Spec`.

    Raises:
        ValueError: unknown attributes, wrong attribute types or values, or not 3 inputs; the message names the node.
    """
    return node_spec(
        node,
        _where(node),
        fields={name: name for name in _INTS},
        defaults=_DEFAULTS,
        scale="offset_scale",
        step="im2col_step",
        inputs=("input", "offset", "mask"),
    )


def lower_node(node: ir.Node, b: TapeBuilder, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the DCNv3 lowering that ``method`` resolves to at ``opset`` for one node; returns its output and name.

    Raises:
        ValueError: as :func:`spec_for_node`.
    """
    if sources_dcnv4.is_node(node):
        return sources_dcnv4.lower_node(node, b, method, opset)
    lowering = resolve("dcnv3", method, opset)
    return lowering.fn(b, spec_for_node(node), *node.inputs), lowering.name
