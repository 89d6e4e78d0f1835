"""mmcv's custom deformable-convolution nodes, in the ``mmcv`` and ``mmdeploy`` domains.

Written by mmcv's ``DeformConv2dFunction.symbolic`` / ``ModulatedDeformConv2dFunction.symbolic``
and mmdeploy's symbolic rewrites (``mmdeploy/mmcv/ops/deform_conv.py``,
``modulated_deform_conv.py``); run by mmcv/mmdeploy's custom-op libraries.

* ``MMCVDeformConv2d(input, offset, weight)`` (DCNv1, no bias input).
* ``MMCVModulatedDeformConv2d(input, offset, mask, weight, bias?)`` (DCNv2).

Attributes ``stride``, ``padding``, ``dilation`` (pairs), ``groups``,
``deform_groups`` (offset groups); mmcv also writes ``bias`` (always 0: the
DCNv1 op has no bias) and ``im2col_step`` (a batching hint of the CUDA kernel,
no effect on the result). The offset layout (``dy`` at channel ``2k``, ``dx``
at ``2k+1`` per offset group, taps row-major), the mask layout and the
bilinear border rule are torchvision's: mmcv's and torchvision's kernels both
descend from the DCN authors' code (checked against mmdeploy's CPU kernel
``deformable_im2col`` / ``bilinear_interpolate``).
"""

from __future__ import annotations

from .source_kinds import ConvAttrs, SourceOp, int_attr, pair_attr, register

DOMAINS = ("mmcv", "mmdeploy")


def _padding(attrs, where: str) -> tuple[int, int]:
    pad = attrs.get("padding", 0)
    if isinstance(pad, (list, tuple)) and len(pad) == 4:
        # mmdeploy's DCNv1 symbolic writes [ph, ph, pw, pw] (the module's padding, h then w);
        # its kernels read entries 0 and 1. [a, a, b, b] means padding (a, b) to the symbolic;
        # any other 4-entry list means different things to the two readers.
        if pad[0] == pad[1] and pad[2] == pad[3]:
            return (int(pad[0]), int(pad[2]))
        raise ValueError(
            f"{where}: padding={list(pad)} is ambiguous (mmdeploy's symbolic writes [ph, ph, pw, pw] but "
            "its kernels read the first two entries); re-export with a 2-entry padding [ph, pw]"
        )
    return pair_attr(attrs, "padding", 0, where)


def _offset_groups(attrs, where: str) -> int:
    if "deform_groups" in attrs and "deformable_groups" in attrs:
        raise ValueError(f"{where}: both deform_groups and deformable_groups are set; keep one")
    name = "deformable_groups" if "deformable_groups" in attrs else "deform_groups"
    return int_attr(attrs, name, 1, where)


def _parse(attrs, where: str) -> ConvAttrs:
    if int_attr(attrs, "bias", 0, where, minimum=0) != 0:
        raise ValueError(f"{where}: bias=1 but MMCVDeformConv2d has no bias input; add the bias with an Add node")
    int_attr(attrs, "im2col_step", 1, where)  # validated, no effect on the result
    return ConvAttrs(
        stride=pair_attr(attrs, "stride", 1, where),
        padding=_padding(attrs, where),
        dilation=pair_attr(attrs, "dilation", 1, where),
        groups=int_attr(attrs, "groups", 1, where),
        offset_groups=_offset_groups(attrs, where),
    )


_MODULATED_ATTRS = {
    "stride": "ints",
    "padding": "ints",
    "dilation": "ints",
    "groups": "int",
    "deform_groups": "int",
    "deformable_groups": "int",
}
_DCNV1_ATTRS = {**_MODULATED_ATTRS, "bias": "int", "im2col_step": "int"}

for _domain in DOMAINS:
    register(
        SourceOp(
            domain=_domain,
            op_type="MMCVDeformConv2d",
            roles=("input", "offset", "weight"),
            required=3,
            attr_kinds=_DCNV1_ATTRS,
            parse=_parse,
        )
    )
    register(
        SourceOp(
            domain=_domain,
            op_type="MMCVModulatedDeformConv2d",
            roles=("input", "offset", "mask", "weight", "bias"),
            required=4,
            attr_kinds=_MODULATED_ATTRS,
            parse=_parse,
        )
    )
