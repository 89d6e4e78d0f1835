"""DAT's deformable attention (Xia et al., "Vision Transformer with Deformable Attention"), written the way
``LeapLabTHU/DAT`` ``models/dat_blocks.py`` writes ``DAttentionBaseline`` (tiny widths, random weights).

Queries from a 1x1 conv; per offset group, offsets from a strided depthwise conv, ``LayerNormProxy`` and GELU
then a 1x1 conv to 2 channels, scaled by ``offset.tanh().mul(offset_range)`` with ``offset_range =
torch.tensor([1.0 / (Hk - 1.0), 1.0 / (Wk - 1.0)])`` built from the offset map's size; reference points
``_get_ref_points`` from ``torch.meshgrid`` of ``torch.linspace(0.5, H_key - 0.5, H_key)`` normalised in
place (``ref[..., 1].div_(W_key - 1.0).mul_(2.0).sub_(1.0)``); keys and values sampled with
``F.grid_sample(x.reshape(B * g, Cg, H, W), pos[..., (1, 0)], align_corners=True)``; attention with
``torch.einsum``; the relative position bias sampled from ``rpe_table`` (a fixed ``2 * q_h - 1`` by
``2 * q_w - 1`` table) by a second ``F.grid_sample`` at the query-to-key displacements (``_get_q_grid``).
DAT's ``einops.rearrange`` calls are spelled with ``reshape`` / ``permute`` here (einops is not a test
dependency); the patterns are quoted beside each. The block returns ``(y, pos, reference)`` as DAT's does.
"""

import torch
from torch import nn
from torch.nn import functional as F


class LayerNormProxy(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)  # einops.rearrange(x, 'b c h w -> b h w c')
        x = self.norm(x)
        return x.permute(0, 3, 1, 2)  # einops.rearrange(x, 'b h w c -> b c h w')


