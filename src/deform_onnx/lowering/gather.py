"""Lowering on Gather (opset >= 11): standard ops for runtimes without GridSample.

The four bilinear corners are gathered as channel rows from a channels-last
copy of the input (one Transpose). Corner indices are clipped into the image
and a corner outside ``[0, H-1] x [0, W-1]`` gets bilinear weight 0, which is
torchvision's rule (so a sample with ``py <= -1`` or ``py >= H`` is 0). The
validity factors and the mask are folded into the small per-sample weights,
so they cost no pass over the sampled columns. (No ``Pad``: the onnx version
converter has no Pad 18->17 adapter, and the dynamo exporter converts down.)

Indices are flat row numbers into ``[N*H*W*G, C/G]``, so a plain ``Gather``
(no ``batch_dims``, which needs opset 12) does the sampling.

Indices and weights are computed for all K taps at once (small tensors, tap
axis first); the sampling and the contraction then run one tap at a time:
four corner Gathers, their weighted sum and a MatMul with the tap's slice of
the weight, accumulated. Measured with ONNX Runtime (BENCHMARKS.md), this
keeps one tap's columns (``C*Ho*Wo``) alive instead of ``4*C*K*Ho*Wo``
(about 3x less peak memory) and is faster: the elementwise passes run in
cache. The four weighted corners are added by one ``Sum``.
"""

from __future__ import annotations

import numpy as np

from ..semantics import DeformConvSpec
from .builder import Builder, Value
from .common import (
    base_coords,
    checked_spatial,
    coordinate_dtype,
    in_coordinate_dtype,
    in_input_dtype,
    output_dims,
)
from .sampler import channel_rows, corners, finite_coords

MIN_OPSET = 11


