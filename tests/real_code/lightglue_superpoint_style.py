"""SuperPoint's descriptor head and descriptor sampling, written the way SuperGlue / LightGlue write it.

``magicleap/SuperGluePretrainedNetwork`` ``models/superpoint.py`` and ``cvg/LightGlue`` ``lightglue/superpoint.py``
``sample_descriptors``: keypoints in pixels of the image, shifted by ``s / 2 - 0.5`` and divided by
``torch.tensor([(w * s - s / 2 - 0.5), (h * s - s / 2 - 0.5)]).to(keypoints)[None]`` (``w``, ``h`` the descriptor
map's size, read from ``descriptors.shape``), mapped to [-1, 1], ``F.grid_sample(descriptors, keypoints.view(b, 1,
-1, 2), mode="bilinear", align_corners=True)``, then ``F.normalize(p=2, dim=1)``. The descriptor map comes from
SuperPoint's stride-8 encoder (three 2x2 max-pools) and its ``convDa``/``convDb`` head, itself L2-normalised. The
keypoint count is a dynamic dimension in the deployed ONNX files (LightGlue-ONNX). Tiny widths, random weights.
"""

import torch
from torch import nn


def sample_descriptors(keypoints, descriptors, s: int = 8):
    """Interpolate descriptors at keypoint locations"""
    b, c, h, w = descriptors.shape
    keypoints = keypoints - s / 2 + 0.5
    keypoints /= torch.tensor(
        [(w * s - s / 2 - 0.5), (h * s - s / 2 - 0.5)],
    ).to(keypoints)[None]
    keypoints = keypoints * 2 - 1  # normalize to (-1, 1)
    args = {"align_corners": True} if torch.__version__ >= "1.3" else {}
    descriptors = torch.nn.functional.grid_sample(descriptors, keypoints.view(b, 1, -1, 2), mode="bilinear", **args)
    descriptors = torch.nn.functional.normalize(descriptors.reshape(b, c, -1), p=2, dim=1)
    return descriptors


class SuperPointDescriptors(nn.Module):
    """An image ``[B, 1, H, W]`` (H, W multiples of 8) and keypoints ``[B, K, 2]`` (x, y pixels) -> ``[B, D, K]``."""

    def __init__(self, c=8, d=16):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv1a = nn.Conv2d(1, c, kernel_size=3, stride=1, padding=1)
        self.conv2a = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1)
        self.conv3a = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1)
        self.conv4a = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1)
        self.convDa = nn.Conv2d(c, c, kernel_size=3, stride=1, padding=1)
        self.convDb = nn.Conv2d(c, d, kernel_size=1, stride=1, padding=0)

    def forward(self, image, keypoints):
        x = self.relu(self.conv1a(image))
        x = self.pool(x)
        x = self.relu(self.conv2a(x))
        x = self.pool(x)
        x = self.relu(self.conv3a(x))
        x = self.pool(x)
        x = self.relu(self.conv4a(x))
        cDa = self.relu(self.convDa(x))
        descriptors = self.convDb(cDa)
        descriptors = torch.nn.functional.normalize(descriptors, p=2, dim=1)
        return sample_descriptors(keypoints, descriptors, 8)
