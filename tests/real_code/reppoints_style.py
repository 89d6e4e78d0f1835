"""RepPoints' head (``mmdet/models/dense_heads/reppoints_head.py``), written the way mmdet writes it (one FPN
level, tiny widths, random weights; mmcv's DCNv1 ``DeformConv2d`` as ``torchvision.ops.DeformConv2d``).

``dcn_base_offset``: numpy ``np.repeat`` / ``np.tile`` / ``np.stack`` of ``np.arange(-pad, pad + 1)``, a float64
``torch.tensor`` attribute (not a buffer) cast with ``type_as``; ``points_init`` is ``0`` for ``center_init`` or
the base offset scaled by its ``max()`` with ``use_grid_points``; the offset of both DCNs is
``pts_out_init_grad_mul - dcn_base_offset`` with the ``gradient_mul`` detach mix; the refined points are
``pts_out_refine + pts_out_init.detach()``, turned into boxes by ``points2bbox`` (``moment``: ``torch.std`` of
the points and the ``moment_transfer`` parameter's own detach mix, or ``minmax``). ``use_grid_points=True``
(RepPoints' ``bbox_r50_grid`` configs): ``gen_grid_from_reg`` builds the 3x3 grid of a box with
``torch.linspace(0., 1., k)``, ``[:, [0], ...]`` list indexing and ``repeat``.
"""

import numpy as np
import torch
from torch import nn
from torchvision.ops import DeformConv2d


class ConvModule(nn.Module):
    """mmcv's ``ConvModule`` with ``norm_cfg=dict(type='GN', num_groups=..)``: conv (no bias), GN, ReLU."""

    def __init__(self, in_channels, out_channels, num_groups=4):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.gn = nn.GroupNorm(num_groups, out_channels)
        self.activate = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.activate(self.gn(self.conv(x)))


