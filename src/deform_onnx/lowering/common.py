"""Pieces shared by the standard-op lowerings: the sample-grid bases."""

from __future__ import annotations

import numpy as np

from ..semantics import DeformConvSpec
from .builder import Builder, Dim, Value


def base_coords(
    b: Builder,
    spec: DeformConvSpec,
    axis: int,
    n_out: Dim,
    like: Value,
    out_shape: list[int],
    tap_shape: list[int],
    size: Dim | None = None,
) -> Value:
    """Sampling position of every (output index, tap) along one spatial axis.

    ``base = o*stride - pad + tap*dilation`` (torchvision), with ``o`` laid
    out as ``out_shape`` (one ``-1`` entry) and the K taps as ``tap_shape``
    (one ``-1`` entry), broadcast together. With ``size`` given the result is
    normalised for GridSample with ``align_corners=0``:
    ``(2*base + 1) / size - 1``.

    Static sizes give a constant of O(Ho + K) elements (never O(Ho*Wo));
    dynamic ones are built from ``Range`` at run time. ``axis`` 0 = rows, 1 = columns.
    """
    stride, pad = spec.stride[axis], spec.padding[axis]
    taps = np.asarray(spec.tap_rows() if axis == 0 else spec.tap_cols(), dtype=np.float64)
    if isinstance(n_out, int) and (size is None or isinstance(size, int)):
        base = (np.arange(n_out, dtype=np.float64) * stride - pad).reshape(out_shape) + taps.reshape(tap_shape)
        if size is not None:
            base = (2.0 * base + 1.0) / size - 1.0
        return b.float_const(base, like)
    # Dynamic: o from Range (integer), cast once to the input's dtype.
    o = b.op("Range", b.i64(0), b.scalar(n_out), b.i64(1))
    o = b.cast_like(b.reshape(o, out_shape), like)
    if size is None:
        o = b.op("Add", b.op("Mul", o, b.float_const(stride, like)), b.float_const(-pad, like))
        return b.op("Add", o, b.float_const(taps.reshape(tap_shape), like))
    s = b.cast_like(b._as_dim(size), like)
    scale = b.op("Div", b.float_const(2.0, like), s)  # 2 / size
    o = b.op("Mul", o, b.float_const(stride, like))
    t = b.float_const((2.0 * (taps.reshape(tap_shape) - pad) + 1.0) / 2.0, like)
    # (2*(o*stride + tap - pad) + 1)/size - 1  ==  (o*stride + (tap - pad + 0.5)) * (2/size) - 1
    return b.op("Sub", b.op("Mul", b.op("Add", o, t), scale), b.float_const(1.0, like))
