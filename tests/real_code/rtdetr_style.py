"""RT-DETR style encoder attention, written as lyuwenyu/RT-DETR writes it, made tiny.

``rtdetr_pytorch/src/zoo/rtdetr/utils.py`` ``deformable_attention_core_func`` (one ``F.grid_sample`` per
level on ``value.split`` of the flattened levels) and ``rtdetr_decoder.py`` ``MSDeformableAttention``
(``torch.tensor(value_spatial_shapes)`` as the offset normaliser, its ``grid_init`` bias). ``Encoder`` is
a conv stem of two levels (strides 2 and 4), flattened and concatenated; each pixel is a query with its own
reference point (Deformable DETR's encoder); the level sizes come from the tensors' shapes. With the
defaults, a 16x16 input gives an 8x8 level of 8 channels per head (C == H == W: the square map onnx2tf
misreads, tests/targets/test_tflite_msda.py).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def deformable_attention_core_func(value, value_spatial_shapes, sampling_locations, attention_weights):
    bs, _, n_head, c = value.shape
    _, Len_q, _, n_levels, n_points, _ = sampling_locations.shape
    split_shape = [h * w for h, w in value_spatial_shapes]
    value_list = value.split(split_shape, dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level, (h, w) in enumerate(value_spatial_shapes):
        # N_, H_*W_, M_, D_ -> N_, H_*W_, M_*D_ -> N_, M_*D_, H_*W_ -> N_*M_, D_, H_, W_
        value_l_ = value_list[level].flatten(2).permute(0, 2, 1).reshape(bs * n_head, c, h, w)
        # N_, Lq_, M_, P_, 2 -> N_, M_, Lq_, P_, 2 -> N_*M_, Lq_, P_, 2
        sampling_grid_l_ = sampling_grids[:, :, :, level].permute(0, 2, 1, 3, 4).flatten(0, 1)
        sampling_value_l_ = F.grid_sample(
            value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        sampling_value_list.append(sampling_value_l_)
    # (N_, Lq_, M_, L_, P_) -> (N_, M_, Lq_, L_, P_) -> (N_*M_, 1, Lq_, L_*P_)
    attention_weights = attention_weights.permute(0, 2, 1, 3, 4).reshape(bs * n_head, 1, Len_q, n_levels * n_points)
    output = (
        (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights)
        .sum(-1)
        .reshape(bs, n_head * c, Len_q)
    )
    return output.permute(0, 2, 1)


class MSDeformableAttention(nn.Module):
    def __init__(self, embed_dim=32, num_heads=4, num_levels=2, num_points=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_levels = num_levels
        self.num_points = num_points
        self.total_points = num_heads * num_levels * num_points
        self.head_dim = embed_dim // num_heads
        self.sampling_offsets = nn.Linear(embed_dim, self.total_points * 2)
        self.attention_weights = nn.Linear(embed_dim, self.total_points)
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.output_proj = nn.Linear(embed_dim, embed_dim)
        self.ms_deformable_attn_core = deformable_attention_core_func
        self._reset_parameters()

    def _reset_parameters(self):
        nn.init.normal_(self.sampling_offsets.weight, std=0.02)  # RT-DETR: constant 0; random here to move points
        thetas = torch.arange(self.num_heads, dtype=torch.float32) * (2.0 * math.pi / self.num_heads)
        grid_init = torch.stack([thetas.cos(), thetas.sin()], -1)
        grid_init = grid_init / grid_init.abs().max(-1, keepdim=True).values
        grid_init = grid_init.reshape(self.num_heads, 1, 1, 2).tile([1, self.num_levels, self.num_points, 1])
        scaling = torch.arange(1, self.num_points + 1, dtype=torch.float32).reshape(1, 1, -1, 1)
        grid_init *= scaling
        self.sampling_offsets.bias.data[...] = grid_init.flatten()

    def forward(self, query, reference_points, value, value_spatial_shapes):
        bs, Len_q = query.shape[:2]
        Len_v = value.shape[1]
        value = self.value_proj(value)
        value = value.reshape(bs, Len_v, self.num_heads, self.head_dim)
        sampling_offsets = self.sampling_offsets(query).reshape(
            bs, Len_q, self.num_heads, self.num_levels, self.num_points, 2
        )
        attention_weights = self.attention_weights(query).reshape(
            bs, Len_q, self.num_heads, self.num_levels * self.num_points
        )
        attention_weights = F.softmax(attention_weights, dim=-1).reshape(
            bs, Len_q, self.num_heads, self.num_levels, self.num_points
        )
        offset_normalizer = torch.tensor(value_spatial_shapes)
        offset_normalizer = offset_normalizer.flip([1]).reshape(1, 1, 1, self.num_levels, 1, 2)
        sampling_locations = (
            reference_points.reshape(bs, Len_q, 1, self.num_levels, 1, 2) + sampling_offsets / offset_normalizer
        )
        output = self.ms_deformable_attn_core(value, value_spatial_shapes, sampling_locations, attention_weights)
        return self.output_proj(output)


class Encoder(nn.Module):
    """``(N, 3, H, W)`` -> ``(N, H/2*W/2 + H/4*W/4, 32)``: two levels, one deformable attention over both."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, 2, 1)
        self.down = nn.Conv2d(32, 32, 3, 2, 1)
        self.attn = MSDeformableAttention()

    def forward(self, x):
        f1 = self.stem(x)
        f2 = self.down(f1)
        shapes = [tuple(f1.shape[2:]), tuple(f2.shape[2:])]
        src = torch.cat([f1.flatten(2).transpose(1, 2), f2.flatten(2).transpose(1, 2)], 1)
        refs = []
        for h, w in shapes:
            ry, rx = torch.meshgrid(
                torch.linspace(0.5, h - 0.5, h) / h, torch.linspace(0.5, w - 0.5, w) / w, indexing="ij"
            )
            refs.append(torch.stack((rx.reshape(-1), ry.reshape(-1)), -1))
        ref = torch.cat(refs, 0)[None, :, None].expand(x.shape[0], -1, len(shapes), -1)
        return self.attn(src, ref, src, shapes)
