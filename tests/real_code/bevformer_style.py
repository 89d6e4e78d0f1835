"""A BEVFormer encoder layer, written the way fundamentalvision/BEVFormer writes it (the ``nonzero``-free deploy form).

``projects/mmdet3d_plugin/bevformer/modules/encoder.py`` ``BEVFormerEncoder.get_reference_points`` (3-D pillars from
``torch.linspace`` over Z, H, W; the 2-D BEV grid from ``torch.meshgrid``) and ``point_sampling`` (the pillars scaled to
``pc_range``, made homogeneous, ``repeat``-ed per camera, ``torch.matmul`` by ``lidar2img``, divided by a clamped depth
with ``torch.maximum``, normalised by the image shape in place, ``bev_mask`` from depth and bounds, ``permute``-d to
``[num_cam, B, num_query, D, 2]``); ``temporal_self_attention.py`` ``TemporalSelfAttention`` (MSDA over ``[prev_bev,
bev]`` stacked into the batch, ``mean(-1)`` over the two); ``spatial_cross_attention.py`` ``MSDeformableAttention3D``
(offsets split over the ``num_Z_anchors`` pillar points) and ``SpatialCrossAttention`` in the form the ONNX/TensorRT
deploy forks write it: every camera attends every query and ``bev_mask`` weights the sum, instead of ``nonzero``
re-batching. The core is mmcv's ``multi_scale_deformable_attn_pytorch`` (``F.grid_sample`` per level,
``align_corners=False``). Tiny widths, random weights; camera images ``[B, num_cam, 3, H, W]``.
"""

import torch
import torch.nn.functional as F
from torch import nn


def multi_scale_deformable_attn_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
    bs, _, num_heads, embed_dims = value.shape
    _, num_queries, num_heads, num_levels, num_points, _ = sampling_locations.shape
    value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level, (H_, W_) in enumerate(value_spatial_shapes):
        # bs, H_*W_, num_heads, embed_dims -> bs*num_heads, embed_dims, H_, W_
        value_l_ = value_list[level].flatten(2).transpose(1, 2).reshape(bs * num_heads, embed_dims, H_, W_)
        # bs, num_queries, num_heads, num_points, 2 -> bs*num_heads, num_queries, num_points, 2
        sampling_grid_l_ = sampling_grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampling_value_l_ = F.grid_sample(
            value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        sampling_value_list.append(sampling_value_l_)
    attention_weights = attention_weights.transpose(1, 2).reshape(
        bs * num_heads, 1, num_queries, num_levels * num_points
    )
    output = (
        (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights)
        .sum(-1)
        .view(bs, num_heads * embed_dims, num_queries)
    )
    return output.transpose(1, 2).contiguous()


class TemporalSelfAttention(nn.Module):
    def __init__(self, embed_dims=32, num_heads=4, num_levels=1, num_points=2, num_bev_queue=2):
        super().__init__()
        self.embed_dims, self.num_heads, self.num_levels = embed_dims, num_heads, num_levels
        self.num_points, self.num_bev_queue = num_points, num_bev_queue
        self.sampling_offsets = nn.Linear(
            embed_dims * num_bev_queue, num_bev_queue * num_heads * num_levels * num_points * 2
        )
        self.attention_weights = nn.Linear(
            embed_dims * num_bev_queue, num_bev_queue * num_heads * num_levels * num_points
        )
        self.value_proj = nn.Linear(embed_dims, embed_dims)
        self.output_proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, query, value, reference_points, spatial_shapes):
        identity = query
        bs, num_query, embed_dims = query.shape
        _, num_value, _ = value.shape
        query = torch.cat([value[:bs], query], -1)
        value = self.value_proj(value)
        value = value.reshape(bs * self.num_bev_queue, num_value, self.num_heads, -1)
        sampling_offsets = self.sampling_offsets(query)
        sampling_offsets = sampling_offsets.view(
            bs, num_query, self.num_heads, self.num_bev_queue, self.num_levels, self.num_points, 2
        )
        attention_weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_bev_queue, self.num_levels * self.num_points
        )
        attention_weights = attention_weights.softmax(-1)
        attention_weights = attention_weights.view(
            bs, num_query, self.num_heads, self.num_bev_queue, self.num_levels, self.num_points
        )
        attention_weights = (
            attention_weights.permute(0, 3, 1, 2, 4, 5)
            .reshape(bs * self.num_bev_queue, num_query, self.num_heads, self.num_levels, self.num_points)
            .contiguous()
        )
        sampling_offsets = sampling_offsets.permute(0, 3, 1, 2, 4, 5, 6).reshape(
            bs * self.num_bev_queue, num_query, self.num_heads, self.num_levels, self.num_points, 2
        )
        offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
        sampling_locations = (
            reference_points[:, :, None, :, None, :]
            + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
        )
        output = multi_scale_deformable_attn_pytorch(value, spatial_shapes, sampling_locations, attention_weights)
        # output shape (bs*num_bev_queue, num_query, embed_dims)
        # (bs*num_bev_queue, num_query, embed_dims)-> (num_query, embed_dims, bs*num_bev_queue)
        output = output.permute(1, 2, 0)
        # fuse history value and current value
        # (num_query, embed_dims, bs*num_bev_queue)-> (num_query, embed_dims, bs, num_bev_queue)
        output = output.view(num_query, embed_dims, bs, self.num_bev_queue)
        output = output.mean(-1)
        # (num_query, embed_dims, bs)-> (bs, num_query, embed_dims)
        output = output.permute(2, 0, 1)
        output = self.output_proj(output)
        return output + identity


