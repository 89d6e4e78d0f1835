"""First Order Motion Model's dense motion and generator warp, written the way AliaksandrSiarohin/first-order-model
writes them (``modules/util.py``, ``modules/dense_motion.py``, ``modules/generator.py``).

``make_coordinate_grid(spatial_size, type)`` (``torch.arange(w).type(type)``, ``2 * (x / (w - 1)) - 1``,
``view(...).repeat(...)``, ``cat`` of ``unsqueeze_``); ``kp2gaussian``; ``DenseMotionNetwork``: sparse motions
identity - kp_driving (optionally through ``torch.matmul(kp_source['jacobian'], torch.inverse(kp_driving['jacobian']))``)
+ kp_source, the source image repeated per keypoint and warped with ``F.grid_sample`` (PyTorch's defaults), heatmaps,
an hourglass, a softmax mask, ``(sparse_motion * mask).sum(dim=1)``, a sigmoid occlusion map; the generator's
``deform_input`` (``F.interpolate`` of the deformation to the feature's size when they differ, ``F.grid_sample``) and
``out * occlusion_map``. Thin-Plate-Spline Motion Model (yoyo-nb/Thin-Plate-Spline-Motion-Model) keeps this frame
(``make_coordinate_grid``, the per-keypoint deformed images stacked, ``grid_sample`` of the encoder features). Tiny
sizes, random weights.
"""

import torch
import torch.nn.functional as F
from torch import nn


def kp2gaussian(kp, spatial_size, kp_variance):
    """
    Transform a keypoint into gaussian like representation
    """
    mean = kp["value"]

    coordinate_grid = make_coordinate_grid(spatial_size, mean.type())
    number_of_leading_dimensions = len(mean.shape) - 1
    shape = (1,) * number_of_leading_dimensions + coordinate_grid.shape
    coordinate_grid = coordinate_grid.view(*shape)
    repeats = mean.shape[:number_of_leading_dimensions] + (1, 1, 1)
    coordinate_grid = coordinate_grid.repeat(*repeats)

    # Preprocess kp shape
    shape = mean.shape[:number_of_leading_dimensions] + (1, 1, 2)
    mean = mean.view(*shape)

    mean_sub = coordinate_grid - mean

    out = torch.exp(-0.5 * (mean_sub**2).sum(-1) / kp_variance)

    return out


def make_coordinate_grid(spatial_size, type):
    """
    Create a meshgrid [-1,1] x [-1,1] of given spatial_size.
    """
    h, w = spatial_size
    x = torch.arange(w).type(type)
    y = torch.arange(h).type(type)

    x = 2 * (x / (w - 1)) - 1
    y = 2 * (y / (h - 1)) - 1

    yy = y.view(-1, 1).repeat(1, w)
    xx = x.view(1, -1).repeat(h, 1)

    meshed = torch.cat([xx.unsqueeze_(2), yy.unsqueeze_(2)], 2)

    return meshed


class Hourglass(nn.Module):
    """One down and one up block (FOMM's has ``num_blocks`` of each)."""

    def __init__(self, block_expansion, in_features):
        super().__init__()
        self.down = nn.Conv2d(in_features, block_expansion, kernel_size=3, padding=1)
        self.down_norm = nn.BatchNorm2d(block_expansion, affine=True)
        self.up = nn.Conv2d(block_expansion, block_expansion, kernel_size=3, padding=1)
        self.up_norm = nn.BatchNorm2d(block_expansion, affine=True)
        self.out_filters = block_expansion + in_features

    def forward(self, x):
        out = F.avg_pool2d(F.relu(self.down_norm(self.down(x))), kernel_size=(2, 2))
        out = F.interpolate(out, scale_factor=2)
        out = F.relu(self.up_norm(self.up(out)))
        return torch.cat([out, x], dim=1)


