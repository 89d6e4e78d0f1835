"""EDVR's pyramid, cascading and deformable (PCD) alignment, written the way BasicSR writes it (tiny widths).

``basicsr/archs/arch_util.py`` ``DCNv2Pack`` (mmcv's ``ModulatedDeformConvPack`` with the offset predicted
from another feature): ``conv_offset`` output chunked with ``torch.chunk`` into ``o1, o2, mask``,
``offset = torch.cat((o1, o2))``, ``mask.sigmoid()``, a warning when ``torch.mean(torch.abs(offset)) > 50``
(a data-dependent ``if`` on a tensor), then ``torchvision.ops.deform_conv2d``.
``basicsr/archs/edvr_arch.py`` ``PCDAlignment``: three pyramid levels from the coarsest, each offset
conditioned on the upsampled coarser offset (``nn.Upsample(scale_factor=2, mode='bilinear')`` times 2),
a cascading DCN at the finest level; ``EDVR.forward`` (without TSA and pre-deblur): per-frame features of
``x.view(-1, c, h, w)``, strided levels viewed back as ``(b, t, -1, h // 2, w // 2)``, every frame aligned to
the centre one, fused by a 1x1 conv, reconstructed with pixel shuffle and added to the centre frame
upsampled by 4. Weights are random and small; the offsets a few pixels.
"""

import logging

import torch
import torchvision
from torch import nn
from torch.nn import functional as F

logger = logging.getLogger(__name__)