class MSDeformableAttention3D(nn.Module):
    def __init__(self, embed_dims=32, num_heads=4, num_levels=2, num_points=8):
        super().__init__()
        self.embed_dims, self.num_heads, self.num_levels, self.num_points = (
            embed_dims,
            num_heads,
            num_levels,
            num_points,
        )
        self.sampling_offsets = nn.Linear(embed_dims, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(embed_dims, num_heads * num_levels * num_points)
        self.value_proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, query, value, reference_points, spatial_shapes):
        bs, num_query, _ = query.shape
        bs, num_value, _ = value.shape
        value = self.value_proj(value)
        value = value.view(bs, num_value, self.num_heads, -1)
        sampling_offsets = self.sampling_offsets(query).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points, 2
        )
        attention_weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_levels * self.num_points
        )
        attention_weights = attention_weights.softmax(-1)
        attention_weights = attention_weights.view(bs, num_query, self.num_heads, self.num_levels, self.num_points)
        offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
        bs, num_query, num_Z_anchors, xy = reference_points.shape
        reference_points = reference_points[:, :, None, None, None, :, :]
        sampling_offsets = sampling_offsets / offset_normalizer[None, None, None, :, None, :]
        bs, num_query, num_heads, num_levels, num_all_points, xy = sampling_offsets.shape
        sampling_offsets = sampling_offsets.view(
            bs, num_query, num_heads, num_levels, num_all_points // num_Z_anchors, num_Z_anchors, xy
        )
        sampling_locations = reference_points + sampling_offsets
        bs, num_query, num_heads, num_levels, num_points, num_Z_anchors, xy = sampling_locations.shape
        sampling_locations = sampling_locations.view(bs, num_query, num_heads, num_levels, num_all_points, xy)
        return multi_scale_deformable_attn_pytorch(value, spatial_shapes, sampling_locations, attention_weights)


class SpatialCrossAttention(nn.Module):
    def __init__(self, embed_dims=32, num_cams=2, num_levels=2, num_points=8):
        super().__init__()
        self.embed_dims, self.num_cams = embed_dims, num_cams
        self.deformable_attention = MSDeformableAttention3D(embed_dims, num_levels=num_levels, num_points=num_points)
        self.output_proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, query, value, reference_points_cam, bev_mask, spatial_shapes):
        # value: [num_cam, l, bs, C]; reference_points_cam: [num_cam, bs, num_query, D, 2]; bev_mask [num_cam, bs, nq, D]
        inp_residual = query
        bs, num_query, _ = query.size()
        D = reference_points_cam.size(3)
        num_cams, l, bs, embed_dims = value.shape  # noqa: E741 (mmcv names it l)
        queries_rebatch = (
            query.unsqueeze(1).repeat(1, self.num_cams, 1, 1).reshape(bs * num_cams, num_query, embed_dims)
        )
        reference_points_rebatch = reference_points_cam.transpose(0, 1).reshape(bs * num_cams, num_query, D, 2)
        value = value.permute(2, 0, 1, 3).reshape(bs * self.num_cams, l, self.embed_dims)
        queries = self.deformable_attention(
            query=queries_rebatch, value=value, reference_points=reference_points_rebatch, spatial_shapes=spatial_shapes
        ).view(bs, self.num_cams, num_query, self.embed_dims)
        bev_mask_ = (bev_mask.permute(1, 0, 2, 3).sum(-1) > 0).to(queries.dtype)
        slots = (queries * bev_mask_[..., None]).sum(1)
        count = bev_mask_.sum(1).clamp(min=1.0)
        slots = slots / count[..., None]
        slots = self.output_proj(slots)
        return slots + inp_residual