class RepPointsHead(nn.Module):
    """One level: feature ``[N, C, H, W]`` -> ``(cls_out [N, K, H, W], bbox [N, 4, H, W])`` (the test-time outputs)."""

    def __init__(
        self,
        num_classes=3,
        in_channels=8,
        feat_channels=8,
        point_feat_channels=8,
        stacked_convs=2,
        num_points=9,
        gradient_mul=0.1,
        point_base_scale=4,
        use_grid_points=False,
        center_init=True,
        transform_method="moment",
        moment_mul=0.01,
    ):
        super().__init__()
        self.num_points = num_points
        self.point_feat_channels = point_feat_channels
        self.use_grid_points = use_grid_points
        self.center_init = center_init
        self.in_channels, self.feat_channels, self.stacked_convs = in_channels, feat_channels, stacked_convs
        self.cls_out_channels = num_classes

        # we use deform conv to extract points features
        self.dcn_kernel = int(np.sqrt(num_points))
        self.dcn_pad = int((self.dcn_kernel - 1) / 2)
        assert self.dcn_kernel * self.dcn_kernel == num_points, "The points number should be a square number."
        assert self.dcn_kernel % 2 == 1, "The points number should be an odd square number."
        dcn_base = np.arange(-self.dcn_pad, self.dcn_pad + 1).astype(np.float64)
        dcn_base_y = np.repeat(dcn_base, self.dcn_kernel)
        dcn_base_x = np.tile(dcn_base, self.dcn_kernel)
        dcn_base_offset = np.stack([dcn_base_y, dcn_base_x], axis=1).reshape(-1)
        self.dcn_base_offset = torch.tensor(dcn_base_offset).view(1, -1, 1, 1)

        self.gradient_mul = gradient_mul
        self.point_base_scale = point_base_scale
        self.transform_method = transform_method
        if self.transform_method == "moment":
            self.moment_transfer = nn.Parameter(data=torch.zeros(2), requires_grad=True)
            self.moment_mul = moment_mul
        self._init_layers()

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            self.cls_convs.append(ConvModule(chn, self.feat_channels))
            self.reg_convs.append(ConvModule(chn, self.feat_channels))
        pts_out_dim = 4 if self.use_grid_points else 2 * self.num_points
        self.reppoints_cls_conv = DeformConv2d(
            self.feat_channels, self.point_feat_channels, self.dcn_kernel, 1, self.dcn_pad
        )
        self.reppoints_cls_out = nn.Conv2d(self.point_feat_channels, self.cls_out_channels, 1, 1, 0)
        self.reppoints_pts_init_conv = nn.Conv2d(self.feat_channels, self.point_feat_channels, 3, 1, 1)
        self.reppoints_pts_init_out = nn.Conv2d(self.point_feat_channels, pts_out_dim, 1, 1, 0)
        self.reppoints_pts_refine_conv = DeformConv2d(
            self.feat_channels, self.point_feat_channels, self.dcn_kernel, 1, self.dcn_pad
        )
        self.reppoints_pts_refine_out = nn.Conv2d(self.point_feat_channels, pts_out_dim, 1, 1, 0)

    def points2bbox(self, pts, y_first=True):
        """Converting the points set into bounding box."""
        pts_reshape = pts.view(pts.shape[0], -1, 2, *pts.shape[2:])
        pts_y = pts_reshape[:, :, 0, ...] if y_first else pts_reshape[:, :, 1, ...]
        pts_x = pts_reshape[:, :, 1, ...] if y_first else pts_reshape[:, :, 0, ...]
        if self.transform_method == "minmax":
            bbox_left = pts_x.min(dim=1, keepdim=True)[0]
            bbox_right = pts_x.max(dim=1, keepdim=True)[0]
            bbox_up = pts_y.min(dim=1, keepdim=True)[0]
            bbox_bottom = pts_y.max(dim=1, keepdim=True)[0]
            bbox = torch.cat([bbox_left, bbox_up, bbox_right, bbox_bottom], dim=1)
        elif self.transform_method == "moment":
            pts_y_mean = pts_y.mean(dim=1, keepdim=True)
            pts_x_mean = pts_x.mean(dim=1, keepdim=True)
            pts_y_std = torch.std(pts_y - pts_y_mean, dim=1, keepdim=True)
            pts_x_std = torch.std(pts_x - pts_x_mean, dim=1, keepdim=True)
            moment_transfer = (self.moment_transfer * self.moment_mul) + (
                self.moment_transfer.detach() * (1 - self.moment_mul)
            )
            moment_width_transfer = moment_transfer[0]
            moment_height_transfer = moment_transfer[1]
            half_width = pts_x_std * torch.exp(moment_width_transfer)
            half_height = pts_y_std * torch.exp(moment_height_transfer)
            bbox = torch.cat(
                [pts_x_mean - half_width, pts_y_mean - half_height, pts_x_mean + half_width, pts_y_mean + half_height],
                dim=1,
            )
        else:
            raise NotImplementedError
        return bbox

    def gen_grid_from_reg(self, reg, previous_boxes):
        """Base on the previous bboxes and regression values, we compute the regressed bboxes and generate the
        grids on the bboxes."""
        b, _, h, w = reg.shape
        bxy = (previous_boxes[:, :2, ...] + previous_boxes[:, 2:, ...]) / 2.0
        bwh = (previous_boxes[:, 2:, ...] - previous_boxes[:, :2, ...]).clamp(min=1e-6)
        grid_topleft = bxy + bwh * reg[:, :2, ...] - 0.5 * bwh * torch.exp(reg[:, 2:, ...])
        grid_wh = bwh * torch.exp(reg[:, 2:, ...])
        grid_left = grid_topleft[:, [0], ...]
        grid_top = grid_topleft[:, [1], ...]
        grid_width = grid_wh[:, [0], ...]
        grid_height = grid_wh[:, [1], ...]
        intervel = torch.linspace(0.0, 1.0, self.dcn_kernel).view(1, self.dcn_kernel, 1, 1).type_as(reg)
        grid_x = grid_left + grid_width * intervel
        grid_x = grid_x.unsqueeze(1).repeat(1, self.dcn_kernel, 1, 1, 1)
        grid_x = grid_x.view(b, -1, h, w)
        grid_y = grid_top + grid_height * intervel
        grid_y = grid_y.unsqueeze(2).repeat(1, 1, self.dcn_kernel, 1, 1)
        grid_y = grid_y.view(b, -1, h, w)
        grid_yx = torch.stack([grid_y, grid_x], dim=2)
        grid_yx = grid_yx.view(b, -1, h, w)
        regressed_bbox = torch.cat([grid_left, grid_top, grid_left + grid_width, grid_top + grid_height], 1)
        return grid_yx, regressed_bbox

    def forward(self, x):
        """``forward_single`` at test time."""
        dcn_base_offset = self.dcn_base_offset.type_as(x)
        # If we use center_init, the initial reppoints is from center points.
        # If we use bounding bbox representation, the initial reppoints is
        #   from regular grid placed on a pre-defined bbox.
        if self.use_grid_points or not self.center_init:
            scale = self.point_base_scale / 2
            points_init = dcn_base_offset / dcn_base_offset.max() * scale
            bbox_init = x.new_tensor([-scale, -scale, scale, scale]).view(1, 4, 1, 1)
        else:
            points_init = 0
        cls_feat = x
        pts_feat = x
        for cls_conv in self.cls_convs:
            cls_feat = cls_conv(cls_feat)
        for reg_conv in self.reg_convs:
            pts_feat = reg_conv(pts_feat)
        # initialize reppoints
        pts_out_init = self.reppoints_pts_init_out(self.relu(self.reppoints_pts_init_conv(pts_feat)))
        if self.use_grid_points:
            pts_out_init, bbox_out_init = self.gen_grid_from_reg(pts_out_init, bbox_init.detach())
        else:
            pts_out_init = pts_out_init + points_init
        # refine and classify reppoints
        pts_out_init_grad_mul = (1 - self.gradient_mul) * pts_out_init.detach() + self.gradient_mul * pts_out_init
        dcn_offset = pts_out_init_grad_mul - dcn_base_offset
        cls_out = self.reppoints_cls_out(self.relu(self.reppoints_cls_conv(cls_feat, dcn_offset)))
        pts_out_refine = self.reppoints_pts_refine_out(self.relu(self.reppoints_pts_refine_conv(pts_feat, dcn_offset)))
        if self.use_grid_points:
            pts_out_refine, bbox_out_refine = self.gen_grid_from_reg(pts_out_refine, bbox_out_init.detach())
        else:
            pts_out_refine = pts_out_refine + pts_out_init.detach()
        return cls_out, self.points2bbox(pts_out_refine)


class RepPoints(nn.Module):
    """A tiny stride-8 stem and the head: image ``[N, 3, H, W]`` (H, W multiples of 8) -> ``(cls_out, bbox)``."""

    def __init__(self, channels=8, **head):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 4, 1), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2, 1))
        self.bbox_head = RepPointsHead(
            in_channels=channels, feat_channels=channels, point_feat_channels=channels, **head
        )

    def forward(self, x):
        return self.bbox_head(self.stem(x))


def build(seed=0, **head):
    """A seeded :class:`RepPoints` in eval mode (``use_grid_points=True`` for the grid variant,
    ``transform_method="minmax"``); point offsets of a few cells, so the DCNs sample off the grid."""
    torch.manual_seed(seed)
    model = RepPoints(**head).eval()
    with torch.no_grad():
        model.bbox_head.reppoints_pts_init_out.weight.normal_(0, 0.3 if not head.get("use_grid_points") else 0.1)
        if hasattr(model.bbox_head, "moment_transfer"):
            model.bbox_head.moment_transfer.normal_(0, 0.2)
    return model
