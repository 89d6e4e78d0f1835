"""Lowering on GridSample (opset >= 16): standard ops, exact torchvision numbers.

GridSample with ``mode=bilinear`` (``linear`` from opset 20),
``padding_mode=zeros`` and ``align_corners=0`` zeroes each corner outside the
image, exactly torchvision's rule; with ``align_corners=0`` the normalised
coordinate ``(2p+1)/size - 1`` stays finite for H or W = 1.

Graph: the input is viewed as ``[N*G, C/G, H, W]``; one grid of
``[N*G, K*Ho, Wo, 2]`` sampling points gives every tap of every output pixel
in one GridSample; the mask multiplies the samples; a 1x1 grouped Conv does
the contraction with the weight.
"""

from __future__ import annotations

from ..semantics import DeformConvSpec
from .builder import Builder, Value
from .common import base_coords, contract_channels_first

MIN_OPSET = 16


def lower_grid_sample(
    b: Builder,
    spec: DeformConvSpec,
    x: Value,
    weight: Value,
    offset: Value,
    mask: Value | None,
    bias: Value | None,
) -> Value:
    """Emit the GridSample lowering; returns the ``[N, Co, Ho, Wo]`` output value."""
    G, K = spec.offset_groups, spec.taps
    C, Cg = spec.in_channels, spec.channels_per_offset_group
    H, W = b.dim(x, 2), b.dim(x, 3)
    Ho, Wo = b.dim(offset, 2), b.dim(offset, 3)

    xg = b.reshape(x, [-1, Cg, 0, 0])  # [N*G, C/G, H, W]
    off = b.reshape(offset, [-1, K, 2, Ho, Wo])  # [N*G, K, (dy, dx), Ho, Wo]
    dy = b.slice(off, 0, 1, axis=2)
    dx = b.slice(off, 1, 2, axis=2)
    # Normalised grid: g = (2*(base + d) + 1)/size - 1 = d * (2/size) + g_base.
    gy_base = base_coords(b, spec, 0, Ho, x, out_shape=[1, -1, 1], tap_shape=[-1, 1, 1, 1], size=H)
    gx_base = base_coords(b, spec, 1, Wo, x, out_shape=[1, 1, -1], tap_shape=[-1, 1, 1, 1], size=W)
    gy = b.op("Add", b.op("Mul", dy, _two_over(b, H, x)), gy_base)
    gx = b.op("Add", b.op("Mul", dx, _two_over(b, W, x)), gx_base)
    grid = b.op("Concat", gx, gy, axis=2)  # [N*G, K, 2, Ho, Wo], (x, y) as GridSample wants
    grid = b.op("Transpose", grid, perm=[0, 1, 3, 4, 2])
    grid = b.reshape(grid, [0, -1, Wo, 2])  # [N*G, K*Ho, Wo, 2]
    grid = _finite_grid(b, grid)

    mode = "linear" if b.opset >= 20 else "bilinear"
    cols = b.op("GridSample", xg, grid, mode=mode, padding_mode="zeros", align_corners=0)
    # cols: [N*G, C/G, K*Ho, Wo]
    if mask is not None:
        m = b.reshape(mask, [-1, 1, b.mul_dim(K, Ho), Wo])  # [N*G, 1, K*Ho, Wo]
        cols = b.op("Mul", cols, m)
    cols = b.reshape(cols, [-1, C * K, Ho, Wo])  # channel (g, c/G, k) == (c, k)
    return contract_channels_first(b, spec, cols, weight, bias)


def _two_over(b: Builder, size, like: Value) -> Value:
    if isinstance(size, int):
        return b.float_const(2.0 / size, like)
    return b.op("Div", b.float_const(2.0, like), b.cast_like(size, like))


def _finite_grid(b: Builder, grid: Value) -> Value:
    """Grid clamped into ``[-3, 3]``, NaN replaced by 3.

    A normalised coordinate beyond ``1 + 1/size`` (pixel ``p <= -1`` or
    ``p >= size``) samples 0, and ``1 + 1/size <= 2``, so no finite result
    changes; but ONNX Runtime's GridSample returns non-zero values for
    infinite, NaN or huge (1e30) coordinates. ±inf then samples 0, as in
    torchvision; NaN samples 0, as ONNX Runtime's DeformConv does
    (torchvision has no answer: its CPU kernel crashes).
    """
    three = b.float_const(3.0, grid)
    clipped = b.op("Clip", grid, b.float_const(-3.0, grid), three)
    return b.op("Where", b.op("IsNaN", grid), three, clipped)
