"""Lowering on GridSample (opset >= 16): standard ops, exact torchvision numbers.

GridSample with ``mode=bilinear`` (``linear`` from opset 20),
``padding_mode=zeros`` and ``align_corners=0`` zeroes each corner outside the
image, exactly torchvision's rule; with ``align_corners=0`` the normalised
coordinate ``(2p+1)/size - 1`` stays finite for H or W = 1.

Graph: the input is viewed as ``[N*G, C/G, H, W]``; one grid of
``[N*G, K, Ho, Wo, 2]`` sampling points holds every tap of every output pixel.
The taps are then processed one kernel row at a time: a GridSample of that
row's taps, the mask product, and a MatMul with that row's slice of the
weight, accumulated. Measured with ONNX Runtime's profiler (BENCHMARKS.md),
this keeps the sampled columns of one kernel row (``C*kw*Ho*Wo``) alive
instead of all ``C*K*Ho*Wo``, so the mask product runs in cache and peak
memory stays below the native kernel's; MatMul also avoids the NCHWc copy
ONNX Runtime makes in front of a 1x1 Conv.
"""

from __future__ import annotations

from ..semantics import DeformConvSpec
from .builder import Builder, Value
from .common import base_coords

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
    kh, kw = spec.kernel
    C, Cg, Co = spec.in_channels, spec.channels_per_offset_group, spec.out_channels
    groups, Cpg = spec.groups, spec.channels_per_group
    H, W = b.dim(x, 2), b.dim(x, 3)
    Ho, Wo = b.dim(offset, 2), b.dim(offset, 3)
    P = b.mul_dim(Ho, Wo)

    xg = b.reshape(x, [-1, Cg, H, W])  # [N*G, C/G, H, W]
    grid = _grid(b, spec, x, offset, H, W, Ho, Wo)  # [N*G, K, Ho, Wo, (x, y)]
    m = None if mask is None else b.reshape(mask, [-1, 1, K, Ho, Wo])  # [N*G, 1, K, Ho, Wo]
    w = b.reshape(weight, [groups, Co // groups, Cpg, K])
    mode = "linear" if b.opset >= 20 else "bilinear"
    flat = groups == 1 and b.dim(x, 0) == 1  # static batch of one

    out = None
    for i in range(kh):  # one kernel row (kw taps) at a time
        k0, k1 = i * kw, (i + 1) * kw
        g = b.reshape(b.slice(grid, k0, k1, axis=1), [-1, b.mul_dim(kw, Ho), Wo, 2])
        cols = b.op("GridSample", xg, g, mode=mode, padding_mode="zeros", align_corners=0)
        # cols: [N*G, C/G, kw*Ho, Wo]
        if m is not None:
            cols = b.op("Mul", cols, b.reshape(b.slice(m, k0, k1, axis=2), [-1, 1, b.mul_dim(kw, Ho), Wo]))
        # Rows (g, c/G, tap) == (channel, tap) == (group, channel in group, tap).
        w_i = b.slice(w, k0, k1, axis=3)
        if flat:  # 2-D: ONNX Runtime fuses MatMul + Add into one Gemm
            part = b.op("MatMul", b.reshape(w_i, [Co, C * kw]), b.reshape(cols, [C * kw, P]))
        else:
            cols = b.reshape(cols, [-1, groups, Cpg * kw, P])
            part = b.op("MatMul", b.reshape(w_i, [groups, Co // groups, Cpg * kw]), cols)
        out = part if out is None else b.op("Add", out, part)  # [N, groups, Co/groups, Ho*Wo]
    out = b.reshape(out, [-1, Co, P])
    if bias is not None:
        out = b.op("Add", out, b.reshape(bias, [Co, 1]))
    return b.reshape(out, [-1, Co, Ho, Wo])


def _grid(b: Builder, spec: DeformConvSpec, x: Value, offset: Value, H, W, Ho, Wo) -> Value:
    """Normalised sampling grid ``[N*G, K, Ho, Wo, 2]``, ``(x, y)`` last as GridSample wants.

    ``g = (2*(base + d) + 1)/size - 1 = d * (2/size) + g_base``, computed on
    the offsets' layout (a trailing axis of size 1 or 2 makes ONNX Runtime's
    elementwise ops up to 100x slower), clamped finite, then one Transpose.
    """
    K = spec.taps
    off = b.reshape(offset, [-1, K, 2, Ho, Wo])  # [N*G, K, (dy, dx), Ho, Wo]
    dy = b.slice(off, 0, 1, axis=2)
    dx = b.slice(off, 1, 2, axis=2)
    gy_base = base_coords(b, spec, 0, Ho, x, out_shape=[1, -1, 1], tap_shape=[-1, 1, 1, 1], size=H)
    gx_base = base_coords(b, spec, 1, Wo, x, out_shape=[1, 1, -1], tap_shape=[-1, 1, 1, 1], size=W)
    gy = b.op("Add", b.op("Mul", dy, _two_over(b, H, x)), gy_base)
    gx = b.op("Add", b.op("Mul", dx, _two_over(b, W, x)), gx_base)
    grid = _finite_grid(b, b.op("Concat", gx, gy, axis=2), x)  # [N*G, K, (x, y), Ho, Wo]
    return b.op("Transpose", grid, perm=[0, 1, 3, 4, 2])


def _two_over(b: Builder, size, like: Value) -> Value:
    if isinstance(size, int):
        return b.float_const(2.0 / size, like)
    return b.op("Div", b.float_const(2.0, like), b.cast_like(size, like))


def _finite_grid(b: Builder, grid: Value, like: Value) -> Value:
    """Grid clamped into ``[-3, 3]``, NaN replaced by 3.

    A normalised coordinate beyond ``1 + 1/size`` (pixel ``p <= -1`` or
    ``p >= size``) samples 0, and ``1 + 1/size <= 2``, so no finite result
    changes; but ONNX Runtime's GridSample returns non-zero values for
    infinite, NaN or huge (1e30) coordinates. ±inf then samples 0, as in
    torchvision; NaN samples 0, as ONNX Runtime's DeformConv does
    (torchvision has no answer: its CPU kernel crashes).
    """
    # Constants typed from ``like`` (the input): an intermediate value's dtype may be
    # unknown to the builder (file rewrite), which would need a float32 CastLike.
    three = b.float_const(3.0, like)
    clipped = b.op("Clip", grid, b.float_const(-3.0, like), three)
    return b.op("Where", b.op("IsNaN", grid), three, clipped)
