"""The bundled example: a small DCNv2 backbone and a real photograph to run it on.

``deform-onnx export`` (no model argument) exports :func:`example_model` with
every lowering and checks each file in ONNX Runtime on :func:`load_photo`.

The network is a ResNet-style stack (stem, one plain stage, two deformable
stages) in which every 3x3 convolution of the later stages is a
``torchvision.ops.DeformConv2d`` with a mask (DCNv2, Zhu et al. 2019, "Deformable
ConvNets v2"), fed by a small convolution that predicts the offset and mask from
the block's input. Weights are seeded, and the offset predictors are scaled so
that offsets on the photo are a few pixels: a deformable convolution whose
offsets are near zero is a plain convolution and would hide sampling bugs.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torchvision
from torch import nn

#: Input size of the example (the photo is resized to it).
EXAMPLE_SIZE = 128
#: Seed of every weight in the example.
EXAMPLE_SEED = 0
#: Standard deviation (in pixels) of the offsets the offset predictors produce
#: on unit-scale features; on the photo the mean |offset| is about 1-3 px.
OFFSET_STD = 2.0

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


class DeformBlock(nn.Module):
    """A residual block whose 3x3 convolutions are DCNv2 (``DeformConv2d`` with a mask).

    Each deformable convolution has its own predictor: a 3x3 convolution over
    the same input producing ``3 * offset_groups * 9`` channels, split into the
    offset (``2 * offset_groups * 9`` channels, (dy, dx) per kernel tap as in
    torchvision) and the mask logits (``offset_groups * 9`` channels, through a
    sigmoid).

    Args:
        in_channels, out_channels: channels of the block's input and output.
        stride: stride of the first deformable convolution (and of the shortcut).
        groups: groups of both deformable convolutions.
        offset_groups: offset groups of both deformable convolutions.

    Shapes: input ``[N, in_channels, H, W]`` float32 -> output
    ``[N, out_channels, ceil(H / stride), ceil(W / stride)]``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, groups: int = 1, offset_groups: int = 1):
        super().__init__()
        self.offset_groups = offset_groups
        taps = 9
        self.pred1 = nn.Conv2d(in_channels, 3 * offset_groups * taps, 3, stride=stride, padding=1)
        self.conv1 = torchvision.ops.DeformConv2d(
            in_channels, out_channels, 3, stride=stride, padding=1, groups=groups, bias=False
        )
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.pred2 = nn.Conv2d(out_channels, 3 * offset_groups * taps, 3, padding=1)
        self.conv2 = torchvision.ops.DeformConv2d(out_channels, out_channels, 3, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = (
            nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )

    def offset_and_mask(self, pred: nn.Conv2d, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The offset ``[N, 2*G*9, Ho, Wo]`` (pixels) and mask ``[N, G*9, Ho, Wo]`` (0..1) predicted from ``x``."""
        out = pred(x)
        split = 2 * self.offset_groups * 9
        return out[:, :split], torch.sigmoid(out[:, split:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, Ci, H, W] -> [N, Co, Ho, Wo]``: two DCNv2 layers (offsets and masks predicted from their input), a residual."""
        offset, mask = self.offset_and_mask(self.pred1, x)
        y = torch.relu(self.bn1(self.conv1(x, offset, mask)))
        offset, mask = self.offset_and_mask(self.pred2, y)
        y = self.bn2(self.conv2(y, offset, mask))
        return torch.relu(y + self.shortcut(x))


class BasicBlock(nn.Module):
    """A plain ResNet basic block (two 3x3 convolutions), ``[N, C, H, W] -> [N, C, H, W]``."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, C, H, W] -> [N, C, H, W]``: two 3x3 convolutions and a residual."""
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class ExampleDCNv2(nn.Module):
    """A small DCNv2 backbone: ``[N, 3, H, W]`` image -> ``[N, 64, H/16, W/16]`` feature map.

    Layout (channels, resolution for a 128x128 input):

    - stem: 3x3 conv stride 2 + BN + ReLU (16, 64x64), 3x3 max pool stride 2 (16, 32x32);
    - stage 1: plain basic block (16, 32x32);
    - stage 2: DCNv2 block, stride 2 (32, 16x16);
    - stage 3: DCNv2 block, stride 2, groups 2, offset groups 2 (64, 8x8).

    Input: float32, ImageNet-normalised (see :func:`load_photo`); any N, and
    any H, W (the output is ``ceil`` of each stride-2 step).
    """

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.stage1 = BasicBlock(16)
        self.stage2 = DeformBlock(16, 32, stride=2)
        self.stage3 = DeformBlock(32, 64, stride=2, groups=2, offset_groups=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W] -> [N, 64, H/16, W/16]``: the stem and three stages."""
        return self.stage3(self.stage2(self.stage1(self.stem(x))))

    def deform_blocks(self) -> list[DeformBlock]:
        """The model's deformable blocks, in order."""
        return [m for m in self.modules() if isinstance(m, DeformBlock)]


def _init_weights(model: ExampleDCNv2, seed: int) -> None:
    """Seeded weights that keep features near unit scale, and offsets of about OFFSET_STD px."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, torchvision.ops.DeformConv2d)):
                fan_in = module.weight[0].numel()
                # He initialisation: unit-scale activations through ReLU.
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if module.bias is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
            elif isinstance(module, nn.BatchNorm2d):
                # Non-trivial running statistics, so that BN folding is exercised too.
                if (
                    module.weight is None
                    or module.bias is None
                    or module.running_mean is None
                    or module.running_var is None
                ):
                    # affine=False or track_running_stats=False: not the example's layers
                    raise TypeError(f"example {module} lacks weight, bias or running statistics")
                module.weight.copy_(1.0 + 0.1 * torch.randn(module.weight.shape, generator=gen))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
                module.running_mean.copy_(0.1 * torch.randn(module.running_mean.shape, generator=gen))
                module.running_var.copy_(1.0 + 0.1 * torch.rand(module.running_var.shape, generator=gen))
        for block in model.deform_blocks():
            for pred in (block.pred1, block.pred2):
                split = 2 * block.offset_groups * 9
                # Offsets: OFFSET_STD px per unit of input; mask logits: about unit scale
                # (masks spread over (0, 1) rather than sitting at 0.5).
                if pred.bias is None:
                    raise TypeError(f"example offset/mask conv {pred} has no bias: the example's have one")
                pred.weight[:split] *= OFFSET_STD / math.sqrt(2.0)
                pred.bias[:split] = OFFSET_STD * 0.5 * torch.randn(split, generator=gen)
                pred.weight[split:] /= math.sqrt(2.0)


def example_model(seed: int = EXAMPLE_SEED) -> ExampleDCNv2:
    """The example network with seeded weights, in eval mode."""
    model = ExampleDCNv2()
    _init_weights(model, seed)
    return model.eval()


def load_photo(size: int | tuple[int, int] = EXAMPLE_SIZE, name: str = "astronaut") -> torch.Tensor:
    """A real photograph shipped with scikit-image (no download), ready for an ImageNet model.

    Args:
        size: output ``H`` and ``W`` (an int for a square image).
        name: a colour image of ``skimage.data`` (``"astronaut"``, 512x512, or ``"chelsea"``, 300x451).

    Returns:
        float32 tensor ``[1, 3, H, W]``: RGB resized with antialiasing
        (``skimage.transform.resize``), scaled to [0, 1] and normalised with
        the ImageNet mean and standard deviation.

    Raises:
        ValueError: ``name`` is not a colour image of ``skimage.data``.
        ModuleNotFoundError: scikit-image is not installed (the message names the
            ``deform-onnx[example]`` extra).
    """
    from ..core.extras import require_skimage

    require_skimage()
    import skimage.data
    import skimage.transform

    h, w = (size, size) if isinstance(size, int) else size
    loader = getattr(skimage.data, name, None)
    image = loader() if callable(loader) else None
    if image is None or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{name!r} is not a colour image of skimage.data; use 'astronaut' or 'chelsea'")
    image = skimage.transform.resize(image, (h, w), anti_aliasing=True)  # float64 in [0, 1]
    image = (image - np.array(_IMAGENET_MEAN)) / np.array(_IMAGENET_STD)
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32))[None]


def offset_stats(model: ExampleDCNv2, x: torch.Tensor) -> list[float]:
    """Mean |offset| in pixels of each deformable convolution of ``model`` on input ``x`` (in forward order)."""
    stats: list[float] = []
    handles = []
    for block in model.deform_blocks():
        split = 2 * block.offset_groups * 9
        for pred in (block.pred1, block.pred2):
            handles.append(
                pred.register_forward_hook(
                    lambda m, a, out, split=split: stats.append(float(out[:, :split].abs().mean()))
                )
            )
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return stats
