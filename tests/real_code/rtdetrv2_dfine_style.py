"""RT-DETRv2's and D-FINE's multi-scale deformable attention, written the way lyuwenyu/RT-DETR (``rtdetrv2_pytorch/
src/zoo/rtdetr/rtdetrv2_decoder.py``, ``utils.py``) and Peterande/D-FINE (``src/zoo/dfine/dfine_decoder.py``,
``dfine_utils.py``) write them.

RT-DETRv2: ``MSDeformableAttention(method='default'|'discrete')`` with ``num_points_list`` and a
``num_points_scale`` buffer, 4-d reference boxes, ``deformable_attention_core_func_v2``: value split by
``[h * w for h, w in value_spatial_shapes]``; ``default`` samples each level with ``F.grid_sample(..., align_corners=
False)``; ``discrete`` rounds ``sampling_grid_l * torch.tensor([[w, h]]) + 0.5`` to int64, clamps it to ``h - 1``
("FIX ME? for rectangle input") and gathers ``value_l[s_idx, :, y, x]`` by advanced indexing. D-FINE: the value is
split ahead (``value_op``: ``[bs, n_head, c, L]`` split by level), the core reads ``bs, n_head, c, _ =
value[0].shape``, spatial shapes a list of ``[h, w]`` lists. A conv stem makes the three levels from an image, so
the level sizes follow the input. Tiny sizes, random weights.
"""

import functools

import torch
import torch.nn.functional as F
from torch import nn


def deformable_attention_core_func_v2(
    value, value_spatial_shapes, sampling_locations, attention_weights, num_points_list, method="default"
):
    """RT-DETRv2's core.

    Args:
        value (Tensor): [bs, value_length, n_head, c]
        value_spatial_shapes (Tensor|List): [n_levels, 2]
        sampling_locations (Tensor): [bs, query_length, n_head, n_levels * n_points, 2]
        attention_weights (Tensor): [bs, query_length, n_head, n_levels * n_points]

    Returns:
        output (Tensor): [bs, Length_{query}, C]
    """
    bs, _, n_head, c = value.shape
    _, Len_q, _, _, _ = sampling_locations.shape

    split_shape = [h * w for h, w in value_spatial_shapes]
    value_list = value.permute(0, 2, 3, 1).flatten(0, 1).split(split_shape, dim=-1)

    # sampling_offsets [8, 480, 8, 12, 2]
    if method == "default":
        sampling_grids = 2 * sampling_locations - 1

    elif method == "discrete":
        sampling_grids = sampling_locations

    sampling_grids = sampling_grids.permute(0, 2, 1, 3, 4).flatten(0, 1)
    sampling_locations_list = sampling_grids.split(num_points_list, dim=-2)

    sampling_value_list = []
    for level, (h, w) in enumerate(value_spatial_shapes):
        value_l = value_list[level].reshape(bs * n_head, c, h, w)
        sampling_grid_l: torch.Tensor = sampling_locations_list[level]

        if method == "default":
            sampling_value_l = F.grid_sample(
                value_l, sampling_grid_l, mode="bilinear", padding_mode="zeros", align_corners=False
            )

        elif method == "discrete":
            # n * m, seq, n, 2
            sampling_coord = (sampling_grid_l * torch.tensor([[w, h]], device=value.device) + 0.5).to(torch.int64)

            # FIX ME? for rectangle input
            sampling_coord = sampling_coord.clamp(0, h - 1)
            sampling_coord = sampling_coord.reshape(bs * n_head, Len_q * num_points_list[level], 2)

            s_idx = (
                torch.arange(sampling_coord.shape[0], device=value.device)
                .unsqueeze(-1)
                .repeat(1, sampling_coord.shape[1])
            )
            sampling_value_l: torch.Tensor = value_l[s_idx, :, sampling_coord[..., 1], sampling_coord[..., 0]]  # n l c

            sampling_value_l = sampling_value_l.permute(0, 2, 1).reshape(bs * n_head, c, Len_q, num_points_list[level])

        sampling_value_list.append(sampling_value_l)

    attn_weights = attention_weights.permute(0, 2, 1, 3).reshape(bs * n_head, 1, Len_q, sum(num_points_list))
    weighted_sample_locs = torch.concat(sampling_value_list, dim=-1) * attn_weights
    output = weighted_sample_locs.sum(-1).reshape(bs, n_head * c, Len_q)

    return output.permute(0, 2, 1)