class DAttentionBaseline(nn.Module):
    def __init__(self, q_size, n_heads, n_head_channels, n_groups, stride, offset_range_factor, use_pe=True, ksize=3):
        super().__init__()
        self.n_head_channels = n_head_channels
        self.scale = self.n_head_channels**-0.5
        self.n_heads = n_heads
        self.q_h, self.q_w = q_size
        self.nc = n_head_channels * n_heads
        self.n_groups = n_groups
        self.n_group_channels = self.nc // self.n_groups
        self.n_group_heads = self.n_heads // self.n_groups
        self.use_pe = use_pe
        self.offset_range_factor = offset_range_factor
        self.ksize = ksize
        kk = self.ksize
        pad_size = kk // 2 if kk != stride else 0

        self.conv_offset = nn.Sequential(
            nn.Conv2d(self.n_group_channels, self.n_group_channels, kk, stride, pad_size, groups=self.n_group_channels),
            LayerNormProxy(self.n_group_channels),
            nn.GELU(),
            nn.Conv2d(self.n_group_channels, 2, 1, 1, 0, bias=False),
        )
        self.proj_q = nn.Conv2d(self.nc, self.nc, kernel_size=1, stride=1, padding=0)
        self.proj_k = nn.Conv2d(self.nc, self.nc, kernel_size=1, stride=1, padding=0)
        self.proj_v = nn.Conv2d(self.nc, self.nc, kernel_size=1, stride=1, padding=0)
        self.proj_out = nn.Conv2d(self.nc, self.nc, kernel_size=1, stride=1, padding=0)
        self.proj_drop = nn.Dropout(0.0, inplace=True)
        self.attn_drop = nn.Dropout(0.0, inplace=True)
        self.rpe_table = nn.Parameter(torch.randn(self.n_heads, self.q_h * 2 - 1, self.q_w * 2 - 1) * 0.1)

    @torch.no_grad()
    def _get_ref_points(self, H_key, W_key, B, dtype, device):
        ref_y, ref_x = torch.meshgrid(
            torch.linspace(0.5, H_key - 0.5, H_key, dtype=dtype, device=device),
            torch.linspace(0.5, W_key - 0.5, W_key, dtype=dtype, device=device),
            indexing="ij",
        )
        ref = torch.stack((ref_y, ref_x), -1)
        ref[..., 1].div_(W_key - 1.0).mul_(2.0).sub_(1.0)
        ref[..., 0].div_(H_key - 1.0).mul_(2.0).sub_(1.0)
        ref = ref[None, ...].expand(B * self.n_groups, -1, -1, -1)  # B * g H W 2
        return ref

    @torch.no_grad()
    def _get_q_grid(self, H, W, B, dtype, device):
        ref_y, ref_x = torch.meshgrid(
            torch.arange(0, H, dtype=dtype, device=device),
            torch.arange(0, W, dtype=dtype, device=device),
            indexing="ij",
        )
        ref = torch.stack((ref_y, ref_x), -1)
        ref[..., 1].div_(W - 1.0).mul_(2.0).sub_(1.0)
        ref[..., 0].div_(H - 1.0).mul_(2.0).sub_(1.0)
        ref = ref[None, ...].expand(B * self.n_groups, -1, -1, -1)  # B * g H W 2
        return ref

    def forward(self, x):
        B, C, H, W = x.size()
        dtype, device = x.dtype, x.device

        q = self.proj_q(x)
        # einops.rearrange(q, 'b (g c) h w -> (b g) c h w', g=self.n_groups, c=self.n_group_channels)
        q_off = q.reshape(B * self.n_groups, self.n_group_channels, H, W)
        offset = self.conv_offset(q_off).contiguous()  # B * g 2 Hg Wg
        Hk, Wk = offset.size(2), offset.size(3)
        n_sample = Hk * Wk

        if self.offset_range_factor >= 0:
            offset_range = torch.tensor([1.0 / (Hk - 1.0), 1.0 / (Wk - 1.0)], device=device).reshape(1, 2, 1, 1)
            offset = offset.tanh().mul(offset_range).mul(self.offset_range_factor)

        offset = offset.permute(0, 2, 3, 1)  # einops.rearrange(offset, 'b p h w -> b h w p')
        reference = self._get_ref_points(Hk, Wk, B, dtype, device)

        if self.offset_range_factor >= 0:
            pos = offset + reference
        else:
            pos = (offset + reference).clamp(-1.0, +1.0)

        x_sampled = F.grid_sample(
            input=x.reshape(B * self.n_groups, self.n_group_channels, H, W),
            grid=pos[..., (1, 0)],  # y, x -> x, y
            mode="bilinear",
            align_corners=True,
        )  # B * g, Cg, Hg, Wg

        x_sampled = x_sampled.reshape(B, C, 1, n_sample)

        q = q.reshape(B * self.n_heads, self.n_head_channels, H * W)
        k = self.proj_k(x_sampled).reshape(B * self.n_heads, self.n_head_channels, n_sample)
        v = self.proj_v(x_sampled).reshape(B * self.n_heads, self.n_head_channels, n_sample)

        attn = torch.einsum("b c m, b c n -> b m n", q, k)  # B * h, HW, Ns
        attn = attn.mul(self.scale)

        if self.use_pe:
            rpe_table = self.rpe_table
            rpe_bias = rpe_table[None, ...].expand(B, -1, -1, -1)
            q_grid = self._get_q_grid(H, W, B, dtype, device)
            displacement = (
                q_grid.reshape(B * self.n_groups, H * W, 2).unsqueeze(2)
                - pos.reshape(B * self.n_groups, n_sample, 2).unsqueeze(1)
            ).mul(0.5)
            # einops.rearrange(rpe_bias, 'b (g c) h w -> (b g) c h w', c=self.n_group_heads, g=self.n_groups)
            attn_bias = F.grid_sample(
                input=rpe_bias.reshape(B * self.n_groups, self.n_group_heads, 2 * self.q_h - 1, 2 * self.q_w - 1),
                grid=displacement[..., (1, 0)],
                mode="bilinear",
                align_corners=True,
            )  # B * g, h_g, HW, Ns
            attn_bias = attn_bias.reshape(B * self.n_heads, H * W, n_sample)
            attn = attn + attn_bias

        attn = F.softmax(attn, dim=2)
        attn = self.attn_drop(attn)

        out = torch.einsum("b m n, b c n -> b c m", attn, v)
        out = out.reshape(B, C, H, W)
        y = self.proj_drop(self.proj_out(out))
        return y, pos.reshape(B, self.n_groups, Hk, Wk, 2), reference.reshape(B, self.n_groups, Hk, Wk, 2)


class TinyDATStage(nn.Module):
    """A patch-embedding conv (stride 4) then one DAT attention block with its residual: image ``[B, 3, H, W]``
    -> ``(features [B, C, H/4, W/4], pos, reference)``."""

    def __init__(self, dim=16, heads=4, groups=2, q_size=(8, 8), stride=2, offset_range_factor=2.0):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.attn = DAttentionBaseline(q_size, heads, dim // heads, groups, stride, offset_range_factor)

    def forward(self, x):
        x = self.patch(x)
        y, pos, ref = self.attn(x)
        return x + y, pos, ref


def build(seed=0, **kwargs):
    """A seeded :class:`TinyDATStage` in eval mode with offsets of several key pixels (DAT zero-inits them)."""
    torch.manual_seed(seed)
    model = TinyDATStage(**kwargs).eval()
    with torch.no_grad():
        model.attn.conv_offset[-1].weight.normal_(0, 1.0)
    return model
