"""DCNv3 (InternImage) in plain PyTorch: the sampling core and the layer around it.

Semantics are InternImage's (Wang et al., "InternImage: Exploring
Large-Scale Vision Foundation Models with Deformable Convolutions", CVPR
2023; code: OpenGVLab/InternImage, ``ops_dcnv3/functions/dcnv3_func.py``
``dcnv3_core_pytorch`` and its CUDA kernel ``src/cuda/dcnv3_im2col_cuda.cuh``
``dcnv3_im2col_gpu_kernel``; the layer is ``ops_dcnv3/modules/dcnv3.py``
``DCNv3``). Written here from that definition; it calls ``F.grid_sample``
once, so it exports through :func:`deform_onnx.export` at every opset the
``grid_sample`` lowering serves (GridSample at >= 16, gather from 11).

Per output pixel ``(h, w)``, group ``g`` and kernel point ``p = i * kernel_h + j``
(``i`` along the width, ``j`` along the height: InternImage's order, x outer),
the sampling position in the zero-padded input, in pixels, is::

    x = cw + w * stride_w + (i * dilation_w - cw + offset[..., g, p, 0]) * offset_scale
    y = ch + h * stride_h + (j * dilation_h - ch + offset[..., g, p, 1]) * offset_scale

with ``cw = dilation_w * (kernel_w - 1) // 2`` (``ch`` likewise); the output is
``sum_p mask[..., g, p] * bilinear(input_g, y, x)`` (0 outside the padded
map). Note that ``offset_scale`` scales the kernel's own spread as well as the
offset (as in the CUDA kernel). ``remove_center`` drops the centre point of
a square odd kernel (``P = kernel_h * kernel_w - 1``).

Where InternImage's own PyTorch core and its CUDA kernel disagree, this
follows the CUDA kernel (what deployed models ran): ``dcnv3_core_pytorch``
pads the height by ``pad_w`` and the width by ``pad_h`` (``F.pad`` on NHWC
lists the last dimension first); the two agree when ``pad_h == pad_w``, as in
every InternImage configuration.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...builder.forms import wants
from .lower import kernel_points

__all__ = ["dcnv3_core", "dcnv4_core", "DCNv3", "kernel_points"]


def dcnv3_core(
    input: torch.Tensor,
    offset: torch.Tensor,
    mask: torch.Tensor,
    kernel_h: int,
    kernel_w: int,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    group: int,
    group_channels: int,
    offset_scale: float,
    remove_center: bool = False,
) -> torch.Tensor:
    """DCNv3 sampling (InternImage's ``dcnv3_core_pytorch`` arguments, ``im2col_step`` omitted).

    Args:
        input: ``[N, H, W, group * group_channels]`` (NHWC), floating point.
        offset: ``[N, Ho, Wo, group * P * 2]``, pixel offsets ``(dx, dy)`` per group and point
            (``P = kernel_h * kernel_w - remove_center``).
        mask: ``[N, Ho, Wo, group * P]``, the point weights, used as given (InternImage's
            layer softmax-normalises them over the ``P`` points before the core; :class:`DCNv3` does).
        kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w: ints.
        group, group_channels: the channel split.
        offset_scale: multiplies the kernel spread and the offsets.
        remove_center: drop the kernel's centre point (square odd kernels).

    Returns:
        ``[N, Ho, Wo, group * group_channels]`` with ``Ho = (H + 2 pad_h - dilation_h (kernel_h - 1) - 1)
        // stride_h + 1`` (``Wo`` likewise); the offset and mask must have that size.

    Raises:
        ValueError: a channel count other than ``group * group_channels``, or ``remove_center``
            with a kernel that is not square and odd.
    """
    points = kernel_points(kernel_h, kernel_w, dilation_h, dilation_w, remove_center)
    N, H, W, C = input.shape
    if group * group_channels != C:
        raise ValueError(f"DCNv3: input has {C} channels but group * group_channels = {group * group_channels}")
    P = len(points)
    x = F.pad(input, (0, 0, pad_w, pad_w, pad_h, pad_h))  # NHWC: (C, W, H) pairs
    Hp, Wp = x.shape[1], x.shape[2]
    Ho = (H + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    Wo = (W + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    dtype = input.dtype
    # Pixel position of each output's kernel centre in the padded map. The aranges count in float32 and are cast
    # (the same values: arange rounds each index once either way): the TorchScript exporter's Range of a float16
    # arange fails ("tensor does not have a device", torch 2.14.1: FlashInternImage with --dtype float16).
    cx = torch.arange(Wo, dtype=torch.float32).to(dtype) * stride_w + dilation_w * (kernel_w - 1) // 2
    cy = torch.arange(Ho, dtype=torch.float32).to(dtype) * stride_h + dilation_h * (kernel_h - 1) // 2
    # Every tensor stays at rank <= 5 (Core ML's limit): groups and points share one axis, index g * P + p.
    spread = torch.tensor(points, dtype=dtype).repeat(group, 1)  # [G * P, 2]
    off = offset.reshape(N, Ho, Wo, group * P, 2)
    delta = (spread + off) * offset_scale  # [N, Ho, Wo, G * P, 2]
    px = delta[..., 0] + cx.reshape(1, 1, Wo, 1)
    py = delta[..., 1] + cy.reshape(1, Ho, 1, 1)
    # grid_sample's align_corners=False normalisation: pixel p <-> (2p + 1) / size - 1.
    grid = torch.stack(((2 * px + 1) / Wp - 1, (2 * py + 1) / Hp - 1), dim=-1)
    if wants("batch 1"):  # ncnn (a target's graph form, read while the exporter traces)
        return _groups_apart(x, grid, mask, group, group_channels, P).reshape(N, Ho, Wo, C)
    grid = grid.reshape(N, Ho * Wo, group, P, 2).permute(0, 2, 1, 3, 4).reshape(N * group, Ho * Wo, P, 2)
    value = x.reshape(N, Hp * Wp, group, group_channels).permute(0, 2, 3, 1)
    value = value.reshape(N * group, group_channels, Hp, Wp)
    sampled = F.grid_sample(value, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    weight = mask.reshape(N, Ho * Wo, group, P).permute(0, 2, 1, 3).reshape(N * group, 1, Ho * Wo, P)
    out = (sampled * weight).sum(-1)  # [N * G, group_channels, Ho * Wo]
    return out.reshape(N, C, Ho * Wo).transpose(1, 2).reshape(N, Ho, Wo, C)


def _groups_apart(x: torch.Tensor, grid: torch.Tensor, mask: torch.Tensor, group: int, group_channels: int, P: int):
    """:func:`dcnv3_core`'s sampling with one ``F.grid_sample`` per group over the model's batch: ``[N, Ho*Wo, C]``.

    The target form ``"batch 1"`` (:mod:`deform_onnx.builder.forms`, ncnn): the folded form samples
    ``[N * group, group_channels, Hp, Wp]``, a batch ncnn's GridSample has no axis for (target ncnn refused
    FlashInternImage's DCNv4, rule ``GridSample batch 1``). Each group's points are weighted and summed by a
    ``MatMul`` with a column of ones: pnnx 20261020 -> ncnn 1.0.20261020 returned the unreduced
    ``[1, 4, 16, 9]`` for ``sum(-1)`` of the weighted samples (measured here), the MatMul within 7.2e-7. The
    groups' channels are concatenated in the folded form's order (channel ``g * group_channels + k``).
    """
    N, Hp, Wp, C = x.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    value = x.reshape(N, Hp * Wp, C).transpose(1, 2).reshape(N, C, Hp, Wp)
    grid = grid.reshape(N, Ho * Wo, group, P, 2)
    weight = mask.reshape(N, Ho * Wo, group, P)
    ones = torch.ones(P, 1, dtype=x.dtype)
    outs = []
    for g in range(group):
        value_g = value[:, g * group_channels : (g + 1) * group_channels]
        sampled = F.grid_sample(value_g, grid[:, :, g], mode="bilinear", padding_mode="zeros", align_corners=False)
        summed = torch.matmul(sampled * weight[:, :, g].unsqueeze(1), ones)  # [N, group_channels, Ho * Wo, 1]
        outs.append(summed.reshape(N, group_channels, Ho * Wo))
    return torch.cat(outs, dim=1).transpose(1, 2)


def dcnv4_core(
    input: torch.Tensor,
    offset_mask: torch.Tensor,
    kernel_h: int,
    kernel_w: int,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    group: int,
    group_channels: int,
    offset_scale: float,
    remove_center: bool = False,
    softmax: bool = False,
) -> torch.Tensor:
    """DCNv4 sampling: DCNv3's, with offsets and mask in one tensor and the mask used unnormalised by default.

    Source: Xiong et al., "Efficient Deformable ConvNets: Rethinking Dynamic and Sparse Operator
    for Vision Applications" (CVPR 2024); OpenGVLab/DCNv4, ``DCNv4_op/src/cuda/dcnv4_im2col_cuda.cuh``
    (``forward_kernel_dcn_reg``): the same positions and bilinear rule as DCNv3; per output pixel the
    group ``g`` reads ``offset_mask[..., g*P*3 : g*P*3 + 2P]`` as the ``(dx, dy)`` pairs and the next
    ``P`` entries as the point weights, softmax-normalised only when ``softmax`` is set.

    Args:
        input: ``[N, H, W, group * group_channels]`` (NHWC).
        offset_mask: ``[N, Ho, Wo, D]`` with ``D >= group * P * 3`` (DCNv4's layer pads ``D`` to a
            multiple of 8; entries past ``group * P * 3`` are ignored).
        the rest: as :func:`dcnv3_core`.

    Returns:
        ``[N, Ho, Wo, group * group_channels]``.

    Raises:
        ValueError: ``offset_mask`` narrower than ``group * P * 3``; as :func:`dcnv3_core`.
    """
    P = len(kernel_points(kernel_h, kernel_w, dilation_h, dilation_w, remove_center))
    N, Ho, Wo, D = offset_mask.shape
    if group * P * 3 > D:
        raise ValueError(f"DCNv4: offset_mask has {D} channels, fewer than group * points * 3 = {group * P * 3}")
    packed = offset_mask[..., : group * P * 3].reshape(N, Ho, Wo, group, 3 * P)
    offset = packed[..., : 2 * P].reshape(N, Ho, Wo, group * P * 2)
    mask = packed[..., 2 * P :]
    if softmax:
        mask = F.softmax(mask, dim=-1)
    return dcnv3_core(
        input,
        offset,
        mask.reshape(N, Ho, Wo, group * P),
        kernel_h,
        kernel_w,
        stride_h,
        stride_w,
        pad_h,
        pad_w,
        dilation_h,
        dilation_w,
        group,
        group_channels,
        offset_scale,
        remove_center,
    )


class DCNv3(nn.Module):
    """InternImage's DCNv3 layer: ``[N, H, W, C] -> [N, Ho, Wo, C]`` (NHWC), softmax-normalised mask.

    ``input_proj`` (Linear), a depthwise ``dw_kernel_size`` convolution + LayerNorm + GELU
    predicting, per pixel, the offsets (Linear, ``group * P * 2``) and the mask logits
    (Linear, ``group * P``, softmax over the ``P`` points of each group), :func:`dcnv3_core`,
    ``output_proj`` (Linear). InternImage's ``center_feature_scale`` option is not included.
    The depthwise convolution runs at ``stride`` so the offsets come out at the output size
    (InternImage uses stride 1; then both sizes agree for any kernel).

    Raises:
        ValueError: ``channels`` not divisible by ``group``; ``stride > 1`` where the depthwise
            convolution's output size differs from the deformable one (use ``dw_kernel_size =
            kernel_size``, ``pad = (kernel_size - 1) // 2``, ``dilation = 1``); see :func:`kernel_points`.
    """

    def __init__(
        self,
        channels: int = 64,
        kernel_size: int = 3,
        stride: int = 1,
        pad: int = 1,
        dilation: int = 1,
        group: int = 4,
        offset_scale: float = 1.0,
        remove_center: bool = False,
        dw_kernel_size: int | None = None,
    ):
        super().__init__()
        if channels % group:
            raise ValueError(f"DCNv3: channels {channels} must be divisible by group {group}")
        dw = dw_kernel_size or kernel_size
        if stride > 1 and not (dw == kernel_size and pad == (kernel_size - 1) // 2 and dilation == 1):
            raise ValueError(
                "DCNv3 with stride > 1 needs dw_kernel_size = kernel_size, pad = (kernel_size - 1) // 2 and "
                "dilation = 1 (offsets must come out at the output size)"
            )
        self.points = len(kernel_points(kernel_size, kernel_size, dilation, dilation, remove_center))
        self.channels, self.kernel_size, self.stride = channels, kernel_size, stride
        self.pad, self.dilation = pad, dilation
        self.group, self.group_channels = group, channels // group
        self.offset_scale, self.remove_center = offset_scale, remove_center
        self.dw_conv = nn.Conv2d(channels, channels, dw, stride=stride, padding=(dw - 1) // 2, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.offset = nn.Linear(channels, group * self.points * 2)
        self.mask = nn.Linear(channels, group * self.points)
        self.input_proj = nn.Linear(channels, channels)
        self.output_proj = nn.Linear(channels, channels)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """``[N, H, W, C] -> [N, H, W, C]`` (channels last, as InternImage's layer)."""
        N = input.shape[0]
        x = self.input_proj(input)
        feat = F.gelu(self.norm(self.dw_conv(input.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)))
        offset = self.offset(feat)
        Ho, Wo = feat.shape[1], feat.shape[2]
        mask = F.softmax(self.mask(feat).reshape(N, Ho, Wo, self.group, self.points), dim=-1)
        x = dcnv3_core(
            x,
            offset,
            mask.reshape(N, Ho, Wo, self.group * self.points),
            self.kernel_size,
            self.kernel_size,
            self.stride,
            self.stride,
            self.pad,
            self.pad,
            self.dilation,
            self.dilation,
            self.group,
            self.group_channels,
            self.offset_scale,
            self.remove_center,
        )
        return self.output_proj(x)
