"""RAFT's correlation lookup and convex upsampling, written the way princeton-vl/RAFT writes them.

``core/utils/utils.py``: ``coords_grid`` (``torch.meshgrid`` of two aranges, stacked x-first, repeated over the
batch) and ``bilinear_sampler`` (pixel coordinates split into x and y, each normalised with ``2*x/(W-1) - 1``,
``F.grid_sample(align_corners=True)``). ``core/corr.py`` ``CorrBlock``: the all-pairs volume
``fmap1^T fmap2 / sqrt(dim)`` reshaped to ``[N*H*W, 1, H, W]``, a pyramid by ``F.avg_pool2d(corr, 2, stride=2)``,
and the lookup: a ``(2r+1)^2`` window ``torch.stack(torch.meshgrid(dy, dx), axis=-1)`` added to the centroids
scaled by ``2**i``, each level sampled and viewed back to ``[N, H, W, -1]``. ``core/raft.py``
``initialize_flow`` / ``upsample_flow``: ``coords1 - coords0``, convex upsampling with ``F.unfold(8 * flow, [3,3],
padding=1)`` and a softmax mask. Tiny widths, random weights; one refinement step instead of a GRU.
"""

import torch
import torch.nn.functional as F
from torch import nn


def bilinear_sampler(img, coords, mode="bilinear", mask=False):
    """Wrapper for grid_sample, uses pixel coordinates"""
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1

    grid = torch.cat([xgrid, ygrid], dim=-1)
    img = F.grid_sample(img, grid, align_corners=True)

    if mask:
        mask = (xgrid > -1) & (ygrid > -1) & (xgrid < 1) & (ygrid < 1)
        return img, mask.float()

    return img


def coords_grid(batch, ht, wd, device):
    coords = torch.meshgrid(torch.arange(ht, device=device), torch.arange(wd, device=device), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=4, radius=4):
        self.num_levels = num_levels
        self.radius = radius
        self.corr_pyramid = []

        # all pairs correlation
        corr = CorrBlock.corr(fmap1, fmap2)

        batch, h1, w1, dim, h2, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, dim, h2, w2)

        self.corr_pyramid.append(corr)
        for _i in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape

        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            dy = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), axis=-1)

            centroid_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2**i
            delta_lvl = delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            coords_lvl = centroid_lvl + delta_lvl

            corr = bilinear_sampler(corr, coords_lvl)
            corr = corr.view(batch, h1, w1, -1)
            out_pyramid.append(corr)

        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1, fmap2):
        batch, dim, ht, wd = fmap1.shape
        fmap1 = fmap1.view(batch, dim, ht * wd)
        fmap2 = fmap2.view(batch, dim, ht * wd)

        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch, ht, wd, 1, ht, wd)
        return corr / torch.sqrt(torch.tensor(dim).float())


class TinyRAFT(nn.Module):
    """Two frames ``[N, 3, H, W]`` (H, W multiples of 8) -> flow at full resolution ``[N, 2, H, W]``.

    RAFT's ``forward`` with one update step: features at 1/8, ``initialize_flow``, a correlation lookup
    at ``coords1``, a flow delta and a convex-upsampling mask predicted from it, ``upsample_flow``.
    """

    def __init__(self, dim=8, levels=2, radius=1):
        super().__init__()
        self.levels, self.radius = levels, radius
        self.fnet = nn.Sequential(
            nn.Conv2d(3, dim, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(dim, dim, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(dim, dim, 3, stride=2, padding=1),
        )
        corr_planes = levels * (2 * radius + 1) ** 2
        self.init = nn.Conv2d(dim, 2, 3, padding=1)
        self.update = nn.Conv2d(corr_planes + 2, 2, 3, padding=1)
        self.mask = nn.Conv2d(corr_planes + 2, 64 * 9, 1)

    def initialize_flow(self, img):
        """Flow is represented as difference between two coordinate grids flow = coords1 - coords0"""
        N, C, H, W = img.shape
        coords0 = coords_grid(N, H // 8, W // 8, device=img.device)
        coords1 = coords_grid(N, H // 8, W // 8, device=img.device)
        return coords0, coords1

    def upsample_flow(self, flow, mask):
        """Upsample flow field [H/8, W/8, 2] -> [H, W, 2] using convex combination"""
        N, _, H, W = flow.shape
        mask = mask.view(N, 1, 9, 8, 8, H, W)
        mask = torch.softmax(mask, dim=2)

        up_flow = F.unfold(8 * flow, [3, 3], padding=1)
        up_flow = up_flow.view(N, 2, 9, 1, 1, H, W)

        up_flow = torch.sum(mask * up_flow, dim=2)
        up_flow = up_flow.permute(0, 1, 4, 2, 5, 3)
        return up_flow.reshape(N, 2, 8 * H, 8 * W)

    def forward(self, image1, image2):
        fmap1, fmap2 = self.fnet(image1), self.fnet(image2)
        corr_fn = CorrBlock(fmap1, fmap2, num_levels=self.levels, radius=self.radius)
        coords0, coords1 = self.initialize_flow(image1)
        coords1 = coords1 + self.init(fmap1) * 2.0
        corr = corr_fn(coords1)
        flow = coords1 - coords0
        motion = torch.cat([corr, flow], dim=1)
        coords1 = coords1 + self.update(motion)
        up_mask = 0.25 * self.mask(motion)
        return self.upsample_flow(coords1 - coords0, up_mask)