class TinyBEVFormerLayer(nn.Module):
    """Camera images ``[B, num_cam, 3, H, W]``, ``lidar2img [B, num_cam, 4, 4]``, ``prev_bev [B, bev_h*bev_w, C]``
    -> the new BEV ``[B, bev_h*bev_w, C]``."""

    def __init__(self, bev_h=6, bev_w=5, embed_dims=32, num_cams=2, num_points_in_pillar=4, img_shape=(64, 96)):
        super().__init__()
        self.bev_h, self.bev_w, self.embed_dims, self.num_cams = bev_h, bev_w, embed_dims, num_cams
        self.num_points_in_pillar = num_points_in_pillar
        self.pc_range = [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]
        self.img_shape = img_shape  # img_metas[0]["img_shape"][0][:2], a config constant in the deploy forks
        self.bev_embedding = nn.Embedding(bev_h * bev_w, embed_dims)
        self.stem = nn.Conv2d(3, embed_dims, 4, stride=4)
        self.down = nn.Conv2d(embed_dims, embed_dims, 3, stride=2, padding=1)
        self.cams_embeds = nn.Parameter(torch.randn(num_cams, embed_dims) * 0.1)
        self.level_embeds = nn.Parameter(torch.randn(2, embed_dims) * 0.1)
        self.tsa = TemporalSelfAttention(embed_dims)
        self.sca = SpatialCrossAttention(embed_dims, num_cams=num_cams, num_points=2 * num_points_in_pillar)
        self.norm = nn.LayerNorm(embed_dims)

    @staticmethod
    def get_reference_points(H, W, Z=8, num_points_in_pillar=4, dim="3d", bs=1, device="cpu", dtype=torch.float):
        if dim == "3d":
            zs = (
                torch.linspace(0.5, Z - 0.5, num_points_in_pillar, dtype=dtype, device=device)
                .view(-1, 1, 1)
                .expand(num_points_in_pillar, H, W)
                / Z
            )
            xs = (
                torch.linspace(0.5, W - 0.5, W, dtype=dtype, device=device)
                .view(1, 1, W)
                .expand(num_points_in_pillar, H, W)
                / W
            )
            ys = (
                torch.linspace(0.5, H - 0.5, H, dtype=dtype, device=device)
                .view(1, H, 1)
                .expand(num_points_in_pillar, H, W)
                / H
            )
            ref_3d = torch.stack((xs, ys, zs), -1)
            ref_3d = ref_3d.permute(0, 3, 1, 2).flatten(2).permute(0, 2, 1)
            ref_3d = ref_3d[None].repeat(bs, 1, 1, 1)
            return ref_3d
        elif dim == "2d":
            ref_y, ref_x = torch.meshgrid(
                torch.linspace(0.5, H - 0.5, H, dtype=dtype, device=device),
                torch.linspace(0.5, W - 0.5, W, dtype=dtype, device=device),
                indexing="ij",
            )
            ref_y = ref_y.reshape(-1)[None] / H
            ref_x = ref_x.reshape(-1)[None] / W
            ref_2d = torch.stack((ref_x, ref_y), -1)
            ref_2d = ref_2d.repeat(bs, 1, 1).unsqueeze(2)
            return ref_2d

    def point_sampling(self, reference_points, pc_range, lidar2img):
        reference_points = reference_points.clone()
        reference_points[..., 0:1] = reference_points[..., 0:1] * (pc_range[3] - pc_range[0]) + pc_range[0]
        reference_points[..., 1:2] = reference_points[..., 1:2] * (pc_range[4] - pc_range[1]) + pc_range[1]
        reference_points[..., 2:3] = reference_points[..., 2:3] * (pc_range[5] - pc_range[2]) + pc_range[2]
        reference_points = torch.cat((reference_points, torch.ones_like(reference_points[..., :1])), -1)
        reference_points = reference_points.permute(1, 0, 2, 3)
        D, B, num_query = reference_points.size()[:3]
        num_cam = lidar2img.size(1)
        reference_points = reference_points.view(D, B, 1, num_query, 4).repeat(1, 1, num_cam, 1, 1).unsqueeze(-1)
        lidar2img = lidar2img.view(1, B, num_cam, 1, 4, 4).repeat(D, 1, 1, num_query, 1, 1)
        reference_points_cam = torch.matmul(lidar2img.to(torch.float32), reference_points.to(torch.float32)).squeeze(-1)
        eps = 1e-5
        bev_mask = reference_points_cam[..., 2:3] > eps
        reference_points_cam = reference_points_cam[..., 0:2] / torch.maximum(
            reference_points_cam[..., 2:3], torch.ones_like(reference_points_cam[..., 2:3]) * eps
        )
        reference_points_cam[..., 0] /= self.img_shape[1]
        reference_points_cam[..., 1] /= self.img_shape[0]
        bev_mask = (
            bev_mask
            & (reference_points_cam[..., 1:2] > 0.0)
            & (reference_points_cam[..., 1:2] < 1.0)
            & (reference_points_cam[..., 0:1] < 1.0)
            & (reference_points_cam[..., 0:1] > 0.0)
        )
        reference_points_cam = reference_points_cam.permute(2, 1, 3, 0, 4)
        bev_mask = bev_mask.permute(2, 1, 3, 0, 4).squeeze(-1)
        return reference_points_cam, bev_mask

    def forward(self, img, lidar2img, prev_bev):
        B, N, _, H, W = img.shape
        x = self.stem(img.flatten(0, 1))
        mlvl_feats = [x, self.down(x)]
        feat_flatten, spatial_shapes = [], []
        for lvl, feat in enumerate(mlvl_feats):
            feat = feat.view(B, N, self.embed_dims, feat.shape[-2], feat.shape[-1])
            bs, num_cam, c, h, w = feat.shape
            spatial_shape = (h, w)
            feat = feat.flatten(3).permute(1, 0, 3, 2)
            feat = feat + self.cams_embeds[:, None, None, :].to(feat.dtype)
            feat = feat + self.level_embeds[None, None, lvl : lvl + 1, :].to(feat.dtype)
            spatial_shapes.append(spatial_shape)
            feat_flatten.append(feat)
        feat_flatten = torch.cat(feat_flatten, 2)
        spatial_shapes = torch.as_tensor(spatial_shapes, dtype=torch.long, device=img.device)
        feat_flatten = feat_flatten.permute(0, 2, 1, 3)  # (num_cam, H*W, bs, embed_dims)

        bev_query = self.bev_embedding.weight.to(img.dtype).unsqueeze(0).repeat(B, 1, 1)
        ref_3d = self.get_reference_points(
            self.bev_h, self.bev_w, self.pc_range[5] - self.pc_range[2], self.num_points_in_pillar, "3d", B,
            img.device, img.dtype,
        )  # fmt: skip
        ref_2d = self.get_reference_points(self.bev_h, self.bev_w, dim="2d", bs=B, device=img.device, dtype=img.dtype)
        reference_points_cam, bev_mask = self.point_sampling(ref_3d, self.pc_range, lidar2img)
        reference_points_cam = reference_points_cam.to(img.dtype)

        len_bev = bev_query.shape[1]
        prev = torch.stack([prev_bev, bev_query], 1).reshape(B * 2, len_bev, -1)
        hybird_ref_2d = torch.stack([ref_2d, ref_2d], 1).reshape(B * 2, len_bev, 1, 2)
        bev_shape = torch.tensor([[self.bev_h, self.bev_w]], device=img.device)
        query = self.tsa(bev_query, prev, hybird_ref_2d, bev_shape)
        query = self.sca(query, feat_flatten, reference_points_cam, bev_mask, spatial_shapes)
        return self.norm(query)


def lidar2img_example(batch=1, num_cams=2, img_shape=(64, 96), seed=0):
    """Cameras around the ego car looking outwards (K [R|t]), so that part of the BEV grid falls in each image."""
    g = torch.Generator().manual_seed(seed)
    mats = []
    for b in range(batch):
        row = []
        for c in range(num_cams):
            yaw = 2 * torch.pi * c / num_cams + 0.1 * b + 0.05 * torch.randn((), generator=g).item()
            # lidar (x fwd, y left, z up) -> camera (x right, y down, z fwd) looking along yaw
            fwd = torch.tensor([torch.cos(torch.tensor(yaw)), torch.sin(torch.tensor(yaw)), 0.0])
            right = torch.tensor([fwd[1], -fwd[0], 0.0])
            down = torch.tensor([0.0, 0.0, -1.0])
            r = torch.stack([right, down, fwd])
            k = torch.tensor([[30.0, 0, img_shape[1] / 2], [0, 30.0, img_shape[0] / 2], [0, 0, 1]])
            m = torch.eye(4)
            m[:3, :3] = k @ r
            m[:3, 3] = k @ torch.tensor([0.0, 1.0, 0.0])
            row.append(m)
        mats.append(torch.stack(row))
    return torch.stack(mats)
