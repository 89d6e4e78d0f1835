"""LivePortrait's warping network, written the way KwaiVGI/LivePortrait writes it (``src/modules``).

``util.py`` ``make_coordinate_grid((d, h, w), ref)`` (``torch.arange(...).type(ref.dtype)``, ``2 * (x / (w - 1)) - 1``,
``view(...).repeat(...)``, ``cat`` of ``unsqueeze_``) and ``kp2gaussian``; ``dense_motion.py`` ``DenseMotionNetwork``
(``compress`` Conv3d 1x1 + BatchNorm3d, sparse motions identity - kp_driving + kp_source, the feature repeated per
keypoint and warped with 5-D ``F.grid_sample(..., align_corners=False)``, heatmaps, a 3-D hourglass, a softmax mask
over the ``num_kp + 1`` motions, ``(sparse_motion * mask).sum(dim=1)``, an occlusion map from the prediction viewed
as 2-D); ``warping_network.py`` ``WarpingNetwork`` (``F.grid_sample(feature_3d, deformation, align_corners=False)``,
``out.view(bs, c * d, h, w)``, ``third`` / ``fourth`` 2-D convs, ``out * occlusion_map``). The stitching MLP
(``stitching_retargeting_network.py``) on the keypoints. Tiny sizes, random weights.
"""

import torch
import torch.nn.functional as F
from torch import nn


def make_coordinate_grid(spatial_size, ref, **kwargs):
    d, h, w = spatial_size
    x = torch.arange(w).type(ref.dtype).to(ref.device)
    y = torch.arange(h).type(ref.dtype).to(ref.device)
    z = torch.arange(d).type(ref.dtype).to(ref.device)

    # NOTE: must be right-down-in
    x = 2 * (x / (w - 1)) - 1  # the x axis faces to the right
    y = 2 * (y / (h - 1)) - 1  # the y axis faces to the bottom
    z = 2 * (z / (d - 1)) - 1  # the z axis faces to the inner

    yy = y.view(1, -1, 1).repeat(d, 1, w)
    xx = x.view(1, 1, -1).repeat(d, h, 1)
    zz = z.view(-1, 1, 1).repeat(1, h, w)

    meshed = torch.cat([xx.unsqueeze_(3), yy.unsqueeze_(3), zz.unsqueeze_(3)], 3)
    return meshed


def kp2gaussian(kp, spatial_size, kp_variance):
    """
    Transform a keypoint into gaussian like representation
    """
    mean = kp

    coordinate_grid = make_coordinate_grid(spatial_size, mean)
    number_of_leading_dimensions = len(mean.shape) - 1
    shape = (1,) * number_of_leading_dimensions + coordinate_grid.shape
    coordinate_grid = coordinate_grid.view(*shape)
    repeats = mean.shape[:number_of_leading_dimensions] + (1, 1, 1, 1)
    coordinate_grid = coordinate_grid.repeat(*repeats)

    # Preprocess kp shape
    shape = mean.shape[:number_of_leading_dimensions] + (1, 1, 1, 3)
    mean = mean.view(*shape)

    mean_sub = coordinate_grid - mean

    out = torch.exp(-0.5 * (mean_sub**2).sum(-1) / kp_variance)

    return out


