"""The standard ONNX ``DeformConv`` operator (opset 19; ONNX spec).

Inputs ``X, W, offset, B?, mask?``; attributes ``dilations, group,
kernel_shape, offset_group, pads, strides``. Same semantics and offset layout
as torchvision's ``deform_conv2d``; ``pads`` are ``[h_begin, w_begin, h_end, w_end]``
and may differ between begin and end (other converters write such files and
ONNX Runtime's kernel runs them): the begin pads shift every sampling point,
their sums set the output size.
"""

from __future__ import annotations

from .source_kinds import ConvAttrs, SourceOp, int_attr, pads_attr, pair_attr, register


def _parse(attrs, where: str) -> ConvAttrs:
    begin, end = pads_attr(attrs, where)
    kernel = pair_attr(attrs, "kernel_shape", 1, where) if "kernel_shape" in attrs else None
    return ConvAttrs(
        stride=pair_attr(attrs, "strides", 1, where),
        padding=begin,
        padding_end=end,
        dilation=pair_attr(attrs, "dilations", 1, where),
        groups=int_attr(attrs, "group", 1, where),
        offset_groups=int_attr(attrs, "offset_group", 1, where),
        kernel=kernel,
    )


DEFORM_CONV = register(
    SourceOp(
        domain="",
        op_type="DeformConv",
        roles=("input", "weight", "offset", "bias", "mask"),
        required=3,
        attr_kinds={
            "dilations": "ints",
            "group": "int",
            "kernel_shape": "ints",
            "offset_group": "int",
            "pads": "ints",
            "strides": "ints",
        },
        parse=_parse,
    )
)