def dfine_deformable_attention_core_func_v2(
    value, value_spatial_shapes, sampling_locations, attention_weights, num_points_list, method="default"
):
    """D-FINE's core: ``value`` is a list of ``[bs, n_head, c, h*w]`` per level."""
    bs, n_head, c, _ = value[0].shape
    _, Len_q, _, _, _ = sampling_locations.shape

    # sampling_offsets [8, 480, 8, 12, 2]
    if method == "default":
        sampling_grids = 2 * sampling_locations - 1
    elif method == "discrete":
        sampling_grids = sampling_locations

    sampling_grids = sampling_grids.permute(0, 2, 1, 3, 4).flatten(0, 1)
    sampling_locations_list = sampling_grids.split(num_points_list, dim=-2)

    sampling_value_list = []
    for level, (h, w) in enumerate(value_spatial_shapes):
        value_l = value[level].reshape(bs * n_head, c, h, w)
        sampling_grid_l: torch.Tensor = sampling_locations_list[level]

        if method == "default":
            sampling_value_l = F.grid_sample(
                value_l, sampling_grid_l, mode="bilinear", padding_mode="zeros", align_corners=False
            )
        elif method == "discrete":
            # n * m, seq, n, 2
            sampling_coord = (sampling_grid_l * torch.tensor([[w, h]], device=value_l.device) + 0.5).to(torch.int64)

            # FIX ME? for rectangle input
            sampling_coord = sampling_coord.clamp(0, h - 1)
            sampling_coord = sampling_coord.reshape(bs * n_head, Len_q * num_points_list[level], 2)

            s_idx = (
                torch.arange(sampling_coord.shape[0], device=value_l.device)
                .unsqueeze(-1)
                .repeat(1, sampling_coord.shape[1])
            )
            sampling_value_l: torch.Tensor = value_l[s_idx, :, sampling_coord[..., 1], sampling_coord[..., 0]]  # n l c

            sampling_value_l = sampling_value_l.permute(0, 2, 1).reshape(bs * n_head, c, Len_q, num_points_list[level])

        sampling_value_list.append(sampling_value_l)

    attn_weights = attention_weights.permute(0, 2, 1, 3).reshape(bs * n_head, 1, Len_q, sum(num_points_list))
    weighted_sample_locs = torch.concat(sampling_value_list, dim=-1) * attn_weights
    output = weighted_sample_locs.sum(-1).reshape(bs, n_head * c, Len_q)

    return output.permute(0, 2, 1)


class MSDeformableAttention(nn.Module):
    def __init__(
        self, embed_dim=32, num_heads=4, num_levels=3, num_points=4, method="default", offset_scale=0.5, dfine=False
    ):
        """Multi-Scale Deformable Attention"""
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_levels = num_levels
        self.offset_scale = offset_scale

        if isinstance(num_points, list):
            assert len(num_points) == num_levels, ""
            num_points_list = num_points
        else:
            num_points_list = [num_points for _ in range(num_levels)]

        self.num_points_list = num_points_list

        num_points_scale = [1 / n for n in num_points_list for _ in range(n)]
        self.register_buffer("num_points_scale", torch.tensor(num_points_scale, dtype=torch.float32))

        self.total_points = num_heads * sum(num_points_list)
        self.method = method

        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == self.embed_dim, "embed_dim must be divisible by num_heads"

        self.sampling_offsets = nn.Linear(embed_dim, self.total_points * 2)
        self.attention_weights = nn.Linear(embed_dim, self.total_points)
        self.dfine = dfine
        if not dfine:
            self.value_proj = nn.Linear(embed_dim, embed_dim)
            self.output_proj = nn.Linear(embed_dim, embed_dim)

        core = dfine_deformable_attention_core_func_v2 if dfine else deformable_attention_core_func_v2
        self.ms_deformable_attn_core = functools.partial(core, method=self.method)

    def forward(self, query, reference_points, value, value_spatial_shapes, value_mask=None):
        """
        Args:
            query (Tensor): [bs, query_length, C]
            reference_points (Tensor): [bs, query_length, n_levels, 2], range in [0, 1], top-left (0,0),
                bottom-right (1, 1), including padding area
            value (Tensor): [bs, value_length, C] (D-FINE: the list value_op returns)
            value_spatial_shapes (List): [n_levels, 2], [(H_0, W_0), (H_1, W_1), ..., (H_{L-1}, W_{L-1})]

        Returns:
            output (Tensor): [bs, Length_{query}, C]
        """
        bs, Len_q = query.shape[:2]
        if not self.dfine:
            Len_v = value.shape[1]
            value = self.value_proj(value)
            if value_mask is not None:
                value = value * value_mask.to(value.dtype).unsqueeze(-1)
            value = value.reshape(bs, Len_v, self.num_heads, self.head_dim)

        sampling_offsets: torch.Tensor = self.sampling_offsets(query)
        sampling_offsets = sampling_offsets.reshape(bs, Len_q, self.num_heads, sum(self.num_points_list), 2)

        attention_weights = self.attention_weights(query).reshape(bs, Len_q, self.num_heads, sum(self.num_points_list))
        attention_weights = F.softmax(attention_weights, dim=-1).reshape(
            bs, Len_q, self.num_heads, sum(self.num_points_list)
        )

        if reference_points.shape[-1] == 2:
            offset_normalizer = torch.tensor(value_spatial_shapes)
            offset_normalizer = offset_normalizer.flip([1]).reshape(1, 1, 1, self.num_levels, 1, 2)
            sampling_locations = (
                reference_points.reshape(bs, Len_q, 1, self.num_levels, 1, 2) + sampling_offsets / offset_normalizer
            )
        elif reference_points.shape[-1] == 4:
            # reference_points [8, 480, None, 1,  4]
            # sampling_offsets [8, 480, 8,    12, 2]
            num_points_scale = self.num_points_scale.to(dtype=query.dtype).unsqueeze(-1)
            offset = sampling_offsets * num_points_scale * reference_points[:, :, None, :, 2:] * self.offset_scale
            sampling_locations = reference_points[:, :, None, :, :2] + offset
        else:
            raise ValueError(
                f"Last dim of reference_points must be 2 or 4, but get {reference_points.shape[-1]} instead."
            )

        output = self.ms_deformable_attn_core(
            value, value_spatial_shapes, sampling_locations, attention_weights, self.num_points_list
        )

        if not self.dfine:
            output = self.output_proj(output)

        return output


