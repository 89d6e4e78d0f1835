"""S2ANet's feature alignment (mmrotate 0.x ``mmrotate/models/necks``/``dense_heads``: ``AlignConv``,
``AlignConvModule``, ``RotatedRetinaHead.refine_bboxes``), written the way mmrotate writes it (one FPN level,
tiny widths, random weights; mmcv's ``DeformConv2d`` as ``torchvision.ops.DeformConv2d``, no mask).

The FAM head predicts one rotated box per cell (``num_anchors=1``); ``refine_bboxes`` picks the best anchor with
``max`` / ``argmax`` / ``gather`` and decodes it with ``DeltaXYWHAOBBoxCoder`` (``angle_range='le135'``,
``edge_swap=True``, ``proj_xy=True``: ``torch.where`` of the sides and a float ``%`` of the angle) against the
anchors of mmdet's ``AnchorGenerator`` (``torch.meshgrid`` of ``torch.arange`` over the map's size times the
stride) made rotated (``hbb2obb``, angle 0). ``AlignConv.get_offset`` is a ``@torch.no_grad()`` method that
builds the offsets from those boxes by shape arithmetic: ``torch.meshgrid`` of the kernel and of the feature
size read from ``x.shape``, ``/ stride``, ``cos`` / ``sin`` of the angle, a Python loop over the images, and
``torch.stack([offset_y, offset_x], -1).reshape(...).permute(1, 0).reshape(-1, feat_h, feat_w)``.
"""

import numpy as np
import torch
from torch import nn
from torchvision.ops import DeformConv2d


def norm_angle(angle, angle_range):
    if angle_range == "oc":
        return angle
    elif angle_range == "le135":
        return (angle + np.pi / 4) % np.pi - np.pi / 4
    elif angle_range == "le90":
        return (angle + np.pi / 2) % np.pi - np.pi / 2
    else:
        print("Not yet implemented.")


