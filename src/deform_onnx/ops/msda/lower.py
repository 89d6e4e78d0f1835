"""Multi-scale deformable attention (Deformable DETR's MSDA) lowered in one pass over all levels.

Semantics: Deformable DETR's ``ms_deform_attn_core_pytorch``
(``models/ops/functions/ms_deform_attn_func.py``) and the CUDA/CPU kernels of
mmcv and TensorRT that share it (``ms_deform_attn_im2col_bilinear``): for
query ``q``, head ``m``, level ``l`` (``H_l x W_l``) and point ``p``, sample
the level's map of head ``m`` at pixel ``(x*W_l - 0.5, y*H_l - 0.5)``
(``grid_sample`` at ``2*loc - 1``, bilinear, zero padding,
``align_corners=False``) and sum the samples weighted by the attention weight.

Shapes (``N`` batch, ``S = sum(H_l*W_l)``, ``M`` heads, ``D`` channels per
head, ``Lq`` queries, ``L`` levels, ``P`` points):

- ``value [N, S, M, D]`` (float16/32/64), levels concatenated row-major;
- ``spatial_shapes [L, 2]`` (int32/int64, ``(H_l, W_l)``), read at run time;
- ``level_start_index [L]`` (int32/int64): row of each level's first pixel in ``S``;
- ``sampling_locations [N, Lq, M, L, P, 2]`` (``x, y`` in ``[0, 1]``);
- ``attention_weights [N, Lq, M, L, P]``;
- result ``[N, Lq, M*D]``.

Why not one sampler per level (what the exporters make of the PyTorch
form): that graph splits ``value``, transposes each level into ``[N*M, D, H, W]``,
samples ``[N*M, D, Lq, P]`` per level, stacks and multiplies. Here ``value``
is transposed once into rows ``[N*M*S, D]`` and each of the four bilinear
corners of every (query, head, level, point) becomes one flat row index
``((n*M + m)*S + start_l + y*W_l + x)``: four ``Gather`` over all levels at
once, each contracted with its corner weight (bilinear weight x validity x
attention weight) by one batched ``MatMul`` ``[1, L*P] x [L*P, D]``. Nothing
is split or stacked, and level sizes may be dynamic. Coordinates are float32
for a float16 value (as :mod:`deform_onnx.ops.grid_sample.lower` does).

Measured (``benchmarks/msda.py --quick``, ONNX Runtime CPU, 2 threads, a
loaded shared machine): level with the per-level GridSample graph (0.99x to
1.14x its time at 765-900 queries) and 1.5x to 2x faster than per-level
gather samplers. Tried and dropped, no faster: one Gather and MatMul over
the four corners concatenated (4x the intermediate), Mul + ReduceSum instead
of MatMul (2x slower), and a table of pixel pairs fetching both x corners
with one Gather.
"""

from __future__ import annotations

import onnx

from ...builder import Builder, Value
from ...builder.forms import wants
from ...core.opsets import MSDA_GATHER_MIN_OPSET
from ...sampler.coords import coordinate_dtype, in_input_dtype
from ...sampler.gather import nan_guard

#: Lowest default-domain opset of :func:`lower_gather` (Gather, Where, Clip-free Min/Max, MatMul).
MIN_OPSET = MSDA_GATHER_MIN_OPSET


