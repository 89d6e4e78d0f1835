"""A Spatial Transformer Network, written the way PyTorch's tutorial writes it.

pytorch/tutorials ``intermediate_source/spatial_transformer_tutorial.py`` ``Net.stn``: a localization net
(conv, max-pool, ReLU), ``fc_loc`` regressing the six affine parameters (its last layer initialised to the
identity), ``theta = theta.view(-1, 2, 3)``, ``F.affine_grid(theta, x.size())`` and ``F.grid_sample(x, grid)``
with PyTorch's defaults (bilinear, zeros, ``align_corners=False``), then a small classifier. Tiny widths,
random weights (the last ``fc_loc`` layer perturbed from the identity so the warp matters).
"""

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """An image ``[N, 1, 28, 28]`` -> class log-probabilities ``[N, 10]`` and the warped image."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=5)
        self.fc1 = nn.Linear(4 * 12 * 12, 10)

        # Spatial transformer localization-network
        self.localization = nn.Sequential(
            nn.Conv2d(1, 4, kernel_size=7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
            nn.Conv2d(4, 6, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
        )  # fmt: skip

        # Regressor for the 3 * 2 affine matrix
        self.fc_loc = nn.Sequential(nn.Linear(6 * 3 * 3, 16), nn.ReLU(True), nn.Linear(16, 3 * 2))

        # Initialize the weights/bias with identity transformation
        self.fc_loc[2].weight.data.normal_(std=0.05)
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    # Spatial transformer network forward function
    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 6 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)

        grid = F.affine_grid(theta, x.size())
        x = F.grid_sample(x, grid)

        return x

    def forward(self, x):
        # transform the input
        x = self.stn(x)
        warped = x

        # Perform the usual forward pass
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = x.view(-1, 4 * 12 * 12)
        x = self.fc1(x)
        return F.log_softmax(x, dim=1), warped
