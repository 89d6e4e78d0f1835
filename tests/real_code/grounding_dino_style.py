"""Grounding DINO's image encoder (deformable layers), written as huggingface/transformers'
``modeling_grounding_dino.py`` writes it, run in float16 (``from_pretrained(..., torch_dtype=torch.float16)``)
with ``disable_custom_kernels=True`` (the PyTorch MSDA, the path a CPU or an export takes).

What differs from the Deformable DETR mirror (``deformable_detr_style.py``): ``value.split`` with
``height.item() * width.item()`` of the ``spatial_shapes`` tensor, ``attention_mask=~key_padding_mask`` and
``masked_fill(~attention_mask[..., None], float(0))``, the ``sampling_offsets.bias`` dtype fix-up in ``forward``,
``output.to(self.output_proj.weight.dtype)``, the sine position embedding with ``normalize=True`` computed in float32
from the pixel mask and cast to the features' dtype, reference points built in the valid ratios' dtype. No text
branch (the fusion and text-enhancer layers are plain attention). Small sizes, random init.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def multi_scale_deformable_attention(value, value_spatial_shapes, sampling_locations, attention_weights):
    batch_size, _, num_heads, hidden_dim = value.shape
    _, num_queries, num_heads, num_levels, num_points, _ = sampling_locations.shape
    value_list = value.split([height.item() * width.item() for height, width in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level_id, (height, width) in enumerate(value_spatial_shapes):
        value_l_ = (
            value_list[level_id].flatten(2).transpose(1, 2).reshape(batch_size * num_heads, hidden_dim, height, width)
        )
        sampling_grid_l_ = sampling_grids[:, :, :, level_id].transpose(1, 2).flatten(0, 1)
        sampling_value_l_ = nn.functional.grid_sample(
            value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        sampling_value_list.append(sampling_value_l_)
    attention_weights = attention_weights.transpose(1, 2).reshape(
        batch_size * num_heads, 1, num_queries, num_levels * num_points
    )
    output = (
        (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights)
        .sum(-1)
        .view(batch_size, num_heads * hidden_dim, num_queries)
    )
    return output.transpose(1, 2).contiguous()


class GroundingDinoMultiscaleDeformableAttention(nn.Module):
    def __init__(self, d_model, num_levels, num_heads, n_points):
        super().__init__()
        self.d_model = d_model
        self.n_levels = num_levels
        self.n_heads = num_heads
        self.n_points = n_points
        self.sampling_offsets = nn.Linear(d_model, num_heads * self.n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, num_heads * self.n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self._reset_parameters()

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
        # trained weights predict offsets and weights from the query: random here, not the zero init
        nn.init.normal_(self.sampling_offsets.weight.data, std=0.05)
        nn.init.normal_(self.attention_weights.weight.data, std=0.1)
        nn.init.constant_(self.attention_weights.bias.data, 0.0)
        nn.init.xavier_uniform_(self.value_proj.weight.data)
        nn.init.constant_(self.value_proj.bias.data, 0.0)
        nn.init.xavier_uniform_(self.output_proj.weight.data)
        nn.init.constant_(self.output_proj.bias.data, 0.0)

    def with_pos_embed(self, tensor, position_embeddings):
        return tensor if position_embeddings is None else tensor + position_embeddings

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        position_embeddings=None,
        reference_points=None,
        spatial_shapes=None,
        level_start_index=None,
        output_attentions=False,
    ):
        if position_embeddings is not None:
            hidden_states = self.with_pos_embed(hidden_states, position_embeddings)

        batch_size, num_queries, _ = hidden_states.shape
        batch_size, sequence_length, _ = encoder_hidden_states.shape
        if (spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum() != sequence_length:
            raise ValueError(
                "Make sure to align the spatial shapes with the sequence length of the encoder hidden states"
            )

        value = self.value_proj(encoder_hidden_states)
        if attention_mask is not None:
            value = value.masked_fill(~attention_mask[..., None], float(0))
        value = value.view(batch_size, sequence_length, self.n_heads, self.d_model // self.n_heads)
        if self.sampling_offsets.bias.dtype != hidden_states.dtype:
            self.sampling_offsets.bias.data = self.sampling_offsets.bias.data.to(hidden_states.dtype)
        sampling_offsets = self.sampling_offsets(hidden_states).view(
            batch_size, num_queries, self.n_heads, self.n_levels, self.n_points, 2
        )
        attention_weights = self.attention_weights(hidden_states).view(
            batch_size, num_queries, self.n_heads, self.n_levels * self.n_points
        )
        attention_weights = F.softmax(attention_weights, -1).view(
            batch_size, num_queries, self.n_heads, self.n_levels, self.n_points
        )
        if reference_points.shape[-1] == 2:
            offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            sampling_locations = (
                reference_points[:, :, None, :, None, :]
                + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
            )
        else:
            raise ValueError(f"Last dim of reference_points must be 2 or 4, but got {reference_points.shape[-1]}")

        output = multi_scale_deformable_attention(value, spatial_shapes, sampling_locations, attention_weights)
        output = output.to(self.output_proj.weight.dtype)
        output = self.output_proj(output)
        return output, attention_weights


class GroundingDinoDeformableLayer(nn.Module):
    def __init__(self, d_model, num_levels, num_heads, n_points, ffn_dim):
        super().__init__()
        self.embed_dim = d_model
        self.self_attn = GroundingDinoMultiscaleDeformableAttention(d_model, num_levels, num_heads, n_points)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim, eps=1e-5)
        self.activation_fn = nn.ReLU()
        self.fc1 = nn.Linear(self.embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim, eps=1e-5)

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor,
        position_embeddings: Tensor = None,
        reference_points=None,
        spatial_shapes=None,
        level_start_index=None,
    ):
        residual = hidden_states
        hidden_states, attn_weights = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            encoder_hidden_states=hidden_states,
            encoder_attention_mask=attention_mask,
            position_embeddings=position_embeddings,
            reference_points=reference_points,
            spatial_shapes=spatial_shapes,
            level_start_index=level_start_index,
        )
        hidden_states = residual + hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        residual = hidden_states
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = self.fc2(hidden_states)
        hidden_states = residual + hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, attn_weights


class GroundingDinoSinePositionEmbedding(nn.Module):
    def __init__(self, embedding_dim=16, temperature=20):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.temperature = temperature
        self.scale = 2 * math.pi

    def forward(self, pixel_values, pixel_mask):
        y_embed = pixel_mask.cumsum(1, dtype=torch.float32)
        x_embed = pixel_mask.cumsum(2, dtype=torch.float32)
        eps = 1e-6
        y_embed = (y_embed - 0.5) / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = (x_embed - 0.5) / (x_embed[:, :, -1:] + eps) * self.scale

        dim_t = torch.arange(self.embedding_dim, dtype=torch.float32, device=pixel_values.device)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.embedding_dim)

        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos


class GroundingDinoImageEncoder(nn.Module):
    """A small conv backbone (three levels), input projections with GroupNorm, level embeddings, and the encoder's
    deformable layers: ``forward(pixel_values [N, 3, H, W]) -> [N, S, d_model]`` (S the levels' H*W summed)."""

    def __init__(self, d_model=32, num_levels=3, num_heads=4, n_points=2, ffn_dim=64, layers=2):
        super().__init__()
        chans = [8, 16, 24]
        self.backbone = nn.ModuleList()
        c_in = 3
        for c in chans[:num_levels]:
            self.backbone.append(nn.Sequential(nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.ReLU()))
            c_in = c
        self.input_proj_vision = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, d_model, kernel_size=1), nn.GroupNorm(8, d_model)) for c in chans[:num_levels]
        )
        self.level_embed = nn.Parameter(torch.randn(num_levels, d_model) * 0.1)
        self.position_embedding = GroundingDinoSinePositionEmbedding(d_model // 2)
        self.layers = nn.ModuleList(
            GroundingDinoDeformableLayer(d_model, num_levels, num_heads, n_points, ffn_dim) for _ in range(layers)
        )

    @staticmethod
    def get_valid_ratio(mask, dtype=torch.float32):
        _, height, width = mask.shape
        valid_height = torch.sum(mask[:, :, 0], 1)
        valid_width = torch.sum(mask[:, 0, :], 1)
        valid_ratio_heigth = valid_height.to(dtype) / height
        valid_ratio_width = valid_width.to(dtype) / width
        valid_ratio = torch.stack([valid_ratio_width, valid_ratio_heigth], -1)
        return valid_ratio

    @staticmethod
    def get_reference_points(spatial_shapes, valid_ratios, device):
        reference_points_list = []
        for level, (height, width) in enumerate(spatial_shapes):
            ref_y, ref_x = torch.meshgrid(
                torch.linspace(0.5, height - 0.5, height, dtype=valid_ratios.dtype, device=device),
                torch.linspace(0.5, width - 0.5, width, dtype=valid_ratios.dtype, device=device),
                indexing="ij",
            )
            ref_y = ref_y.reshape(-1)[None] / (valid_ratios[:, None, level, 1] * height)
            ref_x = ref_x.reshape(-1)[None] / (valid_ratios[:, None, level, 0] * width)
            ref = torch.stack((ref_x, ref_y), -1)
            reference_points_list.append(ref)
        reference_points = torch.cat(reference_points_list, 1)
        reference_points = reference_points[:, :, None] * valid_ratios[:, None]
        return reference_points

    def forward(self, pixel_values):
        pixel_mask = torch.ones(
            (pixel_values.shape[0], pixel_values.shape[2], pixel_values.shape[3]),
            dtype=torch.long,
            device=pixel_values.device,
        )
        features, masks, position_embeddings_list = [], [], []
        x = pixel_values
        for stage in self.backbone:
            x = stage(x)
            mask = F.interpolate(pixel_mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
            features.append(x)
            masks.append(mask)
            position_embeddings_list.append(self.position_embedding(x, mask).to(x.dtype))
        sources = [self.input_proj_vision[level](source) for level, source in enumerate(features)]

        source_flatten, mask_flatten, lvl_pos_embed_flatten, spatial_shapes_list = [], [], [], []
        for level, (source, mask, pos_embed) in enumerate(zip(sources, masks, position_embeddings_list)):
            batch_size, num_channels, height, width = source.shape
            spatial_shapes_list.append((height, width))
            source = source.flatten(2).transpose(1, 2)
            mask = mask.flatten(1)
            pos_embed = pos_embed.flatten(2).transpose(1, 2)
            lvl_pos_embed = pos_embed + self.level_embed[level].view(1, 1, -1)
            lvl_pos_embed_flatten.append(lvl_pos_embed)
            source_flatten.append(source)
            mask_flatten.append(mask)
        source_flatten = torch.cat(source_flatten, 1)
        mask_flatten = torch.cat(mask_flatten, 1)
        lvl_pos_embed_flatten = torch.cat(lvl_pos_embed_flatten, 1)
        spatial_shapes = torch.as_tensor(spatial_shapes_list, dtype=torch.long, device=source_flatten.device)
        level_start_index = torch.cat((spatial_shapes.new_zeros((1,)), spatial_shapes.prod(1).cumsum(0)[:-1]))
        valid_ratios = torch.stack([self.get_valid_ratio(m, dtype=pixel_values.dtype) for m in masks], 1)

        key_padding_mask = ~mask_flatten
        reference_points = self.get_reference_points(spatial_shapes, valid_ratios, device=pixel_values.device)
        hidden_states = source_flatten
        for layer in self.layers:
            hidden_states, _ = layer(
                hidden_states,
                attention_mask=~key_padding_mask,
                position_embeddings=lvl_pos_embed_flatten,
                reference_points=reference_points,
                spatial_shapes=spatial_shapes,
                level_start_index=level_start_index,
            )
        return hidden_states


def build(seed=0, dtype=torch.float16):
    """The encoder in ``dtype`` (float16: as Grounding DINO is deployed); input ``[N, 3, H, W]`` of that dtype."""
    torch.manual_seed(seed)
    return GroundingDinoImageEncoder().eval().to(dtype)