class TinyDecoderLayer(nn.Module):
    """``image [B, 3, H, W]`` -> ``[B, num_queries, C]``: three conv levels (strides 8, 16, 32) flattened to the
    memory as RT-DETR's ``_get_encoder_input`` does (``spatial_shapes.append([h, w])``), fixed query embeddings and
    4-d reference boxes (``sigmoid`` of a learned anchor, ``unsqueeze(2)`` over the levels), one cross-attention."""

    def __init__(self, method="default", dfine=False, dim=32, num_queries=10, num_points=(4, 4, 4), num_heads=4):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 8, stride=8)
        self.down1 = nn.Conv2d(dim, dim, 3, stride=2, padding=1)
        self.down2 = nn.Conv2d(dim, dim, 3, stride=2, padding=1)
        self.query = nn.Parameter(torch.randn(num_queries, dim))
        self.anchor = nn.Parameter(torch.randn(num_queries, 4))
        self.num_head = num_heads
        self.dfine = dfine
        self.cross_attn = MSDeformableAttention(dim, num_heads, 3, list(num_points), method=method, dfine=dfine)

    def value_op(self, memory, memory_spatial_shapes):
        """D-FINE's ``TransformerDecoder.value_op`` without the projection and mask."""
        value = memory.reshape(memory.shape[0], memory.shape[1], self.num_head, -1)
        split_shape = [h * w for h, w in memory_spatial_shapes]
        return value.permute(0, 2, 3, 1).split(split_shape, dim=-1)

    def forward(self, image):
        f0 = self.stem(image)
        f1 = self.down1(torch.relu(f0))
        f2 = self.down2(torch.relu(f1))
        feat_flatten = []
        spatial_shapes = []
        for feat in (f0, f1, f2):
            _, _, h, w = feat.shape
            # [b, c, h, w] -> [b, h*w, c]
            feat_flatten.append(feat.flatten(2).permute(0, 2, 1))
            # [num_levels, 2]
            spatial_shapes.append([h, w])
        memory = torch.concat(feat_flatten, 1)
        bs = memory.shape[0]
        query = self.query.unsqueeze(0).repeat(bs, 1, 1)
        ref = F.sigmoid(self.anchor).unsqueeze(0).repeat(bs, 1, 1).unsqueeze(2)
        value = self.value_op(memory, spatial_shapes) if self.dfine else memory
        return self.cross_attn(query, ref, value, spatial_shapes)


def example(bs=1, h=128, w=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(bs, 3, h, w, generator=g),)