def lower_gather(
    b: Builder,
    value: Value,
    spatial_shapes: Value,
    level_start_index: Value,
    sampling_locations: Value,
    attention_weights: Value,
) -> Value:
    """Standard ops from opset 11; returns ``[N, Lq, M*D]`` in ``value``'s dtype (shapes in the module docstring).

    Raises:
        ValueError: an input of the wrong rank, or a last axis of ``sampling_locations`` other than 2
            (where ranks and sizes are known at export time).
    """
    check_shapes(b, value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    N, S, M, D = (b.dim(value, i) for i in range(4))
    like, loc = coordinate_dtype(b, value, sampling_locations)
    per_image = wants("rows per image") and b.opset >= 12  # GatherND's batch_dims: opset 12
    # [N*M*S, D] rows, or [N, M*S, D] under "rows per image" (each image's rows gathered apart)
    rows = b.reshape(b.op("Transpose", value, perm=[0, 2, 1, 3]), [0, -1, D] if per_image else [-1, D])
    shapes = b.op("Cast", spatial_shapes, to=onnx.TensorProto.INT64)

    def per_level(t: Value, axis: int) -> Value:  # [L, 2] -> [L, 1]: broadcasts over [N, Lq, M, L, P]
        return b.reshape(b.op("Gather", t, b.i64(axis), axis=1), [-1, 1])

    Hi, Wi = per_level(shapes, 0), per_level(shapes, 1)
    Hf, Wf = b.cast_like(Hi, like), b.cast_like(Wi, like)
    start = b.reshape(b.op("Cast", level_start_index, to=onnx.TensorProto.INT64), [-1, 1])
    if per_image:  # row of (m, level start) in its image's rows: m*S + start_l, as [1, 1, M, L, 1]
        m = b.op("Range", b.i64(0), b.scalar(M), b.i64(1))
        base = b.op("Add", b.op("Mul", b.reshape(m, [1, 1, M, 1, 1]), b.as_dim(S)), start)
    else:  # row of (n, m, level start): (n*M + m)*S + start_l, as [N, 1, M, L, 1]
        nm = b.op("Range", b.i64(0), b.scalar(b.mul_dim(N, M)), b.i64(1))
        base = b.op("Add", b.op("Mul", b.reshape(nm, [N, 1, M, 1, 1]), b.as_dim(S)), start)

    one, half = b.float_const(1.0, like), b.float_const(0.5, like)
    two = b.float_const(2.0, like)

    def pixel(axis: int, size: Value) -> Value:
        # grid_sample's steps in float32: g = 2*loc - 1, then (g + 1) * (size / 2) - 0.5.
        g = b.op("Sub", b.op("Mul", b.op("Gather", loc, b.i64(axis), axis=5), two), one)
        p = b.op("Sub", b.op("Mul", b.op("Add", g, one), b.op("Div", size, two)), half)
        # Finite and castable: anything at <= -1 or >= size samples 0 either way; NaN -> -2 (samples 0).
        low = b.float_const(-2.0, like)
        clamped = b.op("Max", b.op("Min", p, b.op("Add", size, one)), low)
        return nan_guard(b, p, clamped, low)

    px, py = pixel(0, Wf), pixel(1, Hf)
    x0, y0 = b.op("Floor", px), b.op("Floor", py)
    lx, ly = b.op("Sub", px, x0), b.op("Sub", py, y0)
    hx, hy = b.op("Sub", one, lx), b.op("Sub", one, ly)
    xs = _corners(b, x0, Wf, like)
    ys = _corners(b, y0, Hf, like)
    attn = attention_weights
    if b.value_dtype(attn) != b.value_dtype(like):
        attn = b.cast_like(attn, like)
    # Row factors first (y part of the index, y weight x validity x attention), then one
    # Add and one Mul per corner: fewer full-size elementwise ops than per-corner chains.
    rows_y = [b.op("Add", base, b.op("Mul", iy, Wi)) for iy, _ in ys]
    weights_y = [b.op("Mul", b.op("Mul", wy, vy), attn) for (_, vy), wy in zip(ys, (hy, ly))]
    weights_x = [b.op("Mul", wx, vx) for (_, vx), wx in zip(xs, (hx, lx))]
    out = None
    for cy in (0, 1):  # ATen's corner order: nw, ne, sw, se
        for cx in (0, 1):
            idx = b.reshape(b.op("Add", rows_y[cy], xs[cx][0]), [0, 0, 0, -1])  # [N, Lq, M, L*P]
            w = in_input_dtype(b, value, b.op("Mul", weights_y[cy], weights_x[cx]))
            w = b.reshape(w, [0, 0, 0, 1, -1])  # [N, Lq, M, 1, L*P]
            # One batched [1, L*P] x [L*P, D] product per (n, q, m): no [.., L*P, D] product tensor.
            if per_image:  # [N, Lq, M, L*P, 1] indices into each image's [M*S, D] rows
                picked = b.op("GatherND", rows, b.unsqueeze(idx, [4]), batch_dims=1)
            else:
                picked = b.op("Gather", rows, idx, axis=0)
            term = b.op("MatMul", w, picked)  # [N, Lq, M, 1, D]
            out = term if out is None else b.op("Add", out, term)
    return b.reshape(out, [0, 0, -1])


def _corners(b: Builder, low: Value, size: Value, like: Value):
    """``((i0, v0), (i1, v1))`` for corners ``low`` and ``low + 1``: int64 index clipped into
    ``[0, size-1]`` and 0/1 validity (``within_bounds_2d``); ``size`` is per level ``[L, 1]``.
    """
    zero, one = b.float_const(0.0, like), b.float_const(1.0, like)
    last = b.op("Sub", size, one)
    out = []
    for c in (low, b.op("Add", low, one)):
        # Min/Max, not Clip: the bounds differ per level (Clip takes scalars).
        i = b.op("Cast", b.op("Max", b.op("Min", c, last), zero), to=onnx.TensorProto.INT64)
        inside = b.op("And", b.op("Greater", c, b.float_const(-1.0, like)), b.op("Less", c, size))
        out.append((i, b.cast_like(inside, like)))
    return tuple(out)


def check_shapes(b: Builder, value, spatial_shapes, level_start_index, sampling_locations, attention_weights) -> None:
    """Raise ``ValueError`` on inputs of the wrong rank (where ranks are known at export time)."""
    want = {
        "value": (value, 4),
        "spatial_shapes": (spatial_shapes, 2),
        "level_start_index": (level_start_index, 1),
        "sampling_locations": (sampling_locations, 6),
        "attention_weights": (attention_weights, 5),
    }
    for name, (v, rank) in want.items():
        shape = b.static_shape(v)
        if shape is not None and len(shape) != rank:
            raise ValueError(
                f"ms_deform_attn: {name} has rank {len(shape)}, expected {rank} "
                "(value [N, S, M, D], spatial_shapes [L, 2], level_start_index [L], "
                "sampling_locations [N, Lq, M, L, P, 2], attention_weights [N, Lq, M, L, P])"
            )
    loc = b.static_shape(sampling_locations)
    if loc is not None and loc[5] not in (2, None):
        raise ValueError(f"ms_deform_attn: sampling_locations has {loc[5]} coordinates per point, expected 2 (x, y)")
