"""DBNet++ (text detection), written as open-mmlab/mmocr writes it (``dbnetpp_resnet50-dcnv2_fpnc``): the mmdet
ResNet with mmcv's DCNv2 (``real_code.mmdet_dcn_resnet_style``, ``stage_with_dcn=(False, True, True, True)``, all four
stages out), ``FPNC`` with adaptive scale fusion (``asf_cfg=dict(attention_type='ScaleChannelSpatial')``:
``ScaleChannelSpatialAttention``'s channel, spatial ``torch.mean(out, dim=1, keepdim=True)`` and per-scale
attention, ``attention[:, i:i + 1] * outs[i]``), nearest ``F.interpolate`` to the previous level's ``size``, and
``DBHead``'s ``binarize`` branch (two ``ConvTranspose2d(k=2, s=2)``) with its ``predict`` output
``sigmoid(binarize(img).squeeze(1))`` ``[N, H, W]``. Small widths, random init.
"""

import torch
import torch.nn.functional as F
from torch import nn

from real_code.mmdet_dcn_resnet_style import ResNet


class ConvModule(nn.Sequential):
    """mmcv's ``ConvModule``: conv, optional BN, optional activation."""

    def __init__(self, in_channels, out_channels, kernel_size, padding=0, bias=False, norm=True, act="ReLU"):
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=bias)]
        if norm:
            layers.append(nn.BatchNorm2d(out_channels))
        if act == "ReLU":
            layers.append(nn.ReLU(inplace=False))
        elif act == "Sigmoid":
            layers.append(nn.Sigmoid())
        super().__init__(*layers)


class ScaleChannelSpatialAttention(nn.Module):
    def __init__(self, in_channels, c_wise_channels, out_channels):
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        # Channel Wise
        self.channel_wise = nn.Sequential(
            ConvModule(in_channels, c_wise_channels, 1, bias=False, norm=False, act="ReLU"),
            ConvModule(c_wise_channels, in_channels, 1, bias=False, norm=False, act="Sigmoid"),
        )
        # Spatial Wise
        self.spatial_wise = nn.Sequential(
            ConvModule(1, 1, 3, padding=1, bias=False, norm=False, act="ReLU"),
            ConvModule(1, 1, 1, bias=False, norm=False, act="Sigmoid"),
        )
        # Attention Wise
        self.attention_wise = ConvModule(in_channels, out_channels, 1, bias=False, norm=False, act="Sigmoid")

    def forward(self, inputs):
        out = self.avg_pool(inputs)
        out = self.channel_wise(out)
        out = out + inputs
        inputs = torch.mean(out, dim=1, keepdim=True)
        out = self.spatial_wise(inputs) + out
        out = self.attention_wise(out)
        return out


class FPNC(nn.Module):
    def __init__(self, in_channels, lateral_channels=16, out_channels=8, conv_after_concat=False):
        super().__init__()
        self.in_channels = in_channels
        self.lateral_channels = lateral_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.conv_after_concat = conv_after_concat
        self.lateral_convs = nn.ModuleList()
        self.smooth_convs = nn.ModuleList()
        self.num_outs = self.num_ins
        for i in range(self.num_ins):
            self.lateral_convs.append(ConvModule(in_channels[i], lateral_channels, 1, bias=False, norm=False, act=None))
            self.smooth_convs.append(
                ConvModule(lateral_channels, out_channels, 3, padding=1, bias=False, norm=False, act=None)
            )
        self.asf_conv = ConvModule(
            out_channels * self.num_outs, out_channels * self.num_outs, 3, padding=1, bias=True, norm=False, act=None
        )
        self.asf_attn = ScaleChannelSpatialAttention(
            self.out_channels * self.num_outs, (self.out_channels * self.num_outs) // 4, self.num_outs
        )

    def forward(self, inputs):
        assert len(inputs) == len(self.in_channels)
        # build laterals
        laterals = [lateral_conv(inputs[i]) for i, lateral_conv in enumerate(self.lateral_convs)]
        used_backbone_levels = len(laterals)
        # build top-down path
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode="nearest")
        # build outputs
        # part 1: from original levels
        outs = [self.smooth_convs[i](laterals[i]) for i in range(used_backbone_levels)]

        for i, out in enumerate(outs):  # noqa: B007 - as mmocr writes it
            outs[i] = F.interpolate(outs[i], size=outs[0].shape[2:], mode="nearest")

        out = torch.cat(outs, dim=1)
        asf_feature = self.asf_conv(out)
        attention = self.asf_attn(asf_feature)
        enhanced_feature = []
        for i, out in enumerate(outs):  # noqa: B007 - as mmocr writes it
            enhanced_feature.append(attention[:, i : i + 1] * outs[i])
        out = torch.cat(enhanced_feature, dim=1)
        return out


class DBHead(nn.Module):
    def __init__(self, in_channels, with_bias=False):
        super().__init__()
        self.in_channels = in_channels
        self.binarize = nn.Sequential(
            nn.Conv2d(in_channels, in_channels // 4, 3, bias=with_bias, padding=1),
            nn.BatchNorm2d(in_channels // 4),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(in_channels // 4, in_channels // 4, 2, 2),
            nn.BatchNorm2d(in_channels // 4),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(in_channels // 4, 1, 2, 2),
        )
        self.sigmoid = nn.Sigmoid()

    def forward(self, img):
        prob_logits = self.binarize(img).squeeze(1)
        prob_map = self.sigmoid(prob_logits)
        return prob_map


class DBNetPP(nn.Module):
    """``x [N, 3, H, W]`` (H, W multiples of 32) -> ``prob_map [N, H, W]``."""

    def __init__(self):
        super().__init__()
        self.backbone = ResNet(stage_with_dcn=(False, True, True, True), out_indices=(0, 1, 2, 3))
        self.neck = FPNC(in_channels=[32, 64, 128, 256])
        self.det_head = DBHead(in_channels=32)

    def forward(self, x):
        return self.det_head(self.neck(self.backbone(x)))


def build(seed=0):
    torch.manual_seed(seed)
    model = DBNetPP()
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()