def delta2bbox(
    rois,
    deltas,
    means=(0.0, 0.0, 0.0, 0.0, 0.0),
    stds=(1.0, 1.0, 1.0, 1.0, 1.0),
    wh_ratio_clip=16 / 1000,
    angle_range="oc",
    edge_swap=False,
    proj_xy=False,
):
    """``mmrotate.core.bbox.coder.delta_xywha_obbox_coder.delta2bbox`` (no ``max_shape``, no ``norm_factor``)."""
    means = deltas.new_tensor(means).view(1, -1).repeat(1, deltas.size(1) // 5)
    stds = deltas.new_tensor(stds).view(1, -1).repeat(1, deltas.size(1) // 5)
    denorm_deltas = deltas * stds + means
    dx = denorm_deltas[:, 0::5]
    dy = denorm_deltas[:, 1::5]
    dw = denorm_deltas[:, 2::5]
    dh = denorm_deltas[:, 3::5]
    da = denorm_deltas[:, 4::5]
    # Compute center of each roi
    px = rois[:, 0].unsqueeze(1).expand_as(dx)
    py = rois[:, 1].unsqueeze(1).expand_as(dy)
    # Compute width/height of each roi
    pw = rois[:, 2].unsqueeze(1).expand_as(dw)
    ph = rois[:, 3].unsqueeze(1).expand_as(dh)
    # Compute rotated angle of each roi
    pa = rois[:, 4].unsqueeze(1).expand_as(da)
    dx_width = pw * dx
    dy_height = ph * dy
    max_ratio = np.abs(np.log(wh_ratio_clip))
    dw = dw.clamp(min=-max_ratio, max=max_ratio)
    dh = dh.clamp(min=-max_ratio, max=max_ratio)
    # Use exp(network energy) to enlarge/shrink each roi
    gw = pw * dw.exp()
    gh = ph * dh.exp()
    # Use network energy to shift the center of each roi
    if proj_xy:
        gx = dx * pw * torch.cos(pa) - dy * ph * torch.sin(pa) + px
        gy = dx * pw * torch.sin(pa) + dy * ph * torch.cos(pa) + py
    else:
        gx = px + dx_width
        gy = py + dy_height
    # Compute angle
    ga = norm_angle(pa + da, angle_range)
    if edge_swap:
        w_regular = torch.where(gw > gh, gw, gh)
        h_regular = torch.where(gw > gh, gh, gw)
        theta_regular = torch.where(gw > gh, ga, ga + np.pi / 2)
        theta_regular = norm_angle(theta_regular, angle_range)
        return torch.stack([gx, gy, w_regular, h_regular, theta_regular], dim=-1).view_as(deltas)
    else:
        return torch.stack([gx, gy, gw, gh, ga], dim=-1).view(deltas.size())


class AlignConv(nn.Module):
    """Align Conv of S2ANet."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=None, deform_groups=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.deform_conv = DeformConv2d(
            in_channels, out_channels, kernel_size=kernel_size, padding=(kernel_size - 1) // 2
        )
        self.relu = nn.ReLU(inplace=True)

    @torch.no_grad()
    def get_offset(self, anchors, featmap_size, stride):
        """Get the offset of AlignConv."""
        dtype, device = anchors.dtype, anchors.device
        feat_h, feat_w = featmap_size
        pad = (self.kernel_size - 1) // 2
        idx = torch.arange(-pad, pad + 1, dtype=dtype, device=device)
        yy, xx = torch.meshgrid(idx, idx, indexing="ij")
        xx = xx.reshape(-1)
        yy = yy.reshape(-1)

        # get sampling locations of default conv
        xc = torch.arange(0, feat_w, device=device, dtype=dtype)
        yc = torch.arange(0, feat_h, device=device, dtype=dtype)
        yc, xc = torch.meshgrid(yc, xc, indexing="ij")
        xc = xc.reshape(-1)
        yc = yc.reshape(-1)
        x_conv = xc[:, None] + xx
        y_conv = yc[:, None] + yy

        # get sampling locations of anchors
        x_ctr, y_ctr, w, h, a = torch.unbind(anchors, dim=1)
        x_ctr, y_ctr, w, h = x_ctr / stride, y_ctr / stride, w / stride, h / stride
        cos, sin = torch.cos(a), torch.sin(a)
        dw, dh = w / self.kernel_size, h / self.kernel_size
        x, y = dw[:, None] * xx, dh[:, None] * yy
        xr = cos[:, None] * x - sin[:, None] * y
        yr = sin[:, None] * x + cos[:, None] * y
        x_anchor, y_anchor = xr + x_ctr[:, None], yr + y_ctr[:, None]
        # get offset filed
        offset_x = x_anchor - x_conv
        offset_y = y_anchor - y_conv
        # x, y in anchors is opposite in image coordinates,
        # so we stack them with y, x other than x, y
        offset = torch.stack([offset_y, offset_x], dim=-1)
        offset = offset.reshape(anchors.size(0), -1).permute(1, 0).reshape(-1, feat_h, feat_w)
        return offset

    def forward(self, x, anchors):
        """Forward function of AlignConv."""
        anchors = anchors.reshape(x.shape[0], x.shape[2], x.shape[3], 5)
        num_imgs, H, W = anchors.shape[:3]
        offset_list = [self.get_offset(anchors[i].reshape(-1, 5), (H, W), self.stride) for i in range(num_imgs)]
        offset_tensor = torch.stack(offset_list, dim=0)
        x = self.relu(self.deform_conv(x, offset_tensor.detach()))
        return x


class AlignConvModule(nn.Module):
    """The module of AlignConv."""

    def __init__(self, in_channels, featmap_strides, align_conv_size):
        super().__init__()
        self.in_channels = in_channels
        self.featmap_strides = featmap_strides
        self.align_conv_size = align_conv_size
        self.ac = nn.ModuleList(
            [
                AlignConv(self.in_channels, self.in_channels, kernel_size=self.align_conv_size, stride=s)
                for s in self.featmap_strides
            ]
        )

    def forward(self, x, rbboxes):
        """``rbboxes``: per image, per level ``[H*W, 5]`` boxes (``refine_bboxes``' list of lists)."""
        mlvl_rbboxes = [torch.cat(rbbox) for rbbox in zip(*rbboxes)]
        out = []
        for x_scale, rbboxes_scale, ac_scale in zip(x, mlvl_rbboxes, self.ac):
            feat_refined_scale = ac_scale(x_scale, rbboxes_scale)
            out.append(feat_refined_scale)
        return out


class FAMHead(nn.Module):
    """``RotatedRetinaHead`` as S2ANet's ``fam_head`` (``stacked_convs=2``, one anchor per cell) with its
    ``refine_bboxes``."""

    def __init__(self, in_channels=8, num_classes=3, strides=(8,), octave_base_scale=4):
        super().__init__()
        self.num_anchors, self.cls_out_channels, self.strides = 1, num_classes, strides
        self.octave_base_scale = octave_base_scale
        self.cls_convs = nn.Sequential(nn.Conv2d(in_channels, in_channels, 3, padding=1), nn.ReLU())
        self.reg_convs = nn.Sequential(nn.Conv2d(in_channels, in_channels, 3, padding=1), nn.ReLU())
        self.retina_cls = nn.Conv2d(in_channels, num_classes, 3, padding=1)
        self.retina_reg = nn.Conv2d(in_channels, 5, 3, padding=1)

    def forward(self, feats):
        cls_scores, bbox_preds = [], []
        for x in feats:
            cls_scores.append(self.retina_cls(self.cls_convs(x)))
            bbox_preds.append(self.retina_reg(self.reg_convs(x)))
        return cls_scores, bbox_preds

    def grid_priors(self, featmap_sizes, device):
        """mmdet's ``AnchorGenerator.single_level_grid_priors`` (ratio 1, one scale, ``center_offset=0``)
        followed by mmrotate's ``hbb2obb`` (angle 0)."""
        mlvl = []
        for (feat_h, feat_w), stride in zip(featmap_sizes, self.strides):
            base = stride * self.octave_base_scale
            base_anchor = torch.tensor([[-0.5 * base, -0.5 * base, 0.5 * base, 0.5 * base]], device=device)
            shift_x = torch.arange(0, feat_w, device=device) * stride
            shift_y = torch.arange(0, feat_h, device=device) * stride
            shift_yy, shift_xx = torch.meshgrid(shift_y, shift_x, indexing="ij")
            shift_xx, shift_yy = shift_xx.reshape(-1), shift_yy.reshape(-1)
            shifts = torch.stack([shift_xx, shift_yy, shift_xx, shift_yy], dim=-1).type_as(base_anchor)
            anchors = (base_anchor[None, :, :] + shifts[:, None, :]).view(-1, 4)
            x_ctr = (anchors[:, 2] + anchors[:, 0]) * 0.5
            y_ctr = (anchors[:, 3] + anchors[:, 1]) * 0.5
            w = anchors[:, 2] - anchors[:, 0]
            h = anchors[:, 3] - anchors[:, 1]
            mlvl.append(torch.stack([x_ctr, y_ctr, w, h, torch.zeros_like(w)], dim=-1))
        return mlvl

    def refine_bboxes(self, cls_scores, bbox_preds):
        """Refine predicted bounding boxes at each position of the feature maps."""
        num_levels = len(cls_scores)
        num_imgs = cls_scores[0].size(0)
        device = cls_scores[0].device
        featmap_sizes = [cls_scores[i].shape[-2:] for i in range(num_levels)]
        mlvl_anchors = self.grid_priors(featmap_sizes, device=device)
        bboxes_list = [[] for _ in range(num_imgs)]
        for lvl in range(num_levels):
            cls_score = cls_scores[lvl]
            bbox_pred = bbox_preds[lvl]
            anchors = mlvl_anchors[lvl]
            cls_score = cls_score.permute(0, 2, 3, 1)
            cls_score = cls_score.reshape(num_imgs, -1, self.num_anchors, self.cls_out_channels)
            cls_score, _ = cls_score.max(dim=-1, keepdim=True)
            best_ind = cls_score.argmax(dim=-2, keepdim=True)
            best_ind = best_ind.expand(-1, -1, -1, 5)
            bbox_pred = bbox_pred.permute(0, 2, 3, 1)
            bbox_pred = bbox_pred.reshape(num_imgs, -1, self.num_anchors, 5)
            best_pred = bbox_pred.gather(dim=-2, index=best_ind).squeeze(dim=-2)
            anchors = anchors.reshape(-1, self.num_anchors, 5)
            for img_id in range(num_imgs):
                best_anchor_ind = best_ind[img_id]
                best_anchor = anchors.gather(dim=-2, index=best_anchor_ind).squeeze(dim=-2)
                best_bbox_pred = best_pred[img_id]
                best_bbox_i = delta2bbox(best_anchor, best_bbox_pred, angle_range="le135", edge_swap=True, proj_xy=True)
                bboxes_list[img_id].append(best_bbox_i.detach())
        return bboxes_list


class S2ANet(nn.Module):
    """A tiny stride-8 stem, the FAM head, ``AlignConvModule`` and the ODM's first conv: image ``[N, 3, H, W]``
    (H, W multiples of 8) -> ``(fam cls, fam reg, aligned feature [N, C, H/8, W/8], odm cls)``."""

    def __init__(self, channels=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 4, 1), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2, 1))
        self.fam_head = FAMHead(channels)
        self.align_conv = AlignConvModule(channels, [8], 3)
        self.odm_cls = nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, img):
        x = [self.stem(img)]
        cls_scores, bbox_preds = self.fam_head(x)
        rois = self.fam_head.refine_bboxes(cls_scores, bbox_preds)
        align_feat = self.align_conv(x, rois)
        return cls_scores[0], bbox_preds[0], align_feat[0], self.odm_cls(align_feat[0])


def build(seed=0):
    """A seeded :class:`S2ANet` in eval mode; box deltas and angles small, so the anchors' sampling points stay
    within a few cells."""
    torch.manual_seed(seed)
    model = S2ANet().eval()
    with torch.no_grad():
        model.fam_head.retina_reg.weight.normal_(0, 0.05)
        model.fam_head.retina_reg.bias.zero_()
    return model
