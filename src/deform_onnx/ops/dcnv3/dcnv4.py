"""FlashInternImage's DCNv4 layer in plain PyTorch, with the parameter names of OpenGVLab/DCNv4's module.

Source: Xiong et al., "Efficient Deformable ConvNets: Rethinking Dynamic and Sparse Operator for Vision
Applications" (CVPR 2024); OpenGVLab/DCNv4 ``DCNv4_op/DCNv4/modules/dcnv4.py`` (``DCNv4``). That module calls
``DCNv4Function.apply``, a CUDA extension with no CPU kernel and no ONNX symbolic, so a model built on it can
neither run on a CPU nor export. :class:`DCNv4` here has the same constructor arguments and the same
``state_dict`` keys (``offset_mask``, ``offset_mask_dw``, ``value_proj``, ``output_proj``,
``center_feature_scale_proj_*``), and samples with :func:`~deform_onnx.ops.dcnv3.dcnv4_core` (one
``F.grid_sample``): swap the module class, load the checkpoint, and the model exports with
:func:`deform_onnx.export` at every opset the ``grid_sample`` lowering serves (GridSample from 16, gather
from 11) and to the torch.export formats.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .lower import kernel_points
from .reference import dcnv4_core

__all__ = ["DCNv4"]


class DCNv4(nn.Module):
    """DCNv4 layer: ``[N, L, C] -> [N, L, C]`` with ``L = H * W`` (tokens, as FlashInternImage passes them).

    ``value_proj`` (Linear; skipped with ``without_pointwise``), an optional depthwise ``dw_kernel_size``
    convolution, ``offset_mask`` (Linear, ``ceil(3 * group * P / 8) * 8`` outputs: the offsets and the
    *unnormalised* point weights of each group, padded to a multiple of 8 as the CUDA kernel reads them,
    ``P = kernel_size**2 - remove_center``), :func:`dcnv4_core`, the optional ``center_feature_scale``
    blend, and ``output_proj`` (Linear; skipped with ``without_pointwise``).

    Args:
        channels: ``C``; divisible by ``group``.
        kernel_size, stride, pad, dilation: the sampling kernel (square, as DCNv4's module).
        group: channel groups, each with its own offsets.
        offset_scale: multiplies the kernel spread and the offsets.
        dw_kernel_size: a depthwise convolution before ``offset_mask`` (InternImage-H/G); ``None``: none.
        center_feature_scale: blend the output with the projected input by a learnt per-group gate.
        remove_center: drop the kernel's centre point (odd square kernels).
        output_bias: ``output_proj`` has a bias.
        without_pointwise: no ``value_proj`` / ``output_proj`` (FlashInternImage's detection heads).

    Unlike the CUDA module, ``channels // group`` need not be a multiple of 16 (a speed rule of the kernel),
    and ``stride > 1`` is refused: DCNv4's own module predicts the offsets at the input size, so its output
    and offset sizes only agree at stride 1.

    Raises:
        ValueError: ``channels`` not divisible by ``group``; ``stride != 1``; see :func:`kernel_points`.
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
        dw_kernel_size: int | None = None,
        center_feature_scale: bool = False,
        remove_center: bool = False,
        output_bias: bool = True,
        without_pointwise: bool = False,
    ):
        super().__init__()
        if channels % group:
            raise ValueError(f"DCNv4: channels {channels} must be divisible by group {group}")
        if stride != 1:
            raise ValueError(f"DCNv4: stride {stride} is not supported; DCNv4 predicts its offsets at stride 1")
        if 2 * pad != dilation * (kernel_size - 1):
            raise ValueError(
                f"DCNv4: pad {pad} must keep the map size (pad = dilation * (kernel_size - 1) / 2): the offsets "
                "are predicted at the input size"
            )
        points = len(kernel_points(kernel_size, kernel_size, dilation, dilation, remove_center))
        self.channels, self.kernel_size, self.stride, self.pad, self.dilation = (
            channels,
            kernel_size,
            stride,
            pad,
            dilation,
        )
        self.group, self.group_channels, self.offset_scale = group, channels // group, offset_scale
        self.dw_kernel_size, self.center_feature_scale = dw_kernel_size, center_feature_scale
        self.remove_center, self.without_pointwise = int(remove_center), without_pointwise
        self.K = group * points
        if dw_kernel_size is not None:
            self.offset_mask_dw = nn.Conv2d(
                channels, channels, dw_kernel_size, padding=(dw_kernel_size - 1) // 2, groups=channels
            )
        self.offset_mask = nn.Linear(channels, int(math.ceil(self.K * 3 / 8) * 8))
        if not without_pointwise:
            self.value_proj = nn.Linear(channels, channels)
            self.output_proj = nn.Linear(channels, channels, bias=output_bias)
        if center_feature_scale:
            self.center_feature_scale_proj_weight = nn.Parameter(torch.zeros(group, channels))
            self.center_feature_scale_proj_bias = nn.Parameter(torch.zeros(group))

    def forward(self, input: torch.Tensor, shape: tuple[int, int] | None = None) -> torch.Tensor:
        """``[N, L, C] -> [N, L, C]``; ``shape`` is ``(H, W)`` with ``H * W = L`` (default: a square map)."""
        N, L, C = input.shape
        if shape is None:
            H = W = int(L**0.5)
        else:
            H, W = shape
        x = input if self.without_pointwise else self.value_proj(input)
        x = x.reshape(N, H, W, -1)
        if self.dw_kernel_size is not None:
            feat = self.offset_mask_dw(input.reshape(N, H, W, C).permute(0, 3, 1, 2))
            feat = feat.permute(0, 2, 3, 1).reshape(N, L, C)
        else:
            feat = input
        offset_mask = self.offset_mask(feat).reshape(N, H, W, -1)
        x_proj = x
        x = dcnv4_core(
            x,
            offset_mask,
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
            bool(self.remove_center),
        )
        if self.center_feature_scale:
            gate = F.linear(x, self.center_feature_scale_proj_weight, self.center_feature_scale_proj_bias).sigmoid()
            gate = gate[..., None].expand(N, H, W, self.group, self.group_channels).reshape(N, H, W, C)
            x = x * (1 - gate) + x_proj * gate
        x = x.reshape(N, L, -1)
        return x if self.without_pointwise else self.output_proj(x)
