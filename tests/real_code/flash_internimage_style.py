"""FlashInternImage's block, written the way OpenGVLab/DCNv4 writes it, around :class:`deform_onnx.ops.dcnv3.DCNv4`.

``classification/models/flash_intern_image.py`` (``StemLayer``, ``InternImageLayer``: LN -> DCNv4 -> residual,
LN -> MLP -> residual, tokens ``[N, L, C]`` with the map's ``shape`` passed along; ``MLPLayer``), with the
``core_op`` swapped from the CUDA ``DCNv4.DCNv4`` to deform_onnx's (same constructor and ``state_dict``).
"""

from torch import nn

from deform_onnx.ops.dcnv3 import DCNv4


class StemLayer(nn.Module):
    def __init__(self, in_chans=3, out_chans=32):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, out_chans // 2, kernel_size=3, stride=2, padding=1)
        self.norm1 = nn.BatchNorm2d(out_chans // 2)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(out_chans // 2, out_chans, kernel_size=3, stride=2, padding=1)
        self.norm2 = nn.LayerNorm(out_chans)

    def forward(self, x):
        x = self.act(self.norm1(self.conv1(x)))
        x = self.conv2(x)
        N, C, H, W = x.shape
        x = x.permute(0, 2, 3, 1)
        x = self.norm2(x)
        return x.reshape(N, H * W, C), (H, W)


class MLPLayer(nn.Module):
    def __init__(self, in_features, hidden_features, mlp_fc2_bias=False):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features, bias=mlp_fc2_bias)

    def forward(self, x, shape, level_idx=0):
        return self.fc2(self.act(self.fc1(x)))


class InternImageLayer(nn.Module):
    def __init__(self, core_op, channels, groups, mlp_ratio=4.0, offset_scale=1.0, dcn_output_bias=False,
                 dw_kernel_size=None, center_feature_scale=False):  # fmt: skip
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.dcn = core_op(channels=channels, group=groups, offset_scale=offset_scale, dw_kernel_size=dw_kernel_size,
                           output_bias=dcn_output_bias, center_feature_scale=center_feature_scale)  # fmt: skip
        self.norm2 = nn.LayerNorm(channels)
        self.mlp = MLPLayer(channels, int(channels * mlp_ratio))

    def forward(self, x, shape, level_idx=0):
        x = x + self.dcn(self.norm1(x), shape)
        x = x + self.mlp(self.norm2(x), shape, level_idx)
        return x


class FlashBlock(nn.Module):
    """Stem + two DCNv4 layers (the second with InternImage-H's depthwise conv and centre feature scale);
    image ``[N, 3, H, W]`` -> ``[N, C, H/4, W/4]``."""

    def __init__(self, channels=32, groups=2):
        super().__init__()
        self.patch_embed = StemLayer(3, channels)
        self.blocks = nn.ModuleList([
            InternImageLayer(DCNv4, channels, groups, offset_scale=0.5),
            InternImageLayer(DCNv4, channels, groups, offset_scale=0.5, dw_kernel_size=3, center_feature_scale=True),
        ])  # fmt: skip

    def forward(self, x):
        x, shape = self.patch_embed(x)
        for blk in self.blocks:
            x = blk(x, shape)
        H, W = shape
        return x.reshape(x.shape[0], H, W, -1).permute(0, 3, 1, 2)
