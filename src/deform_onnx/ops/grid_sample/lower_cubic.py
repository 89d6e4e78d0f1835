"""Bicubic ``F.grid_sample`` (4-D) in standard ops from opset 11: 16 taps per point, PyTorch's rules.

ATen (``aten/src/ATen/native/cpu/GridSamplerKernel.cpp``, ``ApplyGridSample``
for ``Bicubic``; scalar form in ``GridSampler.cpp``) computes, per point:

- ``p = grid_sampler_unnormalize(g)``: the pixel coordinate *without* the
  padding rule (clipping first would move the taps: ``x = -0.1`` clipped to 0
  has ``floor = 0``, the bicubic taps need ``floor = -1``);
- taps ``floor(p) - 1 .. floor(p) + 2`` per axis, weights
  ``get_cubic_upsample_coefficients(p - floor(p))`` with ``A = -0.75``;
- each tap's integer index through the padding rule (``get_value_bounded``):
  zeros reads 0 outside the image, border clips the index, reflection
  reflects it (then clips).

The graph does the same in the coordinate dtype (float32 for a float16
input): the grid flattened to ``[N, Ho*Wo, 2]``, four tap indices and
weights per axis ``[N, Ho*Wo, 4]``, their 16 products on one axis
``[N, Ho*Wo, 16]`` (each factor taken by ``Gather``: onnx2tf, target
``tflite``, misconverts the broadcast of two unsqueezed tap axes and the 5-D
values of the outer-product form; measured with scripts/op_matrix.py), one
``Gather`` of the 16 channel rows ``[M, 16, C]`` of a
channels-last copy of the input and one batched ``MatMul`` with the
``[M, 1, 16]`` weights. Zero padding folds "outside reads 0" into the
weights (``Equal(clip(i), i)``), so every index stays inside the table and
no padded copy is needed. The numpy reference of these steps is
:func:`deform_onnx.ops.grid_sample.reference.grid_sample_bicubic`.

Coordinates: zeros and border clamp ``p`` into ``[-3, size + 2]`` first
(every tap of a point beyond that is outside / on the edge either way, so
no result changes; NaN samples 0 for zeros, the edge pixel for border);
reflection keeps ``p`` (the fold is periodic) and guards each tap's index
(a NaN or infinite coordinate gives a NaN result, as in ATen, never an
out-of-range index). Under the target form ``"no NaN guard"`` the guards go.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...builder import Builder, Dim, Value
from ...sampler.coords import coordinate_dtype, in_input_dtype
from ...sampler.gather import nan_guard
from .lower import GridSampleSpec, _reflect, _size_const, unnormalize

#: ATen's cubic convolution coefficient (``get_cubic_upsample_coefficients``), as PyTorch's bicubic.
CUBIC_A = -0.75
#: Tap offsets from ``floor(p)``.
TAPS = (-1, 0, 1, 2)


def lower_gather_cubic(b: Builder, spec: GridSampleSpec, x: Value, grid: Value) -> Value:
    """``F.grid_sample(x, grid, mode='bicubic')``: ``x [N, C, H, W]``, ``grid [N, Ho, Wo, 2]`` -> ``[N, C, Ho, Wo]``.

    Standard ops valid from opset 11 (Gather, Clip, Floor, Equal, MatMul,
    elementwise); static or dynamic sizes; float16 input keeps float32
    coordinates and weights. Semantics: the module docstring (ATen's bicubic).
    """
    N, C, H, W = (b.dim(x, i) for i in range(4))
    Ho, Wo = b.dim(grid, 1), b.dim(grid, 2)
    coord, grid = coordinate_dtype(b, x, grid)
    grid = b.reshape(grid, [N, -1, 2])  # [N, Ho*Wo, 2]: no 5-D intermediates below
    ix, wx = cubic_taps(b, spec, b.op("Gather", grid, b.i64(0), axis=2), W, coord)  # [N, Ho*Wo, 4]
    iy, wy = cubic_taps(b, spec, b.op("Gather", grid, b.i64(1), axis=2), H, coord)
    # Channels-last rows [N*H*W, C] (a 3-D Transpose, as the gather sampler's table).
    pixels = b.mul_dim(H, W)
    rows = b.reshape(b.op("Transpose", b.reshape(x, [-1, C, pixels]), perm=[0, 2, 1]), [-1, C])
    n = b.op("Range", b.i64(0), b.scalar(N), b.i64(1))
    n = b.op("Mul", b.reshape(n, [-1, 1, 1]), b.as_dim(pixels))
    # the 16 taps y-major on one axis, by Gather (no broadcast of two unsqueezed axes)
    ys, xs = b.i64(np.repeat(np.arange(4), 4)), b.i64(np.tile(np.arange(4), 4))
    rowy = b.op("Mul", b.op("Gather", iy, ys, axis=2), b.as_dim(W))  # [N, Ho*Wo, 16]
    idx = b.op("Add", b.op("Add", rowy, b.op("Gather", ix, xs, axis=2)), n)
    w = b.op("Mul", b.op("Gather", wy, ys, axis=2), b.op("Gather", wx, xs, axis=2))
    v = b.op("Gather", rows, b.reshape(idx, [-1, 16]), axis=0)  # [M, 16, C]
    out = b.op("MatMul", in_input_dtype(b, x, b.reshape(w, [-1, 1, 16])), v)  # [M, 1, C]
    return b.op("Transpose", b.reshape(out, [N, Ho, Wo, C]), perm=[0, 3, 1, 2])


def cubic_taps(b: Builder, spec: GridSampleSpec, g: Value, size: Dim, like: Value) -> tuple[Value, Value]:
    """The 4 taps of normalised ``g`` ``[...]`` along an axis of ``size`` pixels: int64 indices and weights ``[..., 4]``.

    Indices are inside ``[0, size - 1]`` after the padding rule; with zero
    padding a tap outside the image has weight 0 (and a clipped index).
    """
    p = unnormalize(b, spec, g, size, like)
    if spec.padding_mode == "reflection":
        p = nan_guard(b, p, p, b.float_const(0.0, like))
    else:
        low = b.float_const(-3.0, like)
        p = nan_guard(b, p, b.op("Clip", p, low, _size_const(b, size, 2, 1.0, like)), low)
    f = b.op("Floor", p)
    weights = b.op("Concat", *[b.unsqueeze(c, [-1]) for c in cubic_weights(b, b.op("Sub", p, f), like)], axis=-1)
    taps = b.op("Add", b.unsqueeze(f, [-1]), b.float_const(np.asarray(TAPS, dtype=np.float64), like))
    last = _size_const(b, size, -1, 1.0, like)
    zero = b.float_const(0.0, like)
    if spec.padding_mode == "reflection":
        folded = b.op("Clip", _reflect(b, taps, size, spec.align_corners, like), zero, last)
        taps = nan_guard(b, folded, folded, zero)
    else:
        clipped = b.op("Clip", taps, zero, last)
        if spec.padding_mode == "zeros":  # a tap outside reads 0: its weight is 0
            weights = b.op("Mul", weights, b.cast_like(b.op("Equal", clipped, taps), like))
        taps = clipped
    return b.op("Cast", taps, to=onnx.TensorProto.INT64), weights


def cubic_weights(b: Builder, t: Value, like: Value) -> list[Value]:
    """Weights of the taps ``floor - 1 .. floor + 2`` at fraction ``t`` (ATen's ``get_cubic_coefficients``, in its order).

    ``near(d) = ((A + 2) d - (A + 3)) d^2 + 1`` for ``|d| <= 1`` and
    ``far(d) = ((A d - 5A) d + 8A) d - 4A`` for ``1 < |d| < 2``, ``A = -0.75``.
    """
    A = CUBIC_A
    one = b.float_const(1.0, like)

    def near(d):
        inner = b.op("Sub", b.op("Mul", b.float_const(A + 2, like), d), b.float_const(A + 3, like))
        return b.op("Add", b.op("Mul", b.op("Mul", inner, d), d), one)

    def far(d):
        inner = b.op("Sub", b.op("Mul", b.float_const(A, like), d), b.float_const(5 * A, like))
        inner = b.op("Add", b.op("Mul", inner, d), b.float_const(8 * A, like))
        return b.op("Sub", b.op("Mul", inner, d), b.float_const(4 * A, like))

    return [far(b.op("Add", t, one)), near(t), near(b.op("Sub", one, t)), far(b.op("Sub", b.float_const(2.0, like), t))]