class DenseMotionNetwork(nn.Module):
    """
    Module that predicting a dense motion from sparse motion representation given by kp_source and kp_driving
    """

    def __init__(self, block_expansion=8, num_kp=4, num_channels=3, estimate_occlusion_map=True, kp_variance=0.01):
        super().__init__()
        self.hourglass = Hourglass(block_expansion=block_expansion, in_features=(num_kp + 1) * (num_channels + 1))

        self.mask = nn.Conv2d(self.hourglass.out_filters, num_kp + 1, kernel_size=(7, 7), padding=(3, 3))

        if estimate_occlusion_map:
            self.occlusion = nn.Conv2d(self.hourglass.out_filters, 1, kernel_size=(7, 7), padding=(3, 3))
        else:
            self.occlusion = None

        self.num_kp = num_kp
        self.kp_variance = kp_variance

    def create_heatmap_representations(self, source_image, kp_driving, kp_source):
        """
        Eq 6. in the paper H_k(z)
        """
        spatial_size = source_image.shape[2:]
        gaussian_driving = kp2gaussian(kp_driving, spatial_size=spatial_size, kp_variance=self.kp_variance)
        gaussian_source = kp2gaussian(kp_source, spatial_size=spatial_size, kp_variance=self.kp_variance)
        heatmap = gaussian_driving - gaussian_source

        # adding background feature
        zeros = torch.zeros(heatmap.shape[0], 1, spatial_size[0], spatial_size[1]).type(heatmap.type())
        heatmap = torch.cat([zeros, heatmap], dim=1)
        heatmap = heatmap.unsqueeze(2)
        return heatmap

    def create_sparse_motions(self, source_image, kp_driving, kp_source):
        """
        Eq 4. in the paper T_{s<-d}(z)
        """
        bs, _, h, w = source_image.shape
        identity_grid = make_coordinate_grid((h, w), type=kp_source["value"].type())
        identity_grid = identity_grid.view(1, 1, h, w, 2)
        coordinate_grid = identity_grid - kp_driving["value"].view(bs, self.num_kp, 1, 1, 2)
        if "jacobian" in kp_driving:
            jacobian = torch.matmul(kp_source["jacobian"], torch.inverse(kp_driving["jacobian"]))
            jacobian = jacobian.unsqueeze(-3).unsqueeze(-3)
            jacobian = jacobian.repeat(1, 1, h, w, 1, 1)
            coordinate_grid = torch.matmul(jacobian, coordinate_grid.unsqueeze(-1))
            coordinate_grid = coordinate_grid.squeeze(-1)

        driving_to_source = coordinate_grid + kp_source["value"].view(bs, self.num_kp, 1, 1, 2)

        # adding background feature
        identity_grid = identity_grid.repeat(bs, 1, 1, 1, 1)
        sparse_motions = torch.cat([identity_grid, driving_to_source], dim=1)
        return sparse_motions

    def create_deformed_source_image(self, source_image, sparse_motions):
        """
        Eq 7. in the paper \\hat{T}_{s<-d}(z)
        """
        bs, _, h, w = source_image.shape
        source_repeat = source_image.unsqueeze(1).unsqueeze(1).repeat(1, self.num_kp + 1, 1, 1, 1, 1)
        source_repeat = source_repeat.view(bs * (self.num_kp + 1), -1, h, w)
        sparse_motions = sparse_motions.view((bs * (self.num_kp + 1), h, w, -1))
        sparse_deformed = F.grid_sample(source_repeat, sparse_motions)
        sparse_deformed = sparse_deformed.view((bs, self.num_kp + 1, -1, h, w))
        return sparse_deformed

    def forward(self, source_image, kp_driving, kp_source):
        bs, _, h, w = source_image.shape

        out_dict = dict()
        heatmap_representation = self.create_heatmap_representations(source_image, kp_driving, kp_source)
        sparse_motion = self.create_sparse_motions(source_image, kp_driving, kp_source)
        deformed_source = self.create_deformed_source_image(source_image, sparse_motion)
        out_dict["sparse_deformed"] = deformed_source

        input = torch.cat([heatmap_representation, deformed_source], dim=2)
        input = input.view(bs, -1, h, w)

        prediction = self.hourglass(input)

        mask = self.mask(prediction)
        mask = F.softmax(mask, dim=1)
        out_dict["mask"] = mask
        mask = mask.unsqueeze(2)
        sparse_motion = sparse_motion.permute(0, 1, 4, 2, 3)
        deformation = (sparse_motion * mask).sum(dim=1)
        deformation = deformation.permute(0, 2, 3, 1)

        out_dict["deformation"] = deformation

        # Sec. 3.2 in the paper
        if self.occlusion:
            occlusion_map = torch.sigmoid(self.occlusion(prediction))
            out_dict["occlusion_map"] = occlusion_map

        return out_dict