class SameBlock3d(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.conv = nn.Conv3d(in_features, out_features, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm3d(out_features, affine=True)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


class Hourglass(nn.Module):
    """One down and one up block (LivePortrait's has ``num_blocks`` of each)."""

    def __init__(self, in_features, block_expansion):
        super().__init__()
        self.down = nn.Conv3d(in_features, block_expansion, kernel_size=3, padding=1)
        self.down_norm = nn.BatchNorm3d(block_expansion, affine=True)
        self.up = nn.Conv3d(block_expansion, block_expansion, kernel_size=3, padding=1)
        self.up_norm = nn.BatchNorm3d(block_expansion, affine=True)
        self.out_filters = block_expansion + in_features

    def forward(self, x):
        out = F.avg_pool3d(F.relu(self.down_norm(self.down(x))), kernel_size=(1, 2, 2))
        out = F.interpolate(out, scale_factor=(1, 2, 2))
        out = F.relu(self.up_norm(self.up(out)))
        return torch.cat([out, x], dim=1)


class DenseMotionNetwork(nn.Module):
    def __init__(self, block_expansion=8, num_kp=4, feature_channel=8, reshape_depth=4, compress=4):
        super().__init__()
        self.hourglass = Hourglass(in_features=(num_kp + 1) * (compress + 1), block_expansion=block_expansion)
        self.mask = nn.Conv3d(self.hourglass.out_filters, num_kp + 1, kernel_size=7, padding=3)
        self.compress = nn.Conv3d(feature_channel, compress, kernel_size=1)
        self.norm = nn.BatchNorm3d(compress, affine=True)
        self.num_kp = num_kp
        self.occlusion = nn.Conv2d(self.hourglass.out_filters * reshape_depth, 1, kernel_size=7, padding=3)

    def create_sparse_motions(self, feature, kp_driving, kp_source):
        bs, _, d, h, w = feature.shape  # (bs, 4, 16, 64, 64)
        identity_grid = make_coordinate_grid((d, h, w), ref=kp_source)  # (16, 64, 64, 3)
        identity_grid = identity_grid.view(1, 1, d, h, w, 3)  # (1, 1, d=16, h=64, w=64, 3)
        coordinate_grid = identity_grid - kp_driving.view(bs, self.num_kp, 1, 1, 1, 3)

        k = coordinate_grid.shape[1]

        # NOTE: there lacks an one-order flow
        driving_to_source = coordinate_grid + kp_source.view(bs, self.num_kp, 1, 1, 1, 3)  # (bs, num_kp, d, h, w, 3)

        # adding background feature
        identity_grid = identity_grid.repeat(bs, 1, 1, 1, 1, 1)
        sparse_motions = torch.cat([identity_grid, driving_to_source], dim=1)  # (bs, 1+num_kp, d, h, w, 3)
        del k
        return sparse_motions

    def create_deformed_feature(self, feature, sparse_motions):
        bs, _, d, h, w = feature.shape
        feature_repeat = feature.unsqueeze(1).unsqueeze(1).repeat(1, self.num_kp + 1, 1, 1, 1, 1, 1)
        feature_repeat = feature_repeat.view(bs * (self.num_kp + 1), -1, d, h, w)
        sparse_motions = sparse_motions.view((bs * (self.num_kp + 1), d, h, w, -1))
        sparse_deformed = F.grid_sample(feature_repeat, sparse_motions, align_corners=False)
        sparse_deformed = sparse_deformed.view((bs, self.num_kp + 1, -1, d, h, w))
        return sparse_deformed

    def create_heatmap_representations(self, feature, kp_driving, kp_source):
        spatial_size = feature.shape[3:]  # (d=16, h=64, w=64)
        gaussian_driving = kp2gaussian(kp_driving, spatial_size=spatial_size, kp_variance=0.01)
        gaussian_source = kp2gaussian(kp_source, spatial_size=spatial_size, kp_variance=0.01)
        heatmap = gaussian_driving - gaussian_source  # (bs, num_kp, d, h, w)

        # adding background feature
        zeros = (
            torch.zeros(heatmap.shape[0], 1, spatial_size[0], spatial_size[1], spatial_size[2])
            .type(heatmap.dtype)
            .to(heatmap.device)
        )
        heatmap = torch.cat([zeros, heatmap], dim=1)
        heatmap = heatmap.unsqueeze(2)  # (bs, 1+num_kp, 1, d, h, w)
        return heatmap

    def forward(self, feature, kp_driving, kp_source):
        bs, _, d, h, w = feature.shape

        feature = self.compress(feature)
        feature = self.norm(feature)
        feature = F.relu(feature)

        out_dict = dict()

        sparse_motion = self.create_sparse_motions(feature, kp_driving, kp_source)
        deformed_feature = self.create_deformed_feature(feature, sparse_motion)
        heatmap = self.create_heatmap_representations(deformed_feature, kp_driving, kp_source)

        input = torch.cat([heatmap, deformed_feature], dim=2)
        input = input.view(bs, -1, d, h, w)

        prediction = self.hourglass(input)

        mask = self.mask(prediction)
        mask = F.softmax(mask, dim=1)
        out_dict["mask"] = mask
        mask = mask.unsqueeze(2)
        sparse_motion = sparse_motion.permute(0, 1, 5, 2, 3, 4)
        deformation = (sparse_motion * mask).sum(dim=1)
        deformation = deformation.permute(0, 2, 3, 4, 1)

        out_dict["deformation"] = deformation

        bs, _, d, h, w = prediction.shape
        prediction_reshape = prediction.view(bs, -1, h, w)
        occlusion_map = torch.sigmoid(self.occlusion(prediction_reshape))
        out_dict["occlusion_map"] = occlusion_map

        return out_dict


class WarpingNetwork(nn.Module):
    """``feature_3d [B, C, D, H, W]``, ``kp_driving``/``kp_source [B, K, 3]`` in [-1, 1] -> dict of
    ``occlusion_map [B, 1, H, W]``, ``deformation [B, D, H, W, 3]``, ``out [B, C*D, H, W]``."""

    def __init__(self, num_kp=4, block_expansion=8, feature_channel=8, reshape_depth=4):
        super().__init__()
        self.dense_motion_network = DenseMotionNetwork(
            block_expansion=block_expansion, num_kp=num_kp, feature_channel=feature_channel, reshape_depth=reshape_depth
        )
        self.third = nn.Conv2d(feature_channel * reshape_depth, block_expansion, kernel_size=3, padding=1)
        self.fourth = nn.Conv2d(block_expansion, block_expansion, kernel_size=1)
        self.flag_use_occlusion_map = True

    def deform_input(self, inp, deformation):
        return F.grid_sample(inp, deformation, align_corners=False)

    def forward(self, feature_3d, kp_driving, kp_source):
        dense_motion = self.dense_motion_network(feature=feature_3d, kp_driving=kp_driving, kp_source=kp_source)
        if "occlusion_map" in dense_motion:
            occlusion_map = dense_motion["occlusion_map"]  # Bx1x64x64
        else:
            occlusion_map = None

        deformation = dense_motion["deformation"]  # Bx16x64x64x3
        out = self.deform_input(feature_3d, deformation)  # Bx32x16x64x64

        bs, c, d, h, w = out.shape  # Bx32x16x64x64
        out = out.view(bs, c * d, h, w)  # -> Bx512x64x64
        out = self.third(out)  # -> Bx256x64x64
        out = self.fourth(out)  # -> Bx256x64x64

        if self.flag_use_occlusion_map and (occlusion_map is not None):
            out = out * occlusion_map

        ret_dct = {
            "occlusion_map": occlusion_map,
            "deformation": deformation,
            "out": out,
        }

        return ret_dct


class StitchingRetargetingNetwork(nn.Module):
    def __init__(self, input_size=4 * 3 * 2 + 2, hidden_sizes=(16, 16), output_size=4 * 3 + 2):
        super().__init__()
        layers = []
        for i in range(len(hidden_sizes)):
            if i == 0:
                layers.append(nn.Linear(input_size, hidden_sizes[i]))
            else:
                layers.append(nn.Linear(hidden_sizes[i - 1], hidden_sizes[i]))
            layers.append(nn.ReLU(inplace=True))
        layers.append(nn.Linear(hidden_sizes[-1], output_size))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)


class WarpWithStitching(nn.Module):
    """The pipeline's ``stitching`` then ``warp_decode``: the stitching MLP moves the driving keypoints
    (``kp_driving + delta[..., :K*3].reshape(bs, K, 3)`` and a shared ``delta_tx_ty``), then the warp."""

    def __init__(self, num_kp=4):
        super().__init__()
        self.num_kp = num_kp
        self.stitching = StitchingRetargetingNetwork(input_size=num_kp * 3 * 2, output_size=num_kp * 3 + 2)
        self.warp = WarpingNetwork(num_kp=num_kp)

    def forward(self, feature_3d, kp_driving, kp_source):
        bs, num_kp = kp_source.shape[:2]
        feat_stiching = torch.cat([kp_source.view(bs, -1), kp_driving.view(bs, -1)], dim=1)
        delta = self.stitching(feat_stiching) * 0.01
        delta_exp = delta[..., : 3 * num_kp].reshape(bs, num_kp, 3)
        delta_tx_ty = delta[..., 3 * num_kp : 3 * num_kp + 2].reshape(bs, 1, 2)
        kp_driving_new = kp_driving + delta_exp
        kp_driving_new[..., :2] += delta_tx_ty
        return self.warp(feature_3d, kp_driving_new, kp_source)["out"]


def example(bs=1, c=8, d=4, h=16, w=16, num_kp=4, seed=0):
    """Seeded ``(feature_3d, kp_driving, kp_source)``: keypoints in [-0.8, 0.8]."""
    g = torch.Generator().manual_seed(seed)
    feature = torch.randn(bs, c, d, h, w, generator=g)
    kp_s = (torch.rand(bs, num_kp, 3, generator=g) * 2 - 1) * 0.8
    kp_d = kp_s + (torch.rand(bs, num_kp, 3, generator=g) * 2 - 1) * 0.1
    return feature, kp_d, kp_s


def randomize(model, seed=0):
    """BatchNorm statistics drawn so the random-weight network is not at its init values."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm3d | nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()
