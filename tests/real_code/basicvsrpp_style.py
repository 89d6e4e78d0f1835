"""BasicVSR++'s second-order deformable alignment, written the way mmagic writes it (tiny widths, random weights).

``mmagic/models/editors/basicvsr_plusplus_net/basicvsr_plusplus_net.py``: features of every frame from one
conv over ``lqs.view(-1, c, h, w)`` viewed back to ``[n, t, c, h, w]``; a propagation branch walks the
frames, warps the propagated feature by the flow (``flow_warp``: ``torch.meshgrid`` of aranges, the flow
added, normalised, ``F.grid_sample(align_corners=True)``), composes the second-order flow
``flow_n1 + flow_warp(flow_n2, flow_n1)``, concatenates features and both flows into the offset
predictor, and ``SecondOrderDeformableAlignment`` (mmcv's ``ModulatedDeformConv2d``: here
``torchvision.ops.deform_conv2d`` with a mask) samples at ``max_residue_magnitude * tanh(o)`` plus the
flipped flow repeated per offset group; the branch's outputs are stacked to ``[n, t, c, h, w]``.
``mmagic/models/utils/flow_warp.py`` is copied as written (``max(w - 1, 1)``). Flows are inputs (SPyNet is
a plain conv net).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import deform_conv2d


def flow_warp(x, flow, interpolation="bilinear", padding_mode="zeros", align_corners=True):
    _, _, h, w = x.size()
    grid_y, grid_x = torch.meshgrid(
        torch.arange(0, h, device=flow.device, dtype=x.dtype),
        torch.arange(0, w, device=flow.device, dtype=x.dtype),
        indexing="ij",
    )
    grid = torch.stack((grid_x, grid_y), 2)  # h, w, 2
    grid.requires_grad = False
    grid_flow = grid + flow
    grid_flow_x = 2.0 * grid_flow[:, :, :, 0] / max(w - 1, 1) - 1.0
    grid_flow_y = 2.0 * grid_flow[:, :, :, 1] / max(h - 1, 1) - 1.0
    grid_flow = torch.stack((grid_flow_x, grid_flow_y), dim=3)
    grid_flow = grid_flow.type(x.type())
    return F.grid_sample(x, grid_flow, mode=interpolation, padding_mode=padding_mode, align_corners=align_corners)


class SecondOrderDeformableAlignment(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, padding=1, deform_groups=1, max_residue_magnitude=10):
        super().__init__()
        self.out_channels, self.deform_groups, self.padding = out_channels, deform_groups, padding
        self.max_residue_magnitude = max_residue_magnitude
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size) * 0.1)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)
        self.conv_offset = nn.Sequential(
            nn.Conv2d(3 * self.out_channels + 4, self.out_channels, 3, 1, 1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            nn.Conv2d(self.out_channels, self.out_channels, 3, 1, 1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            nn.Conv2d(self.out_channels, 27 * self.deform_groups, 3, 1, 1),
        )

    def forward(self, x, extra_feat, flow_1, flow_2):
        extra_feat = torch.cat([extra_feat, flow_1, flow_2], dim=1)
        out = self.conv_offset(extra_feat)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = self.max_residue_magnitude * torch.tanh(torch.cat((o1, o2), dim=1))
        offset_1, offset_2 = torch.chunk(offset, 2, dim=1)
        offset_1 = offset_1 + flow_1.flip(1).repeat(1, offset_1.size(1) // 2, 1, 1)
        offset_2 = offset_2 + flow_2.flip(1).repeat(1, offset_2.size(1) // 2, 1, 1)
        offset = torch.cat([offset_1, offset_2], dim=1)
        mask = torch.sigmoid(mask)
        return deform_conv2d(x, offset, self.weight, self.bias, padding=self.padding, mask=mask)


class TinyBasicVSRPP(nn.Module):
    """Frames ``[n, t, 3, h, w]`` and flows ``[n, t - 1, 2, h, w]`` -> one backward branch's ``[n, t, c, h, w]``."""

    def __init__(self, mid_channels=4, deform_groups=2):
        super().__init__()
        self.mid_channels = mid_channels
        self.feat_extract = nn.Sequential(nn.Conv2d(3, mid_channels, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True))
        self.deform_align = SecondOrderDeformableAlignment(
            2 * mid_channels, mid_channels, 3, padding=1, deform_groups=deform_groups
        )
        self.backbone = nn.Sequential(nn.Conv2d(2 * mid_channels, mid_channels, 3, 1, 1), nn.LeakyReLU(0.1))

    def forward(self, lqs, flows):
        n, t, c, h, w = lqs.size()
        feats_ = self.feat_extract(lqs.view(-1, c, h, w))
        h, w = feats_.shape[2:]
        feats_ = feats_.view(n, t, -1, h, w)
        spatial = [feats_[:, i, :, :, :] for i in range(0, t)]
        frame_idx = list(range(0, t))[::-1]  # backward propagation: flow_idx = frame_idx, as mmagic writes it
        flow_idx = frame_idx
        feat_prop = flows.new_zeros(n, self.mid_channels, h, w)
        out = []
        for i, idx in enumerate(frame_idx):
            feat_current = spatial[idx]
            if i > 0:
                flow_n1 = flows[:, flow_idx[i], :, :, :]
                cond_n1 = flow_warp(feat_prop, flow_n1.permute(0, 2, 3, 1))
                feat_n2 = torch.zeros_like(feat_prop)
                flow_n2 = torch.zeros_like(flow_n1)
                cond_n2 = torch.zeros_like(cond_n1)
                if i > 1:
                    feat_n2 = out[-2]
                    flow_n2 = flows[:, flow_idx[i - 1], :, :, :]
                    flow_n2 = flow_n1 + flow_warp(flow_n2, flow_n1.permute(0, 2, 3, 1))
                    cond_n2 = flow_warp(feat_n2, flow_n2.permute(0, 2, 3, 1))
                cond = torch.cat([cond_n1, feat_current, cond_n2], dim=1)
                feat_prop = torch.cat([feat_prop, feat_n2], dim=1)
                feat_prop = self.deform_align(feat_prop, cond, flow_n1, flow_n2)
            feat = torch.cat([feat_current, feat_prop], dim=1)
            feat_prop = feat_prop + self.backbone(feat)
            out.append(feat_prop)
        return torch.stack(out[::-1], dim=1)
