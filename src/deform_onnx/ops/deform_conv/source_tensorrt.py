"""TensorRT plugin nodes of deformable convolution: TensorRT's own ``ModulatedDeformConv2d`` and CenterNet's ``DCNv2``.

Both are plugin nodes: TensorRT's ONNX parser hands a node it has no importer for to the plugin
registered under its op type, with the node's attributes as plugin fields. No other runtime runs
them, so a file holding them runs on TensorRT only until ``lower`` rewrites them.

``ModulatedDeformConv2d`` (TensorRT OSS ``plugin/modulatedDeformConvPlugin``, plugin versions 1 and 2,
"modified from mmcv"): the plugin onnx-tensorrt's ``DeformConv`` importer creates; files hold it where
it was written by hand, e.g. with onnx-graphsurgeon (default domain, or ``trt`` as TensorRT's own MSDA
plugin node is sometimes written). Inputs ``x, offset, mask, weight, bias?`` (the mask is required: the
kernel reads it unconditionally, onnx-tensorrt passes ones when ``DeformConv`` has none); attributes
``stride``, ``padding``, ``dilation`` (2 ints each), ``group``, ``deformable_group`` (its README and
``CustomModulatedDeformConv2d_PluginConfig.yaml``; defaults ``[1, 1]``, ``[0, 0]``, ``[1, 1]``, 1, 1).
The pairs are read ``[h, w]``, as onnx-tensorrt writes them from ``DeformConv``'s ``strides`` / ``pads``
/ ``dilations`` and as mmcv documents its TensorRT op ("(sH, sW)"). The plugin's ``enqueue`` passes
entry 0 to its launcher's *width* parameters (``strideW``, ``padW``, ``dilationW``) while it takes the
output's size from the offset's, so TensorRT's own result for unequal entries is not any convolution's;
for equal entries (every file seen) the readings agree. The whole kernel lineage does this (mmcv's and
mmdeploy's TensorRT ``MMCVModulatedDeformConv2d``, BEVFormer_tensorrt's), while mmdeploy's ONNX Runtime op
reads entry 0 as the height, as :mod:`.source_mmcv` does. Sampling (``dmcnIm2colBilinear``: zero outside
``(-1, H) x (-1, W)``, each corner outside the map 0), offset layout (``dy`` at ``2k``, ``dx`` at ``2k + 1``
per deformable group, taps row-major) and mask layout are torchvision's.

``DCNv2`` (CaoWGG/TensorRT-CenterNet, also FairMOT's TensorRT ports): written by the symbolic
``g.op("DCNv2", input, offset, mask, weight, bias, stride_i=, padding_i=, dilation_i=, groups_i=,
deformable_group_i=)`` added to mmdetection's ``ModulatedDeformConvFunction`` (default domain); read
by that repository's onnx-tensorrt importer (``DEFINE_BUILTIN_OP_IMPORTER(DCNv2)``), whose defaults are
used here: ``stride`` 1, ``padding`` **1**, ``dilation`` 1, ``groups`` 1, ``deformable_group`` 1. The
values are single ints (mmdetection's function takes ints; a 2-entry list is read ``[h, w]``); some
ports spell ``deformable_groups``. Its kernel (``dcn_v2_im2col_cuda.cu``) is the DCN authors' and
samples as torchvision does.

Not read here: ``DCNv2_TRT`` nodes (the dlunion/tensorRTIntegrate lineage), which take the offset
convolution's raw output and split it into offset and mask inside the plugin: not a
``deform_conv2d`` input order, so ``lower`` names them as nodes it does not know.
"""

from __future__ import annotations

from .source_kinds import ConvAttrs, SourceOp, int_attr, pair_attr, register

#: Domains TensorRT's ``ModulatedDeformConv2d`` plugin node is written in (the parser ignores the domain).
TRT_DOMAINS = ("", "trt")


def _parse_trt(attrs, where: str) -> ConvAttrs:
    return ConvAttrs(
        stride=pair_attr(attrs, "stride", 1, where),
        padding=_padding(attrs, "padding", 0, where),
        dilation=pair_attr(attrs, "dilation", 1, where),
        groups=int_attr(attrs, "group", 1, where),
        offset_groups=int_attr(attrs, "deformable_group", 1, where),
    )


def _padding(attrs, name: str, default: int, where: str) -> tuple[int, int]:
    pad = pair_attr(attrs, name, default, where)
    if min(pad) < 0:
        raise ValueError(f"{where}: attribute {name}={list(pad)} must be >= 0")
    return pad


def _parse_dcnv2(attrs, where: str) -> ConvAttrs:
    if "deformable_group" in attrs and "deformable_groups" in attrs:
        raise ValueError(f"{where}: both deformable_group and deformable_groups are set; keep one")
    name = "deformable_groups" if "deformable_groups" in attrs else "deformable_group"
    return ConvAttrs(
        stride=pair_attr(attrs, "stride", 1, where),
        padding=_padding(attrs, "padding", 1, where),  # the importer's default: attrs.get("padding", 1)
        dilation=pair_attr(attrs, "dilation", 1, where),
        groups=int_attr(attrs, "groups", 1, where),
        offset_groups=int_attr(attrs, name, 1, where),
    )


_ROLES = ("input", "offset", "mask", "weight", "bias")
_PAIRS = {"stride": "ints", "padding": "ints", "dilation": "ints"}

for _domain in TRT_DOMAINS:
    register(
        SourceOp(
            domain=_domain,
            op_type="ModulatedDeformConv2d",
            roles=_ROLES,
            required=4,
            attr_kinds={**_PAIRS, "group": "int", "deformable_group": "int"},
            parse=_parse_trt,
        )
    )

CENTERNET_DCNV2 = register(
    SourceOp(
        domain="",
        op_type="DCNv2",
        roles=_ROLES,
        required=4,
        # ints as the symbolic writes them (a 2-entry list is read too)
        attr_kinds={
            **dict.fromkeys(_PAIRS, "int"),
            "groups": "int",
            "deformable_group": "int",
            "deformable_groups": "int",
        },
        parse=_parse_dcnv2,
    )
)
