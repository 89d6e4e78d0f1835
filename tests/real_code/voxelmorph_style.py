"""voxelmorph's 2-D SpatialTransformer behind a small flow net, written the way voxelmorph writes it (case c38).

``voxelmorph/torch/layers.py`` ``SpatialTransformer``: an identity grid from ``torch.meshgrid`` of aranges
kept as a buffer, the flow added, each axis normalised to [-1, 1] *in place*
(``new_locs[:, i, ...] = 2 * (new_locs[:, i, ...] / (shape[i] - 1) - 0.5)``), moved channels-last, the two
channels swapped with ``new_locs[..., [1, 0]]``, ``F.grid_sample(align_corners=True)``.
"""

import torch
import torch.nn.functional as nnf
from torch import nn


class SpatialTransformer(nn.Module):
    def __init__(self, size, mode="bilinear"):
        super().__init__()
        self.mode = mode
        vectors = [torch.arange(0, s) for s in size]
        grids = torch.meshgrid(vectors, indexing="ij")
        grid = torch.stack(grids)
        grid = torch.unsqueeze(grid, 0)
        grid = grid.type(torch.FloatTensor)
        self.register_buffer("grid", grid, persistent=False)

    def forward(self, src, flow):
        new_locs = self.grid + flow
        shape = flow.shape[2:]
        for i in range(len(shape)):
            new_locs[:, i, ...] = 2 * (new_locs[:, i, ...] / (shape[i] - 1) - 0.5)
        if len(shape) == 2:
            new_locs = new_locs.permute(0, 2, 3, 1)
            new_locs = new_locs[..., [1, 0]]
        return nnf.grid_sample(src, new_locs, align_corners=True, mode=self.mode)


class TinyVxm(nn.Module):
    """Moving and fixed images ``[N, 2, H, W]`` -> the moving image warped by a predicted flow."""

    def __init__(self, size=(32, 32)):
        super().__init__()
        self.enc = nn.Conv2d(2, 8, 3, padding=1)
        self.flow = nn.Conv2d(8, 2, 3, padding=1)
        self.transformer = SpatialTransformer(size)

    def forward(self, x):
        flow = self.flow(torch.relu(self.enc(x))) * 3.0
        return self.transformer(x[:, :1], flow)