class DCNv2Pack(nn.Module):
    """BasicSR's ``DCNv2Pack``: ``forward(x, feat)``, offsets and mask from ``feat``."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=1, dilation=1, deformable_groups=1):
        super().__init__()
        self.stride, self.padding, self.dilation = (stride, stride), (padding, padding), (dilation, dilation)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size) * 0.1)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)
        self.conv_offset = nn.Conv2d(
            in_channels, deformable_groups * 3 * kernel_size * kernel_size, kernel_size, stride, padding, dilation
        )

    def forward(self, x, feat):
        out = self.conv_offset(feat)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)

        offset_absmean = torch.mean(torch.abs(offset))
        if offset_absmean > 50:
            logger.warning(f"Offset abs mean is {offset_absmean}, larger than 50.")

        return torchvision.ops.deform_conv2d(
            x, offset, self.weight, self.bias, self.stride, self.padding, self.dilation, mask
        )


class PCDAlignment(nn.Module):
    def __init__(self, num_feat=8, deformable_groups=2):
        super().__init__()
        self.offset_conv1 = nn.ModuleDict()
        self.offset_conv2 = nn.ModuleDict()
        self.offset_conv3 = nn.ModuleDict()
        self.dcn_pack = nn.ModuleDict()
        self.feat_conv = nn.ModuleDict()
        for i in range(3, 0, -1):
            level = f"l{i}"
            self.offset_conv1[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
            if i == 3:
                self.offset_conv2[level] = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
            else:
                self.offset_conv2[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
                self.offset_conv3[level] = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
            self.dcn_pack[level] = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)
            if i < 3:
                self.feat_conv[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
        self.cas_offset_conv1 = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
        self.cas_offset_conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.cas_dcnpack = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)

    def forward(self, nbr_feat_l, ref_feat_l):
        upsampled_offset, upsampled_feat = None, None
        for i in range(3, 0, -1):
            level = f"l{i}"
            offset = torch.cat([nbr_feat_l[i - 1], ref_feat_l[i - 1]], dim=1)
            offset = self.lrelu(self.offset_conv1[level](offset))
            if i == 3:
                offset = self.lrelu(self.offset_conv2[level](offset))
            else:
                offset = self.lrelu(self.offset_conv2[level](torch.cat([offset, upsampled_offset], dim=1)))
                offset = self.lrelu(self.offset_conv3[level](offset))
            feat = self.dcn_pack[level](nbr_feat_l[i - 1], offset)
            if i < 3:
                feat = self.feat_conv[level](torch.cat([feat, upsampled_feat], dim=1))
            if i > 1:
                feat = self.lrelu(feat)
            if i > 1:
                upsampled_offset = self.upsample(offset) * 2
                upsampled_feat = self.upsample(feat)
        offset = torch.cat([feat, ref_feat_l[0]], dim=1)
        offset = self.lrelu(self.cas_offset_conv2(self.lrelu(self.cas_offset_conv1(offset))))
        feat = self.lrelu(self.cas_dcnpack(feat, offset))
        return feat


class TinyEDVR(nn.Module):
    """Frames ``[b, t, 3, h, w]`` (``h``, ``w`` multiples of 4) -> the centre frame upscaled ``[b, 3, 4h, 4w]``."""

    def __init__(self, num_feat=8, num_frame=3, deformable_groups=2):
        super().__init__()
        self.center_frame_idx = num_frame // 2
        self.conv_first = nn.Conv2d(3, num_feat, 3, 1, 1)
        self.feature_extraction = nn.Sequential(nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(inplace=True))
        self.conv_l2_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l2_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_l3_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l3_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.pcd_align = PCDAlignment(num_feat=num_feat, deformable_groups=deformable_groups)
        self.fusion = nn.Conv2d(num_frame * num_feat, num_feat, 1, 1)
        self.reconstruction = nn.Sequential(nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(inplace=True))
        self.upconv1 = nn.Conv2d(num_feat, num_feat * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(num_feat, 16 * 4, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(2)
        self.conv_hr = nn.Conv2d(16, 16, 3, 1, 1)
        self.conv_last = nn.Conv2d(16, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)

    def forward(self, x):
        b, t, c, h, w = x.size()
        assert h % 4 == 0 and w % 4 == 0, "The height and width must be multiple of 4."
        x_center = x[:, self.center_frame_idx, :, :, :].contiguous()

        feat_l1 = self.lrelu(self.conv_first(x.view(-1, c, h, w)))
        feat_l1 = self.feature_extraction(feat_l1)
        feat_l2 = self.lrelu(self.conv_l2_1(feat_l1))
        feat_l2 = self.lrelu(self.conv_l2_2(feat_l2))
        feat_l3 = self.lrelu(self.conv_l3_1(feat_l2))
        feat_l3 = self.lrelu(self.conv_l3_2(feat_l3))

        feat_l1 = feat_l1.view(b, t, -1, h, w)
        feat_l2 = feat_l2.view(b, t, -1, h // 2, w // 2)
        feat_l3 = feat_l3.view(b, t, -1, h // 4, w // 4)

        ref_feat_l = [
            feat_l1[:, self.center_frame_idx, :, :, :].clone(),
            feat_l2[:, self.center_frame_idx, :, :, :].clone(),
            feat_l3[:, self.center_frame_idx, :, :, :].clone(),
        ]
        aligned_feat = []
        for i in range(t):
            nbr_feat_l = [
                feat_l1[:, i, :, :, :].clone(),
                feat_l2[:, i, :, :, :].clone(),
                feat_l3[:, i, :, :, :].clone(),
            ]
            aligned_feat.append(self.pcd_align(nbr_feat_l, ref_feat_l))
        aligned_feat = torch.stack(aligned_feat, dim=1)  # (b, t, c, h, w)
        aligned_feat = aligned_feat.view(b, -1, h, w)
        feat = self.fusion(aligned_feat)

        out = self.reconstruction(feat)
        out = self.lrelu(self.pixel_shuffle(self.upconv1(out)))
        out = self.lrelu(self.pixel_shuffle(self.upconv2(out)))
        out = self.lrelu(self.conv_hr(out))
        out = self.conv_last(out)
        base = F.interpolate(x_center, scale_factor=4, mode="bilinear", align_corners=False)
        out += base
        return out


def build(num_feat=8, num_frame=3, deformable_groups=2, seed=0):
    """A seeded :class:`TinyEDVR` in eval mode whose offset convs predict offsets of a few pixels."""
    torch.manual_seed(seed)
    model = TinyEDVR(num_feat, num_frame, deformable_groups).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, DCNv2Pack):
                module.conv_offset.weight.normal_(0, 0.3)
                module.conv_offset.bias.normal_(0, 1.0)
    return model
