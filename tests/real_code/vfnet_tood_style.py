"""VFNet's star-shaped deformable head and TOOD's ``deform_sampling``, written the way mmdet writes them
(one FPN level, tiny widths, random weights).

``mmdet/models/dense_heads/vfnet_head.py``: ``dcn_base_offset`` built with numpy (``np.repeat`` /
``np.tile`` of ``np.arange(-pad, pad + 1)``, a float64 ``torch.tensor`` attribute, not a buffer, cast with
``type_as``); ``star_dcn_offset`` writes the box sides into ``bbox_pred.new_zeros(N, 18, H, W)`` channel by
channel (``offset[:, 0, :, :] = -1.0 * y1`` ...) and subtracts the base; the initial boxes are
``scale(conv(reg_feat)).float().exp() * stride``; ``vfnet_reg_refine_dconv`` and ``vfnet_cls_dconv`` (mmcv's
DCNv1 ``DeformConv2d``: here ``torchvision.ops.deform_conv2d`` without a mask) sample at the star offsets, the
offsets cast back with ``.to(reg_feat.dtype)``.
``mmdet/models/dense_heads/tood_head.py``: ``deform_sampling(feat, offset)`` is
``deform_conv2d(feat, offset, feat.new_ones(c, 1, 1, 1), 1, 0, 1, c, c)``, a 1x1 kernel with ``groups`` and
``deform_groups`` both the channel count (bilinear sampling of each box side at its own offset); the boxes it
samples are ``distance2bbox`` of anchor points from ``torch.meshgrid`` of the map's size.
"""

import numpy as np
import torch
from torch import nn
from torchvision.ops import deform_conv2d


class Scale(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float))

    def forward(self, x):
        return x * self.scale


class TinyVFNetHead(nn.Module):
    """One level: feature ``[N, C, H, W]`` -> ``(cls_score [N, K, H, W], bbox_pred, bbox_pred_refine)``."""

    def __init__(self, in_channels=8, feat_channels=8, num_classes=3, stride=8, gradient_mul=0.1):
        super().__init__()
        self.num_dconv_points = 9
        self.dcn_kernel = int(np.sqrt(self.num_dconv_points))
        self.dcn_pad = int((self.dcn_kernel - 1) / 2)
        dcn_base = np.arange(-self.dcn_pad, self.dcn_pad + 1).astype(np.float64)
        dcn_base_y = np.repeat(dcn_base, self.dcn_kernel)
        dcn_base_x = np.tile(dcn_base, self.dcn_kernel)
        dcn_base_offset = np.stack([dcn_base_y, dcn_base_x], axis=1).reshape(-1)
        self.dcn_base_offset = torch.tensor(dcn_base_offset).view(1, -1, 1, 1)
        self.stride, self.gradient_mul = stride, gradient_mul

        self.cls_convs = nn.Sequential(nn.Conv2d(in_channels, feat_channels, 3, padding=1), nn.ReLU())
        self.reg_convs = nn.Sequential(nn.Conv2d(in_channels, feat_channels, 3, padding=1), nn.ReLU())
        self.relu = nn.ReLU()
        self.vfnet_reg_conv = nn.Conv2d(feat_channels, feat_channels, 3, 1, padding=1)
        self.vfnet_reg = nn.Conv2d(feat_channels, 4, 3, padding=1)
        self.scale = Scale(1.0)
        self.vfnet_reg_refine_dconv_weight = nn.Parameter(torch.randn(feat_channels, feat_channels, 3, 3) * 0.1)
        self.vfnet_reg_refine = nn.Conv2d(feat_channels, 4, 3, padding=1)
        self.scale_refine = Scale(1.0)
        self.vfnet_cls_dconv_weight = nn.Parameter(torch.randn(feat_channels, feat_channels, 3, 3) * 0.1)
        self.vfnet_cls = nn.Conv2d(feat_channels, num_classes, 3, padding=1)

    def star_dcn_offset(self, bbox_pred, gradient_mul, stride):
        dcn_base_offset = self.dcn_base_offset.type_as(bbox_pred)
        bbox_pred_grad_mul = (1 - gradient_mul) * bbox_pred.detach() + gradient_mul * bbox_pred
        # map to the feature map scale
        bbox_pred_grad_mul = bbox_pred_grad_mul / stride
        N, C, H, W = bbox_pred.size()

        x1 = bbox_pred_grad_mul[:, 0, :, :]
        y1 = bbox_pred_grad_mul[:, 1, :, :]
        x2 = bbox_pred_grad_mul[:, 2, :, :]
        y2 = bbox_pred_grad_mul[:, 3, :, :]
        bbox_pred_grad_mul_offset = bbox_pred.new_zeros(N, 2 * self.num_dconv_points, H, W)
        bbox_pred_grad_mul_offset[:, 0, :, :] = -1.0 * y1  # -y1
        bbox_pred_grad_mul_offset[:, 1, :, :] = -1.0 * x1  # -x1
        bbox_pred_grad_mul_offset[:, 2, :, :] = -1.0 * y1  # -y1
        bbox_pred_grad_mul_offset[:, 4, :, :] = -1.0 * y1  # -y1
        bbox_pred_grad_mul_offset[:, 5, :, :] = x2  # x2
        bbox_pred_grad_mul_offset[:, 7, :, :] = -1.0 * x1  # -x1
        bbox_pred_grad_mul_offset[:, 11, :, :] = x2  # x2
        bbox_pred_grad_mul_offset[:, 12, :, :] = y2  # y2
        bbox_pred_grad_mul_offset[:, 13, :, :] = -1.0 * x1  # -x1
        bbox_pred_grad_mul_offset[:, 14, :, :] = y2  # y2
        bbox_pred_grad_mul_offset[:, 16, :, :] = y2  # y2
        bbox_pred_grad_mul_offset[:, 17, :, :] = x2  # x2
        dcn_offset = bbox_pred_grad_mul_offset - dcn_base_offset

        return dcn_offset

    def forward(self, x):
        cls_feat = self.cls_convs(x)
        reg_feat = self.reg_convs(x)

        # predict the bbox_pred of different level
        reg_feat_init = self.vfnet_reg_conv(reg_feat)
        bbox_pred = self.scale(self.vfnet_reg(reg_feat_init)).float().exp() * self.stride

        # compute star deformable convolution offsets
        # converting dcn_offset to reg_feat.dtype thus VFNet can be
        # trained with FP16
        dcn_offset = self.star_dcn_offset(bbox_pred, self.gradient_mul, self.stride).to(reg_feat.dtype)

        # refine the bbox_pred
        reg_feat = self.relu(
            deform_conv2d(reg_feat, dcn_offset, self.vfnet_reg_refine_dconv_weight, padding=self.dcn_pad)
        )
        bbox_pred_refine = self.scale_refine(self.vfnet_reg_refine(reg_feat)).float().exp()
        bbox_pred_refine = bbox_pred_refine * bbox_pred.detach()

        # predict the iou-aware cls score
        cls_feat = self.relu(deform_conv2d(cls_feat, dcn_offset, self.vfnet_cls_dconv_weight, padding=self.dcn_pad))
        cls_score = self.vfnet_cls(cls_feat)
        return cls_score, bbox_pred, bbox_pred_refine


