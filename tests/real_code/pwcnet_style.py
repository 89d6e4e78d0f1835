"""PWC-Net's backward warp, written the way NVlabs/PWC-Net's PyTorch code writes it.

``PyTorch/models/PWCNet.py`` ``PWCDCNet.warp``: an integer pixel grid from ``torch.arange(0, W).view(1, -1).repeat(H,
1)`` (and its ``yy`` twin) repeated over the batch, ``.float()``, plus the flow; each channel normalised in place
with ``2.0 * vgrid[:, 0, :, :].clone() / max(W - 1, 1) - 1.0``; ``permute(0, 2, 3, 1)``; ``F.grid_sample`` with
PyTorch's defaults; a validity mask from warping a tensor of ones, thresholded in place (``mask[mask < 0.9999] = 0``,
``mask[mask > 0] = 1``), multiplied in. A tiny flow estimator in front. Random weights.
"""

import torch
import torch.nn.functional as F
from torch import nn


class TinyPWC(nn.Module):
    """Two frames ``[B, 3, H, W]`` each -> the second warped to the first by a predicted flow ``[B, 3, H, W]``."""

    def __init__(self, c=8):
        super().__init__()
        self.enc = nn.Conv2d(6, c, 3, padding=1)
        self.flow = nn.Conv2d(c, 2, 3, padding=1)

    def warp(self, x, flo):
        """
        warp an image/tensor (im2) back to im1, according to the optical flow

        x: [B, C, H, W] (im2)
        flo: [B, 2, H, W] flow

        """
        B, C, H, W = x.size()
        # mesh grid
        xx = torch.arange(0, W).view(1, -1).repeat(H, 1)
        yy = torch.arange(0, H).view(-1, 1).repeat(1, W)
        xx = xx.view(1, 1, H, W).repeat(B, 1, 1, 1)
        yy = yy.view(1, 1, H, W).repeat(B, 1, 1, 1)
        grid = torch.cat((xx, yy), 1).float()

        vgrid = grid + flo

        # scale grid to [-1,1]
        vgrid[:, 0, :, :] = 2.0 * vgrid[:, 0, :, :].clone() / max(W - 1, 1) - 1.0
        vgrid[:, 1, :, :] = 2.0 * vgrid[:, 1, :, :].clone() / max(H - 1, 1) - 1.0

        vgrid = vgrid.permute(0, 2, 3, 1)
        output = nn.functional.grid_sample(x, vgrid)
        mask = torch.ones(x.size())
        mask = nn.functional.grid_sample(mask, vgrid)

        mask[mask < 0.9999] = 0
        mask[mask > 0] = 1

        return output * mask

    def forward(self, im1, im2):
        flow = self.flow(torch.relu(self.enc(torch.cat([im1, im2], 1)))) * 2.0
        return self.warp(im2, flow)


class IRRWarp(nn.Module):
    """The ``torch.meshgrid`` variant (IRR-PWC / ARFlow style): ``align_corners=True``, normalised by ``W - 1``."""

    def __init__(self, c=8):
        super().__init__()
        self.enc = nn.Conv2d(6, c, 3, padding=1)
        self.flow = nn.Conv2d(c, 2, 3, padding=1)

    def forward(self, im1, im2):
        flow = self.flow(torch.relu(self.enc(torch.cat([im1, im2], 1)))) * 2.0
        B, _, H, W = flow.size()
        yy, xx = torch.meshgrid(torch.arange(H, device=flow.device), torch.arange(W, device=flow.device), indexing="ij")
        grid = torch.stack((xx, yy), 0).float().unsqueeze(0)
        vgrid = grid + flow
        vx = 2.0 * vgrid[:, 0] / (W - 1) - 1.0
        vy = 2.0 * vgrid[:, 1] / (H - 1) - 1.0
        return F.grid_sample(im2, torch.stack((vx, vy), dim=3), align_corners=True, padding_mode="zeros")
