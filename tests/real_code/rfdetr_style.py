"""RF-DETR style decoder, written as roboflow/rf-detr writes it (``rfdetr/models/transformer.py``,
``rfdetr/models/ops/modules/ms_deform_attn.py``, ``rfdetr/models/ops/functions/ms_deform_attn_func.py``).

``Decoder`` is ``Transformer.forward``'s decoder half (no two-stage, no masks, export mode) with one
``TransformerDecoderLayer``: self-attention, MSDeformAttn cross-attention over the levels, FFN.
``spatial_shapes`` is built as version 1.4.1 builds it (``torch.as_tensor`` of the maps' ``(h, w)``) or, with
``shape_as_tensor=True``, as another release builds it
(``torch.stack([torch._shape_as_tensor(src)[2:4] for src in srcs])``).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
    """ "for debug and test only, need to use cuda version instead" """
    # B, n_heads, head_dim, N
    B, n_heads, head_dim, _ = value.shape
    _, Len_q, n_heads, L, P, _ = sampling_locations.shape
    value_list = value.split([H * W for H, W in value_spatial_shapes], dim=3)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for lid_, (H, W) in enumerate(value_spatial_shapes):
        # B, n_heads, head_dim, H, W
        value_l_ = value_list[lid_].view(B * n_heads, head_dim, H, W)
        # B, Len_q, n_heads, P, 2 -> B, n_heads, Len_q, P, 2 -> B*n_heads, Len_q, P, 2
        sampling_grid_l_ = sampling_grids[:, :, :, lid_].transpose(1, 2).flatten(0, 1)
        # B*n_heads, head_dim, Len_q, P
        sampling_value_l_ = F.grid_sample(
            value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        sampling_value_list.append(sampling_value_l_)
    # (B, Len_q, n_heads, L * P) -> (B, n_heads, Len_q, L, P) -> (B*n_heads, 1, Len_q, L*P)
    attention_weights = attention_weights.transpose(1, 2).reshape(B * n_heads, 1, Len_q, L * P)
    # B*n_heads, head_dim, Len_q, L*P
    sampling_value_list = torch.stack(sampling_value_list, dim=-2).flatten(-2)
    output = (sampling_value_list * attention_weights).sum(-1).view(B, n_heads * head_dim, Len_q)
    return output.transpose(1, 2).contiguous()


class MSDeformAttn(nn.Module):
    """Multi-Scale Deformable Attention Module"""

    def __init__(self, d_model=256, n_levels=4, n_heads=8, n_points=4):
        super().__init__()
        self.im2col_step = 64
        self.d_model = d_model
        self.n_levels = n_levels
        self.n_heads = n_heads
        self.n_points = n_points
        self.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self._reset_parameters()
        self._export = False

    def _reset_parameters(self):
        nn.init.constant_(self.sampling_offsets.weight.data, 0.0)
        thetas = torch.arange(self.n_heads, dtype=torch.float32) * (2.0 * math.pi / self.n_heads)
        grid_init = torch.stack([thetas.cos(), thetas.sin()], -1)
        grid_init = (
            (grid_init / grid_init.abs().max(-1, keepdim=True)[0])
            .view(self.n_heads, 1, 1, 2)
            .repeat(1, self.n_levels, self.n_points, 1)
        )
        for i in range(self.n_points):
            grid_init[:, :, i, :] *= i + 1
        with torch.no_grad():
            self.sampling_offsets.bias = nn.Parameter(grid_init.view(-1))
        nn.init.xavier_uniform_(self.value_proj.weight.data)
        nn.init.xavier_uniform_(self.output_proj.weight.data)

    def forward(
        self,
        query,
        reference_points,
        input_flatten,
        input_spatial_shapes,
        input_level_start_index,
        input_padding_mask=None,
    ):
        N, Len_q, _ = query.shape
        N, Len_in, _ = input_flatten.shape
        assert (input_spatial_shapes[:, 0] * input_spatial_shapes[:, 1]).sum() == Len_in

        value = self.value_proj(input_flatten)
        if input_padding_mask is not None:
            value = value.masked_fill(input_padding_mask[..., None], float(0))

        sampling_offsets = self.sampling_offsets(query).view(N, Len_q, self.n_heads, self.n_levels, self.n_points, 2)
        attention_weights = self.attention_weights(query).view(N, Len_q, self.n_heads, self.n_levels * self.n_points)

        # N, Len_q, n_heads, n_levels, n_points, 2
        if reference_points.shape[-1] == 2:
            offset_normalizer = torch.stack([input_spatial_shapes[..., 1], input_spatial_shapes[..., 0]], -1)
            sampling_locations = (
                reference_points[:, :, None, :, None, :]
                + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
            )
        elif reference_points.shape[-1] == 4:
            sampling_locations = (
                reference_points[:, :, None, :, None, :2]
                + sampling_offsets / self.n_points * reference_points[:, :, None, :, None, 2:] * 0.5
            )
        else:
            raise ValueError(
                f"Last dim of reference_points must be 2 or 4, but get {reference_points.shape[-1]} instead."
            )
        attention_weights = F.softmax(attention_weights, -1)

        value = value.transpose(1, 2).contiguous().view(N, self.n_heads, self.d_model // self.n_heads, Len_in)
        output = ms_deform_attn_core_pytorch(value, input_spatial_shapes, sampling_locations, attention_weights)
        output = self.output_proj(output)
        return output


class MLP(nn.Module):
    """Very simple multi-layer perceptron (also called FFN)"""

    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


def gen_sineembed_for_position(pos_tensor, dim=128):
    scale = 2 * math.pi
    dim_t = torch.arange(dim, dtype=pos_tensor.dtype, device=pos_tensor.device)
    dim_t = 10000 ** (2 * (dim_t // 2) / dim)
    x_embed = pos_tensor[:, :, 0] * scale
    y_embed = pos_tensor[:, :, 1] * scale
    pos_x = x_embed[:, :, None] / dim_t
    pos_y = y_embed[:, :, None] / dim_t
    pos_x = torch.stack((pos_x[:, :, 0::2].sin(), pos_x[:, :, 1::2].cos()), dim=3).flatten(2)
    pos_y = torch.stack((pos_y[:, :, 0::2].sin(), pos_y[:, :, 1::2].cos()), dim=3).flatten(2)
    w_embed = pos_tensor[:, :, 2] * scale
    pos_w = w_embed[:, :, None] / dim_t
    pos_w = torch.stack((pos_w[:, :, 0::2].sin(), pos_w[:, :, 1::2].cos()), dim=3).flatten(2)
    h_embed = pos_tensor[:, :, 3] * scale
    pos_h = h_embed[:, :, None] / dim_t
    pos_h = torch.stack((pos_h[:, :, 0::2].sin(), pos_h[:, :, 1::2].cos()), dim=3).flatten(2)
    return torch.cat((pos_y, pos_x, pos_w, pos_h), dim=2)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, sa_nhead, ca_nhead, dim_feedforward=2048, num_feature_levels=4, dec_n_points=4):
        super().__init__()
        # Decoder Self-Attention
        self.self_attn = nn.MultiheadAttention(embed_dim=d_model, num_heads=sa_nhead, dropout=0.0, batch_first=True)
        self.norm1 = nn.LayerNorm(d_model)
        # Decoder Cross-Attention
        self.cross_attn = MSDeformAttn(d_model, n_levels=num_feature_levels, n_heads=ca_nhead, n_points=dec_n_points)
        # Implementation of Feedforward model
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    @staticmethod
    def with_pos_embed(tensor, pos):
        return tensor if pos is None else tensor + pos

    def forward(self, tgt, memory, query_pos=None, reference_points=None, spatial_shapes=None, level_start_index=None):
        # ========== Begin of Self-Attention =============
        q = k = tgt + query_pos
        v = tgt
        tgt2 = self.self_attn(q, k, v, need_weights=False)[0]
        tgt = self.norm1(tgt + tgt2)
        # ========== Begin of Cross-Attention =============
        tgt2 = self.cross_attn(
            self.with_pos_embed(tgt, query_pos), reference_points, memory, spatial_shapes, level_start_index, None
        )
        tgt = self.norm2(tgt + tgt2)
        tgt2 = self.linear2(F.relu(self.linear1(tgt)))
        return self.norm3(tgt + tgt2)


class Decoder(nn.Module):
    """``Transformer.forward`` (export mode, no masks, one decoder layer) on two feature maps.

    Inputs: the maps ``src0``, ``src1`` (``N x d_model x H x W``). Outputs: the decoded queries and their boxes.
    """

    def __init__(self, d_model=16, sa_nhead=2, ca_nhead=2, num_queries=6, levels=2, dec_n_points=2,
                 shape_as_tensor=False):  # fmt: skip
        super().__init__()
        torch.manual_seed(0)
        self.d_model = d_model
        self.shape_as_tensor = shape_as_tensor
        self.layer = TransformerDecoderLayer(d_model, sa_nhead, ca_nhead, 2 * d_model, levels, dec_n_points)
        self.ref_point_head = MLP(2 * d_model, d_model, d_model, 2)
        self.bbox_embed = MLP(d_model, d_model, 4, 3)
        self.level_embed = nn.Parameter(torch.randn(levels, d_model))
        self.refpoint_embed = nn.Embedding(num_queries, 4)
        self.query_feat = nn.Embedding(num_queries, d_model)

    def forward(self, src0, src1):
        srcs = [src0, src1]
        src_flatten = []
        lvl_pos_embed_flatten = []
        spatial_shapes = []
        for lvl, src in enumerate(srcs):
            bs, c, h, w = src.shape
            spatial_shape = (h, w)
            spatial_shapes.append(spatial_shape)
            src = src.flatten(2).transpose(1, 2)  # bs, hw, c
            lvl_pos_embed_flatten.append(self.level_embed[lvl].view(1, 1, -1).expand(bs, h * w, -1))
            src_flatten.append(src)
        memory = torch.cat(src_flatten, 1)  # bs, \sum{hxw}, c
        if self.shape_as_tensor:
            spatial_shapes = torch.stack([torch._shape_as_tensor(src)[2:4] for src in srcs]).to(
                device=srcs[0].device, dtype=torch.long
            )
        else:
            spatial_shapes = torch.as_tensor(spatial_shapes, dtype=torch.long, device=memory.device)
        level_start_index = torch.cat((spatial_shapes.new_zeros((1,)), spatial_shapes.prod(1).cumsum(0)[:-1]))

        bs = memory.shape[0]
        tgt = self.query_feat.weight.unsqueeze(0).repeat(bs, 1, 1)
        refpoints_unsigmoid = self.refpoint_embed.weight.unsqueeze(0).repeat(bs, 1, 1)
        # TransformerDecoder.forward, export mode: get_reference(refpoints_unsigmoid.sigmoid())
        obj_center = refpoints_unsigmoid.sigmoid()[..., :4]
        query_sine_embed = gen_sineembed_for_position(obj_center, self.d_model / 2)
        refpoints_input = obj_center[:, :, None]  # bs, nq, 1, 4
        query_pos = self.ref_point_head(query_sine_embed)
        output = self.layer(
            tgt,
            memory,
            query_pos=query_pos,
            reference_points=refpoints_input,
            spatial_shapes=spatial_shapes,
            level_start_index=level_start_index,
        )
        new_refpoints_unsigmoid = refpoints_unsigmoid + self.bbox_embed(output)
        return output, new_refpoints_unsigmoid.sigmoid()


def example(batch=1, d_model=16, sizes=((4, 4), (2, 2))):
    """The decoder's inputs: one map per level (``batch x d_model x H x W``), seeded."""
    gen = torch.Generator().manual_seed(1)
    return tuple(torch.randn(batch, d_model, h, w, generator=gen) for h, w in sizes)