def distance2bbox(points, distance):
    x1 = points[..., 0] - distance[..., 0]
    y1 = points[..., 1] - distance[..., 1]
    x2 = points[..., 0] + distance[..., 2]
    y2 = points[..., 1] + distance[..., 3]
    return torch.stack([x1, y1, x2, y2], -1)


class TinyTOODReg(nn.Module):
    """TOOD's anchor-free box branch on one level: feature ``[b, C, h, w]`` -> aligned boxes ``[b, 4, h, w]``."""

    def __init__(self, feat_channels=8, stride=8):
        super().__init__()
        self.stride = stride
        self.tood_reg = nn.Conv2d(feat_channels, 4, 3, padding=1)
        self.scale = Scale(1.0)
        self.reg_offset_module = nn.Sequential(
            nn.Conv2d(feat_channels, feat_channels // 4, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(feat_channels // 4, 4 * 2, 3, padding=1),
        )

    def anchor_centers(self, h, w, device, dtype):
        # mmdet's MlvlPointGenerator (offset 0.5 for anchor-free) divided back by the stride
        shift_x = (torch.arange(0, w, device=device).to(dtype) + 0.5) * self.stride
        shift_y = (torch.arange(0, h, device=device).to(dtype) + 0.5) * self.stride
        yy, xx = torch.meshgrid(shift_y, shift_x, indexing="ij")
        return torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=-1)

    def deform_sampling(self, feat, offset):
        """Sampling the feature x according to offset (mmdet's tood_head, mmcv's argument order)."""
        # it is an equivalent implementation of bilinear interpolation
        b, c, h, w = feat.shape
        weight = feat.new_ones(c, 1, 1, 1)
        y = deform_conv2d(feat, offset, weight, None, (1, 1), (0, 0), (1, 1))
        return y

    def forward(self, reg_feat):
        b, _, h, w = reg_feat.shape
        reg_dist = self.scale(self.tood_reg(reg_feat).exp()).float()
        reg_dist = reg_dist.permute(0, 2, 3, 1).reshape(-1, 4)
        points = self.anchor_centers(h, w, reg_feat.device, reg_dist.dtype).repeat(b, 1)
        reg_bbox = distance2bbox(points / self.stride, reg_dist).reshape(b, h, w, 4).permute(0, 3, 1, 2)
        reg_offset = self.reg_offset_module(reg_feat)
        bbox_pred = self.deform_sampling(reg_bbox.contiguous(), reg_offset.contiguous())
        return bbox_pred


class VFNetTOOD(nn.Module):
    """Both heads on one stride-8 level of a tiny stem: image ``[N, 3, H, W]`` -> VFNet's three maps, TOOD's boxes."""

    def __init__(self, channels=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 4, 1), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2, 1))
        self.vfnet = TinyVFNetHead(channels, channels)
        self.tood = TinyTOODReg(channels)

    def forward(self, x):
        feat = self.stem(x)
        cls_score, bbox_pred, bbox_pred_refine = self.vfnet(feat)
        return cls_score, bbox_pred, bbox_pred_refine, self.tood(feat)


def build(seed=0):
    """A seeded :class:`VFNetTOOD` in eval mode: boxes of a few stride-8 cells, TOOD offsets of a few pixels."""
    torch.manual_seed(seed)
    model = VFNetTOOD().eval()
    with torch.no_grad():
        model.vfnet.vfnet_reg.weight.normal_(0, 0.05)
        model.vfnet.vfnet_reg.bias.fill_(2.5)
        model.tood.reg_offset_module[-1].weight.normal_(0, 0.5)
    return model