def lower_gather(
    b: Builder,
    spec: DeformConvSpec,
    x: Value,
    weight: Value,
    offset: Value,
    mask: Value | None,
    bias: Value | None,
) -> Value:
    """Emit the gather lowering; returns the ``[N, Co, Ho, Wo]`` output value."""
    G, K = spec.offset_groups, spec.taps
    C, Cg, Co = spec.in_channels, spec.channels_per_offset_group, spec.out_channels
    groups, Cpg, Cog = spec.groups, spec.channels_per_group, spec.out_channels // spec.groups
    N, H, W = b.dim(x, 0), b.dim(x, 2), b.dim(x, 3)
    Ho, Wo = output_dims(b, spec, x)
    offset, mask = checked_spatial(b, offset, Ho, Wo), checked_spatial(b, mask, Ho, Wo)
    P = b.mul_dim(Ho, Wo)

    # Channels-last input, one row of C/G values per (n, y, x, g).
    rows = channel_rows(b, x, Cg)  # [N*H*W*G, C/G]

    # Index math on [K, N, G, Ho, Wo] (tap axis first; Wo last: a short trailing
    # axis makes ONNX Runtime's elementwise ops up to 100x slower).
    # Coordinates and bilinear weights in float32 for float16 inputs (``coord``'s dtype).
    coord, offset = coordinate_dtype(b, x, offset)
    off = b.reshape(offset, [-1, G, K, 2, Ho, Wo])
    off = b.op("Transpose", off, perm=[2, 3, 0, 1, 4, 5])  # [K, (dy, dx), N, G, Ho, Wo]
    dy = b.op("Gather", off, b.i64(0), axis=1)  # [K, N, G, Ho, Wo]
    dx = b.op("Gather", off, b.i64(1), axis=1)
    py = b.op("Add", dy, base_coords(b, spec, 0, Ho, coord, out_shape=[1, 1, 1, -1, 1], tap_shape=[-1, 1, 1, 1, 1]))
    px = b.op("Add", dx, base_coords(b, spec, 1, Wo, coord, out_shape=[1, 1, 1, 1, -1], tap_shape=[-1, 1, 1, 1, 1]))

    py = finite_coords(b, py, H, coord)
    px = finite_coords(b, px, W, coord)
    y0 = b.op("Floor", py)
    x0 = b.op("Floor", px)
    ly = b.op("Sub", py, y0)
    lx = b.op("Sub", px, x0)
    one = b.float_const(1.0, coord)
    hy = b.op("Sub", one, ly)
    hx = b.op("Sub", one, lx)
    if mask is not None:
        m = b.reshape(mask, [-1, G, K, Ho, Wo])
        m = in_coordinate_dtype(b, x, b.op("Transpose", m, perm=[2, 0, 1, 3, 4]))  # [K, N, G, Ho, Wo]
        hy = b.op("Mul", hy, m)
        ly = b.op("Mul", ly, m)

    # Corner indices clipped into the image; a corner outside it gets weight 0.
    ry0, ry1, vy0, vy1 = corners(b, y0, H, coord)
    cx0, cx1, vx0, vx1 = corners(b, x0, W, coord)
    if not spec.bilinear_interpolation_pad:
        # OpenVINO's rule: the sample is 0 unless 0 <= p < size (floor(p) inside the image),
        # and the corner past the last row/column repeats it (its index is clipped).
        vy1, vx1 = vy0, vx0
    hy, ly = b.op("Mul", hy, vy0), b.op("Mul", ly, vy1)
    hx, lx = b.op("Mul", hx, vx0), b.op("Mul", lx, vx1)
    # Flat row = ((n*H + y)*W + x)*G + g.
    row_stride = b.mul_dim(W, G)
    ry0 = b.op("Mul", ry0, b.as_dim(row_stride))
    ry1 = b.op("Mul", ry1, b.as_dim(row_stride))
    cx0 = b.op("Mul", cx0, b.i64(G))
    cx1 = b.op("Mul", cx1, b.i64(G))
    n = b.op("Range", b.i64(0), b.scalar(N), b.i64(1))
    n = b.op("Mul", b.reshape(n, [1, -1, 1, 1, 1]), b.as_dim(b.mul_dim(b.mul_dim(H, W), G)))
    ng = b.op("Add", n, b.i64(np.arange(G, dtype=np.int64).reshape(G, 1, 1)))  # [1, N, G, 1, 1]
    ry0 = b.op("Add", ry0, ng)
    ry1 = b.op("Add", ry1, ng)
    # Per corner: row index and weight as [K, N, Ho, Wo, G] (G next to the gathered
    # C/G; with G = 1 the layouts coincide and the per-tap reshapes suffice).
    terms_by_corner = []
    for ry, wy in ((ry0, hy), (ry1, ly)):
        for cx, wx in ((cx0, hx), (cx1, lx)):
            idx, wgt = b.op("Add", ry, cx), in_input_dtype(b, x, b.op("Mul", wy, wx))
            if G > 1:
                idx = b.op("Transpose", idx, perm=[0, 1, 3, 4, 2])
                wgt = b.op("Transpose", wgt, perm=[0, 1, 3, 4, 2])
            # A trailing 1 so that each tap's weight broadcasts over the gathered C/G.
            wgt = b.reshape(wgt, [K, -1, Ho, Wo, G, 1] if G > 1 else [K, -1, 1, Ho, Wo, 1])
            terms_by_corner.append((idx, wgt))

    # Weight per tap as [K, groups, C/groups, Co/groups] (folded when constant).
    w = b.op("Transpose", b.reshape(weight, [groups, Cog, Cpg, K]), perm=[3, 0, 2, 1])
    out = None
    for k in range(K):
        tap = b.i64(k)
        terms = []
        for idx, wgt in terms_by_corner:  # per tap: [N, Ho, Wo, G] rows and [N, Ho, Wo, G, 1] weights ([N, 1, Ho, Wo] for G = 1)
            v = b.op("Gather", rows, b.op("Gather", idx, tap, axis=0), axis=0)
            terms.append(b.op("Mul", v, b.op("Gather", wgt, tap, axis=0)))
        cols = b.op("Sum", *terms)  # [N, Ho, Wo, G, C/G]; one pass instead of three Adds
        w_k = b.op("Gather", w, tap, axis=0)
        if groups == 1:
            # 2-D, so that ONNX Runtime fuses MatMul + Add into one Gemm.
            part = b.op("MatMul", b.reshape(cols, [-1, C]), b.reshape(w_k, [C, Co]))  # [N*Ho*Wo, Co]
        else:  # conv groups as a MatMul batch axis
            cols = b.op("Transpose", b.reshape(cols, [-1, P, groups, Cpg]), perm=[0, 2, 1, 3])
            part = b.op("MatMul", cols, w_k)  # [N, groups, Ho*Wo, Co/groups]
        out = part if out is None else b.op("Add", out, part)
    if bias is not None:
        out = b.op("Add", out, bias if groups == 1 else b.reshape(bias, [groups, 1, Cog]))
    out = b.reshape(out, [-1, groups, P, Cog])
    out = b.op("Transpose", out, perm=[0, 1, 3, 2])  # [N, groups, Co/groups, Ho*Wo]
    return b.reshape(out, [-1, Co, Ho, Wo])

