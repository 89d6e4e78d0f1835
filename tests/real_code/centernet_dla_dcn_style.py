"""CenterNet / FairMOT ``pose_dla_dcn`` (DLA-34 with DCNv2 in its IDA/DLA up-sampling), written as
xingyizhou/CenterNet and ifzhang/FairMOT write it, with CharlesShang/DCNv2's ``DCN`` ported to
``torchvision.ops.deform_conv2d`` (as the torchvision ports of these repositories do): offsets
``torch.cat((o1, o2), dim=1)`` of a ``torch.chunk`` into three, ``torch.sigmoid(mask)``; depthwise
``ConvTranspose2d`` up-sampling with bilinear ``fill_up_weights``; heads ``hm`` / ``wh`` / ``reg``, and the
decode's ``_nms`` (sigmoid, 3x3 max-pool, keep where equal). Small channels, random init."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import deform_conv2d

BN_MOMENTUM = 0.1


class DCN(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation=1, deformable_groups=1):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.deformable_groups = deformable_groups
        self.weight = nn.Parameter(torch.Tensor(out_channels, in_channels, *self.kernel_size))
        self.bias = nn.Parameter(torch.Tensor(out_channels))
        n = in_channels * self.kernel_size[0] * self.kernel_size[1]
        stdv = 1.0 / math.sqrt(n)
        self.weight.data.uniform_(-stdv, stdv)
        self.bias.data.zero_()
        channels_ = self.deformable_groups * 3 * self.kernel_size[0] * self.kernel_size[1]
        self.conv_offset_mask = nn.Conv2d(
            self.in_channels,
            channels_,
            kernel_size=self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            bias=True,
        )
        # CenterNet zeroes these (init_offset); random here so the offsets are not all zero
        nn.init.normal_(self.conv_offset_mask.weight, std=0.1)

    def forward(self, input):
        out = self.conv_offset_mask(input)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)
        return deform_conv2d(input, offset, self.weight, self.bias, self.stride, self.padding, self.dilation, mask)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, dilation=1):
        super().__init__()
        self.conv1 = nn.Conv2d(
            inplanes, planes, kernel_size=3, stride=stride, padding=dilation, bias=False, dilation=dilation
        )
        self.bn1 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=dilation, bias=False, dilation=dilation)
        self.bn2 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.stride = stride

    def forward(self, x, residual=None):
        if residual is None:
            residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += residual
        return self.relu(out)


class Level(nn.Module):
    """DLA's Tree of level 1 (two BasicBlocks, a Root), with its downsample / project."""

    def __init__(self, in_channels, out_channels, stride=2):
        super().__init__()
        self.tree1 = BasicBlock(in_channels, out_channels, stride)
        self.tree2 = BasicBlock(out_channels, out_channels, 1)
        self.root = nn.Sequential(
            nn.Conv2d(out_channels * 2 + in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels, momentum=BN_MOMENTUM),
            nn.ReLU(inplace=True),
        )
        self.downsample = nn.MaxPool2d(stride, stride=stride)
        self.project = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=1, bias=False),
            nn.BatchNorm2d(out_channels, momentum=BN_MOMENTUM),
        )

    def forward(self, x):
        bottom = self.downsample(x)
        residual = self.project(bottom)
        x1 = self.tree1(x, residual)
        x2 = self.tree2(x1)
        return self.root(torch.cat([x2, x1, bottom], 1))


