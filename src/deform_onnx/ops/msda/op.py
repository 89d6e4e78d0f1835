"""``ms_deform_attn``: multi-scale deformable attention as one torch op with one ONNX lowering.

Deformable DETR's pure-PyTorch core (``ms_deform_attn_core_pytorch`` in
``models/ops/functions/ms_deform_attn_func.py``; Zhu et al., "Deformable
DETR", arXiv:2010.04159) exports as one ``grid_sample`` per level, each with
its own split, transposes and a ``[N*M, D, Lq, P]`` intermediate. Calling
:func:`ms_deform_attn` instead records one op, ``deform_onnx::ms_deform_attn``
(a ``torch.library`` custom op; eager: :func:`ms_deform_attn_reference`),
which both exporters translate (``deform_onnx.register()`` /
``translation_table()`` / ``export``) into the fused gather lowering of
:mod:`deform_onnx.ops.msda.lower`: four ``Gather`` + ``MatMul`` over all levels
at once, from opset 11.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: The op's qualified name (TorchScript node kind and ``torch.ops`` path).
OP_NAME = "deform_onnx::ms_deform_attn"


def ms_deform_attn_reference(
    value: Tensor, spatial_shapes, sampling_locations: Tensor, attention_weights: Tensor
) -> Tensor:
    """Deformable DETR's ``ms_deform_attn_core_pytorch``: one ``F.grid_sample`` per level.

    Args:
        value: ``[N, S, M, D]``, ``S = sum(H_l * W_l)``, levels concatenated row-major.
        spatial_shapes: ``[(H_l, W_l), ...]`` (ints, or an int tensor ``[L, 2]``).
        sampling_locations: ``[N, Lq, M, L, P, 2]``, ``(x, y)`` normalised to ``[0, 1]``.
        attention_weights: ``[N, Lq, M, L, P]``.

    Returns:
        ``[N, Lq, M*D]`` in ``value``'s dtype. Samples outside a level are 0
        (bilinear, zero padding, ``align_corners=False``).
    """
    N, _, M, D = value.shape
    _, Lq, _, L, P, _ = sampling_locations.shape
    shapes = [
        (int(h), int(w)) for h, w in (spatial_shapes.tolist() if isinstance(spatial_shapes, Tensor) else spatial_shapes)
    ]
    levels = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    samples = []
    for level, (h, w) in enumerate(shapes):
        v = levels[level].flatten(2).transpose(1, 2).reshape(N * M, D, h, w)
        g = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)  # [N*M, Lq, P, 2]
        samples.append(F.grid_sample(v, g, mode="bilinear", padding_mode="zeros", align_corners=False))
    attn = attention_weights.transpose(1, 2).reshape(N * M, 1, Lq, L * P)
    out = (torch.stack(samples, dim=-2).flatten(-2) * attn).sum(-1).view(N, M * D, Lq)
    return out.transpose(1, 2).contiguous()


@torch.library.custom_op(OP_NAME, mutates_args=())
def ms_deform_attn(
    value: Tensor,
    spatial_shapes: Tensor,
    level_start_index: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> Tensor:
    """Multi-scale deformable attention; the inputs of mmcv's / TensorRT's MSDA kernels, in their order.

    Args:
        value: ``[N, S, M, D]`` float.
        spatial_shapes: ``[L, 2]`` int64/int32, ``(H_l, W_l)`` per level.
        level_start_index: ``[L]`` int, the row of ``value`` where each level starts
            (``cumsum`` of ``H_l*W_l``, starting at 0); the ONNX lowering reads it, eager
            PyTorch assumes levels are packed in order (as every MSDA kernel's callers do).
        sampling_locations: ``[N, Lq, M, L, P, 2]``, ``(x, y)`` in ``[0, 1]``.
        attention_weights: ``[N, Lq, M, L, P]``.

    Returns:
        ``[N, Lq, M*D]``: :func:`ms_deform_attn_reference` in eager mode; exported as the
        fused lowering (:mod:`deform_onnx.ops.msda.lower`).

    Raises:
        ValueError: ``spatial_shapes`` does not add up to ``S``.
    """
    total = int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum())
    if total != value.shape[1]:
        raise ValueError(
            f"ms_deform_attn: spatial_shapes cover {total} pixels but value has {value.shape[1]} rows; "
            "pass the (H, W) of every level in the order they are concatenated"
        )
    return ms_deform_attn_reference(value, spatial_shapes, sampling_locations, attention_weights)


@ms_deform_attn.register_fake
def _(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    N, _, M, D = value.shape
    return value.new_empty((N, sampling_locations.shape[1], M * D))


class MSDeformAttnCore(torch.nn.Module):
    """:func:`ms_deform_attn` with fixed level sizes (buffers ``spatial_shapes`` and ``level_start_index``).

    Args:
        spatial_shapes: ``[(H_l, W_l), ...]``.

    ``forward(value, sampling_locations, attention_weights) -> [N, Lq, M*D]``.
    """

    def __init__(self, spatial_shapes):
        super().__init__()
        shapes = torch.as_tensor([[int(h), int(w)] for h, w in spatial_shapes], dtype=torch.int64)
        self.register_buffer("spatial_shapes", shapes, persistent=False)
        sizes = shapes[:, 0] * shapes[:, 1]
        self.register_buffer(
            "level_start_index", torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]), persistent=False
        )

    def forward(self, value: Tensor, sampling_locations: Tensor, attention_weights: Tensor) -> Tensor:
        """:func:`ms_deform_attn` with the module's level sizes: ``[N, Lq, M*D]``."""
        return ms_deform_attn(value, self.spatial_shapes, self.level_start_index, sampling_locations, attention_weights)


class MSDeformAttnReference(torch.nn.Module):
    """:func:`ms_deform_attn_reference` with fixed level sizes: Deformable DETR's pure-PyTorch core as it
    ships (level sizes are Python ints, one ``grid_sample`` per level), what a plain export sees.

    Args:
        spatial_shapes: ``[(H_l, W_l), ...]``.

    ``forward(value, sampling_locations, attention_weights) -> [N, Lq, M*D]``.
    """

    def __init__(self, spatial_shapes):
        super().__init__()
        self.shapes = [(int(h), int(w)) for h, w in spatial_shapes]

    def forward(self, value: Tensor, sampling_locations: Tensor, attention_weights: Tensor) -> Tensor:
        """:func:`ms_deform_attn_reference` with the module's level sizes: ``[N, Lq, M*D]``."""
        return ms_deform_attn_reference(value, self.shapes, sampling_locations, attention_weights)
