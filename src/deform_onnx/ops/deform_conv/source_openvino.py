"""OpenVINO's own ONNX node ``org.openvinotoolkit::DeformableConv2D``.

Files prepared for OpenVINO may hold it (mmcv's OpenVINO export path writes
it); ONNX Runtime cannot load it. Read as OpenVINO's ONNX frontend reads it
(``src/frontends/onnx/frontend/src/op/org.openvinotoolkit/deformable_conv_2d.cpp``):
inputs ``X, offset, W`` and an optional 4th ``mask``; attributes ``strides``,
``pads`` (``[h_begin, w_begin, h_end, w_end]``), ``dilations`` (read by the
frontend's ``convpool`` helpers, as for ``Conv``), ``group``,
``deformable_groups``, and ``auto_pad`` (only ``NOTSET`` here). No bias input.
The frontend builds ``DeformableConvolution-8`` without setting
``bilinear_interpolation_pad``, whose default is ``false``: OpenVINO's
border rule, not torchvision's (``DeformConvSpec.bilinear_interpolation_pad``);
the lowerings reproduce it, so the rewritten file gives OpenVINO's numbers.
The offset layout (``dy`` then ``dx`` per tap, taps row-major, per
deformable group) is the same as torchvision's.
"""

from __future__ import annotations

from .source_kinds import ConvAttrs, SourceOp, int_attr, pads_attr, pair_attr, register


def _parse(attrs, where: str) -> ConvAttrs:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in ("NOTSET", ""):
        raise ValueError(f"{where}: auto_pad={auto_pad!r} is not supported; write explicit pads")
    begin, end = pads_attr(attrs, where)
    return ConvAttrs(
        stride=pair_attr(attrs, "strides", 1, where),
        padding=begin,
        padding_end=end,
        dilation=pair_attr(attrs, "dilations", 1, where),
        groups=int_attr(attrs, "group", 1, where),
        offset_groups=int_attr(attrs, "deformable_groups", 1, where),
        kernel=pair_attr(attrs, "kernel_shape", 1, where) if "kernel_shape" in attrs else None,
        bilinear_interpolation_pad=False,
    )


OPENVINO_DEFORMABLE_CONV_2D = register(
    SourceOp(
        domain="org.openvinotoolkit",
        op_type="DeformableConv2D",
        roles=("input", "offset", "weight", "mask"),
        required=3,
        attr_kinds={
            "strides": "ints",
            "pads": "ints",
            "dilations": "ints",
            "group": "int",
            "deformable_groups": "int",
            "kernel_shape": "ints",
            "auto_pad": "string",
        },
        parse=_parse,
        torchvision_border=False,
    )
)
