"""An mmdet ResNet with DCNv2 in stages 3 and 4, written the way open-mmlab/mmdetection and mmcv write it.

mmcv ``ops/modulated_deform_conv.py`` ``ModulatedDeformConv2dPack``: ``conv_offset`` (one ``nn.Conv2d`` to
``deform_groups * 3 * kh * kw`` channels, same stride/padding/dilation as the DCN, zero-initialised in mmcv),
``o1, o2, mask = torch.chunk(out, 3, dim=1)``, ``offset = torch.cat((o1, o2), dim=1)``, ``mask = torch.sigmoid(mask)``,
``modulated_deform_conv2d(x, offset, mask, weight, bias, stride, padding, dilation, groups, deform_groups)``, here
written with ``torchvision.ops.deform_conv2d`` (same offset layout). mmdet ``backbones/resnet.py`` ``Bottleneck``
(style ``pytorch``: stride on the 3x3; ``dcn=dict(type='DCNv2', deform_groups=1, fallback_on_stride=False)``,
``stage_with_dcn=(False, False, True, True)``: the 3x3 is ``build_conv_layer(dcn, ...)``). Tiny widths, one block a
stage, random weights; offsets drawn non-zero so the sampling is exercised.
"""

import math

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.nn.modules.utils import _pair


class ModulatedDeformConv2d(nn.Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        deform_groups=1,
        bias=True,
    ):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.deform_groups = deform_groups
        self.weight = nn.Parameter(torch.Tensor(out_channels, in_channels // groups, *self.kernel_size))
        if bias:
            self.bias = nn.Parameter(torch.Tensor(out_channels))
        else:
            self.register_parameter("bias", None)
        self.init_weights()

    def init_weights(self):
        n = self.in_channels
        for k in self.kernel_size:
            n *= k
        stdv = 1.0 / math.sqrt(n)
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.zero_()


class ModulatedDeformConv2dPack(ModulatedDeformConv2d):
    """A ModulatedDeformable Conv Encapsulation that acts as normal Conv layers."""

    _version = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_offset = nn.Conv2d(
            self.in_channels,
            self.deform_groups * 3 * self.kernel_size[0] * self.kernel_size[1],
            kernel_size=self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            bias=True,
        )
        self.init_weights()

    def init_weights(self):
        super().init_weights()
        if hasattr(self, "conv_offset"):
            # mmcv zero-initialises; drawn here so a random-weight test samples off the grid
            nn.init.normal_(self.conv_offset.weight, std=0.05)
            nn.init.normal_(self.conv_offset.bias, std=0.5)

    def forward(self, x):
        out = self.conv_offset(x)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)
        return torchvision.ops.deform_conv2d(
            x, offset, self.weight, self.bias, self.stride, self.padding, self.dilation, mask
        )


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None, dcn=None):
        super().__init__()
        self.conv1_stride = 1
        self.conv2_stride = stride
        self.with_dcn = dcn is not None
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, stride=self.conv1_stride, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        fallback_on_stride = False
        if self.with_dcn:
            fallback_on_stride = dcn.pop("fallback_on_stride", False)
        if not self.with_dcn or fallback_on_stride:
            self.conv2 = nn.Conv2d(
                planes, planes, kernel_size=3, stride=self.conv2_stride, padding=dilation, dilation=dilation, bias=False
            )
        else:
            assert dcn.get("type") == "DCNv2"
            self.conv2 = ModulatedDeformConv2dPack(
                planes,
                planes,
                kernel_size=3,
                stride=self.conv2_stride,
                padding=dilation,
                dilation=dilation,
                deform_groups=dcn.get("deform_groups", 1),
                bias=False,
            )
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        def _inner_forward(x):
            identity = x
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)

            out = self.conv2(out)
            out = self.bn2(out)
            out = self.relu(out)

            out = self.conv3(out)
            out = self.bn3(out)

            if self.downsample is not None:
                identity = self.downsample(x)

            out += identity

            return out

        out = _inner_forward(x)
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    """``x [B, 3, H, W]`` -> the outputs of stages 2 to 4 (``out_indices=(1, 2, 3)``), strides 8, 16, 32."""

    def __init__(
        self,
        base=8,
        stage_with_dcn=(False, False, True, True),
        deform_groups=1,
        out_indices=(1, 2, 3),
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.out_indices = out_indices
        self.res_layers = []
        inplanes = base
        for i, with_dcn in enumerate(stage_with_dcn):
            planes = base * 2**i
            stride = 1 if i == 0 else 2
            dcn = dict(type="DCNv2", deform_groups=deform_groups, fallback_on_stride=False) if with_dcn else None
            downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * Bottleneck.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
            layer = nn.Sequential(Bottleneck(inplanes, planes, stride=stride, downsample=downsample, dcn=dcn))
            inplanes = planes * Bottleneck.expansion
            layer_name = f"layer{i + 1}"
            self.add_module(layer_name, layer)
            self.res_layers.append(layer_name)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        outs = []
        for i, layer_name in enumerate(self.res_layers):
            res_layer = getattr(self, layer_name)
            x = res_layer(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)


def build(deform_groups=1, seed=0):
    torch.manual_seed(seed)
    model = ResNet(deform_groups=deform_groups)
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


del F