class Generator(nn.Module):
    """The generator's warp of its encoder features: ``source [B, 3, H, W]``, keypoints ``[B, K, 2]`` in [-1, 1]
    (and ``jacobian [B, K, 2, 2]`` each when ``estimate_jacobian``) -> ``[B, C, H/2, W/2]``."""

    def __init__(self, num_kp=4, block_expansion=8, estimate_jacobian=False):
        super().__init__()
        self.dense_motion_network = DenseMotionNetwork(num_kp=num_kp)
        self.first = nn.Conv2d(3, block_expansion, kernel_size=7, padding=3)
        self.down = nn.Conv2d(block_expansion, block_expansion, kernel_size=3, padding=1)
        self.final = nn.Conv2d(block_expansion, 3, kernel_size=7, padding=3)
        self.estimate_jacobian = estimate_jacobian

    def deform_input(self, inp, deformation):
        _, h_old, w_old, _ = deformation.shape
        _, _, h, w = inp.shape
        if h_old != h or w_old != w:
            deformation = deformation.permute(0, 3, 1, 2)
            deformation = F.interpolate(deformation, size=(h, w), mode="bilinear")
            deformation = deformation.permute(0, 2, 3, 1)
        return F.grid_sample(inp, deformation)

    def forward(self, source_image, kp_driving_value, kp_source_value, *jacobians):
        kp_driving = {"value": kp_driving_value}
        kp_source = {"value": kp_source_value}
        if self.estimate_jacobian:
            kp_driving["jacobian"], kp_source["jacobian"] = jacobians
        out = self.first(source_image)
        out = F.avg_pool2d(F.relu(self.down(out)), 2)

        dense_motion = self.dense_motion_network(source_image=source_image, kp_driving=kp_driving, kp_source=kp_source)
        occlusion_map = dense_motion["occlusion_map"]
        deformation = dense_motion["deformation"]
        out = self.deform_input(out, deformation)
        if out.shape[2] != occlusion_map.shape[2] or out.shape[3] != occlusion_map.shape[3]:
            occlusion_map = F.interpolate(occlusion_map, size=out.shape[2:], mode="bilinear")
        out = out * occlusion_map
        return torch.sigmoid(self.final(F.interpolate(out, scale_factor=2)))


def example(bs=1, h=32, w=32, num_kp=4, jacobian=False, seed=0):
    """Seeded ``(source, kp_driving, kp_source[, jac_driving, jac_source])``."""
    g = torch.Generator().manual_seed(seed)
    src = torch.rand(bs, 3, h, w, generator=g)
    kp_s = (torch.rand(bs, num_kp, 2, generator=g) * 2 - 1) * 0.8
    kp_d = kp_s + (torch.rand(bs, num_kp, 2, generator=g) * 2 - 1) * 0.1
    out = [src, kp_d, kp_s]
    if jacobian:
        eye = torch.eye(2).expand(bs, num_kp, 2, 2)
        out += [
            eye + 0.1 * torch.randn(bs, num_kp, 2, 2, generator=g),
            eye + 0.1 * torch.randn(bs, num_kp, 2, 2, generator=g),
        ]
    return tuple(out)


def randomize(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()