class DLA(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        self.base_layer = nn.Sequential(
            nn.Conv2d(3, channels[0], kernel_size=7, stride=1, padding=3, bias=False),
            nn.BatchNorm2d(channels[0], momentum=BN_MOMENTUM),
            nn.ReLU(inplace=True),
        )
        self.level0 = self._make_conv_level(channels[0], channels[0])
        self.level1 = self._make_conv_level(channels[0], channels[1], stride=2)
        for i in range(2, len(channels)):
            setattr(self, f"level{i}", Level(channels[i - 1], channels[i]))

    @staticmethod
    def _make_conv_level(inplanes, planes, stride=1):
        return nn.Sequential(
            nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(planes, momentum=BN_MOMENTUM),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        y = []
        x = self.base_layer(x)
        for i in range(len(self.channels)):
            x = getattr(self, f"level{i}")(x)
            y.append(x)
        return y


def fill_up_weights(up):
    w = up.weight.data
    f = math.ceil(w.size(2) / 2)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    for i in range(w.size(2)):
        for j in range(w.size(3)):
            w[0, 0, i, j] = (1 - math.fabs(i / f - c)) * (1 - math.fabs(j / f - c))
    for c in range(1, w.size(0)):
        w[c, 0, :, :] = w[0, 0, :, :]


class DeformConv(nn.Module):
    def __init__(self, chi, cho):
        super().__init__()
        self.actf = nn.Sequential(nn.BatchNorm2d(cho, momentum=BN_MOMENTUM), nn.ReLU(inplace=True))
        self.conv = DCN(chi, cho, kernel_size=(3, 3), stride=1, padding=1, dilation=1, deformable_groups=1)

    def forward(self, x):
        x = self.conv(x)
        x = self.actf(x)
        return x


class IDAUp(nn.Module):
    def __init__(self, o, channels, up_f):
        super().__init__()
        for i in range(1, len(channels)):
            c = channels[i]
            f = int(up_f[i])
            proj = DeformConv(c, o)
            node = DeformConv(o, o)
            up = nn.ConvTranspose2d(o, o, f * 2, stride=f, padding=f // 2, output_padding=0, groups=o, bias=False)
            fill_up_weights(up)
            setattr(self, "proj_" + str(i), proj)
            setattr(self, "up_" + str(i), up)
            setattr(self, "node_" + str(i), node)

    def forward(self, layers, startp, endp):
        for i in range(startp + 1, endp):
            upsample = getattr(self, "up_" + str(i - startp))
            project = getattr(self, "proj_" + str(i - startp))
            layers[i] = upsample(project(layers[i]))
            node = getattr(self, "node_" + str(i - startp))
            layers[i] = node(layers[i] + layers[i - 1])


class DLAUp(nn.Module):
    def __init__(self, startp, channels, scales, in_channels=None):
        super().__init__()
        self.startp = startp
        if in_channels is None:
            in_channels = channels
        self.channels = channels
        channels = list(channels)
        scales = np.array(scales, dtype=int)
        for i in range(len(channels) - 1):
            j = -i - 2
            setattr(self, f"ida_{i}", IDAUp(channels[j], in_channels[j:], scales[j:] // scales[j]))
            scales[j + 1 :] = scales[j]
            in_channels[j + 1 :] = [channels[j] for _ in channels[j + 1 :]]

    def forward(self, layers):
        out = [layers[-1]]  # start with 32
        for i in range(len(layers) - self.startp - 1):
            ida = getattr(self, f"ida_{i}")
            ida(layers, len(layers) - i - 2, len(layers))
            out.insert(0, layers[-1])
        return out


def _nms(heat, kernel=3):
    pad = (kernel - 1) // 2
    hmax = F.max_pool2d(heat, (kernel, kernel), stride=1, padding=pad)
    keep = (hmax == heat).float()
    return heat * keep


class DLASeg(nn.Module):
    def __init__(self, heads, down_ratio=4, final_kernel=1, last_level=5, head_conv=16, channels=None):
        super().__init__()
        channels = channels or [4, 8, 8, 16, 16, 32]
        self.first_level = int(np.log2(down_ratio))
        self.last_level = last_level
        self.base = DLA(channels)
        scales = [2**i for i in range(len(channels[self.first_level :]))]
        self.dla_up = DLAUp(self.first_level, channels[self.first_level :], scales)
        out_channel = channels[self.first_level]
        self.ida_up = IDAUp(
            out_channel,
            channels[self.first_level : self.last_level],
            [2**i for i in range(self.last_level - self.first_level)],
        )
        self.heads = heads
        for head in self.heads:
            classes = self.heads[head]
            fc = nn.Sequential(
                nn.Conv2d(channels[self.first_level], head_conv, kernel_size=3, padding=1, bias=True),
                nn.ReLU(inplace=True),
                nn.Conv2d(head_conv, classes, kernel_size=final_kernel, stride=1, padding=final_kernel // 2, bias=True),
            )
            if "hm" in head:
                fc[-1].bias.data.fill_(-2.19)
            self.__setattr__(head, fc)

    def forward(self, x):
        x = self.base(x)
        x = self.dla_up(x)
        y = []
        for i in range(self.last_level - self.first_level):
            y.append(x[i].clone())
        self.ida_up(y, 0, len(y))
        z = {}
        for head in self.heads:
            z[head] = self.__getattr__(head)(y[-1])
        return [z]


class CenterNetExport(nn.Module):
    """What deployments export: the network and the decode's heat-map NMS (``hm.sigmoid_()``, ``_nms``)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        output = self.net(x)[-1]
        hm = output["hm"].sigmoid_()
        return _nms(hm), output["wh"], output["reg"]


def build(seed=0, channels=None, last_level=5):
    """CenterNet ctdet DLA (heads hm 3 classes, wh 2, reg 2), small channels, BatchNorm statistics randomised.

    Input ``[N, 3, H, W]`` float32, H and W multiples of ``2 ** (len(channels) - 1)`` (32 by default); outputs at
    ``H/4 x W/4``. ``channels`` (one per DLA level, default six) and ``last_level`` make a shallower network
    (``[4, 8, 8, 16]`` with ``last_level=3``: two DCNs instead of sixteen) for quicker exports.
    """
    torch.manual_seed(seed)
    model = CenterNetExport(DLASeg({"hm": 3, "wh": 2, "reg": 2}, channels=channels, last_level=last_level))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()
