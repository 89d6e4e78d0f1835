"""PaddleOCR's DBNet backbone ``ResNet_vd`` with DCN, as its PyTorch ports write it (tiny widths, random weights).

``ppocr/modeling/backbones/det_resnet_vd.py``: ``ConvBNLayer`` with ``is_vd_mode`` pools the shortcut with
``AvgPool2D(kernel_size=2, stride=2, padding=0, ceil_mode=True)`` before its 1x1 conv (PyTorch ports write
``nn.AvgPool2d(kernel_size=2, stride=2, padding=0, ceil_mode=True)``, ``count_include_pad`` left at its
default ``True``); ``DeformableConvV2`` predicts offsets and masks with one conv, splits them, sigmoids the
mask and runs ``DeformConv2D`` with ``deformable_groups=dcn_groups`` (2 in ``BottleneckBlock``). The stem is
three 3x3 ``ConvBNLayer`` (the first stride 2) and ``MaxPool2d(3, 2, 1)``; a stage's first block has stride 2
and the vd shortcut. On a map of odd size the shortcut's last pooling window is partial.
"""

import torch
from torch import nn
from torchvision.ops import DeformConv2d


class DeformableConvV2(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, groups=1):
        super().__init__()
        self.offset_channel = 2 * kernel_size**2 * groups
        self.mask_channel = kernel_size**2 * groups
        self.conv_dcn = DeformConv2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=(kernel_size - 1) // 2, bias=False
        )
        self.conv_offset = nn.Conv2d(
            in_channels, groups * 3 * kernel_size**2, kernel_size, stride=stride, padding=(kernel_size - 1) // 2
        )

    def forward(self, x):
        offset_mask = self.conv_offset(x)
        offset, mask = torch.split(offset_mask, [self.offset_channel, self.mask_channel], dim=1)
        mask = torch.sigmoid(mask)
        return self.conv_dcn(x, offset, mask=mask)


class ConvBNLayer(nn.Module):
    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, dcn_groups=1, is_vd_mode=False, act=None, is_dcn=False
    ):
        super().__init__()
        self.is_vd_mode = is_vd_mode
        self._pool2d_avg = nn.AvgPool2d(kernel_size=2, stride=2, padding=0, ceil_mode=True)
        if not is_dcn:
            self._conv = nn.Conv2d(
                in_channels, out_channels, kernel_size, stride=stride, padding=(kernel_size - 1) // 2, bias=False
            )
        else:
            self._conv = DeformableConvV2(in_channels, out_channels, kernel_size, stride=stride, groups=dcn_groups)
        self._batch_norm = nn.BatchNorm2d(out_channels)
        self.act = act

    def forward(self, inputs):
        if self.is_vd_mode:
            inputs = self._pool2d_avg(inputs)
        y = self._batch_norm(self._conv(inputs))
        return torch.relu(y) if self.act == "relu" else y


class BottleneckBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride, shortcut=True, if_first=False, is_dcn=False):
        super().__init__()
        self.conv0 = ConvBNLayer(in_channels, out_channels, 1, act="relu")
        self.conv1 = ConvBNLayer(out_channels, out_channels, 3, stride=stride, act="relu", is_dcn=is_dcn, dcn_groups=2)
        self.conv2 = ConvBNLayer(out_channels, out_channels * 4, 1, act=None)
        if not shortcut:
            self.short = ConvBNLayer(in_channels, out_channels * 4, 1, stride=1, is_vd_mode=not if_first)
        self.shortcut = shortcut

    def forward(self, inputs):
        y = self.conv2(self.conv1(self.conv0(inputs)))
        short = inputs if self.shortcut else self.short(inputs)
        return torch.relu(short + y)


class TinyResNetVd(nn.Module):
    """Image ``[N, 3, H, W]`` -> the stage's features ``[N, 16, ceil(H / 8), ceil(W / 8)]`` (stem, one DCN stage)."""

    def __init__(self, width=8):
        super().__init__()
        self.conv1_1 = ConvBNLayer(3, width, 3, stride=2, act="relu")
        self.conv1_2 = ConvBNLayer(width, width, 3, stride=1, act="relu")
        self.conv1_3 = ConvBNLayer(width, width, 3, stride=1, act="relu")
        self.pool2d_max = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.stage = BottleneckBlock(width, 4, stride=2, shortcut=False, if_first=False, is_dcn=True)
        for bn in (m for m in self.modules() if isinstance(m, nn.BatchNorm2d)):  # trained-looking statistics
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.running_var, 0.5, 1.5)
            nn.init.normal_(bn.running_mean, 0.0, 0.1)

    def forward(self, x):
        y = self.conv1_3(self.conv1_2(self.conv1_1(x)))
        return self.stage(self.pool2d_max(y))
