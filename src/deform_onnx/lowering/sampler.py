"""The gather sampler: what every standard-op lowering that samples points of a map shares.

Deformable convolution (:mod:`.gather`) and ``grid_sample``
(:mod:`.grid_sampler`) both sample a map at pixel coordinates computed in
floating point, by gathering channel rows of a channels-last copy of the map
at integer corner indices and weighting them. The pieces here are written once
for both:

- :func:`finite_coords`: pixel coordinates clamped so that no index cast can
  overflow (zero padding);
- :func:`corners`: the clipped indices and 0/1 validity of the corners
  ``floor(p)`` and ``floor(p) + 1`` along one axis;
- :func:`channel_rows`: the ``[N*H*W*G, C/G]`` row table the corners index.

Each op keeps its own coordinate rule (torchvision's ``base + offset`` for
deformable convolution, ATen's unnormalisation and padding modes for
``grid_sample``) and its own contraction.
"""

from __future__ import annotations

import onnx

from .builder import Builder, Dim, Value


def finite_coords(b: Builder, p: Value, size: Dim, like: Value) -> Value:
    """Pixel coordinates clamped into ``[-2, size+1]``, NaN replaced by -2.

    A sample at ``p <= -1`` or ``p >= size`` is 0 either way (torchvision, and
    ATen's zero padding), so no finite result changes; but a NaN or huge
    coordinate would cast to an out-of-range integer index (a run-time error),
    and an infinite one gives ``inf - inf = NaN`` bilinear weights. ±inf then
    samples 0, as in torchvision; NaN samples 0, as ONNX Runtime's DeformConv
    does (torchvision has no answer: its CPU kernel crashes). NaN is found with
    ``Equal(p, p)`` (false only for NaN), not ``IsNaN``, which MNN's converter rejects.
    """
    low = b.float_const(-2.0, like)
    if isinstance(size, int):
        high = b.float_const(size + 1, like)
    else:  # from the integer size: no float shape arithmetic
        high = b.cast_like(b.scalar(b.add_dim(size, 1)), like)
    return b.op("Where", b.op("Equal", p, p), b.op("Clip", p, low, high), low)


def corners(b: Builder, low: Value, size: Dim, like: Value):
    """Indices and validity of the corners ``floor(p)`` and ``floor(p) + 1`` along one axis.

    ``low`` is ``floor(p)`` (or, for nearest sampling, the rounded ``p``; then
    use only ``i0``/``v0``). Returns ``(i0, i1, v0, v1)``: int64 indices
    clipped into ``[0, size-1]`` (clipped in floating point: Clip-11 has no
    integer types) and 0/1 weights in ``like``'s dtype that zero a corner
    outside the image (torchvision's and ATen's ``within_bounds_2d``).
    """
    if isinstance(size, int):
        last = b.float_const(size - 1, like)
        end = b.float_const(size, like)
    else:  # Clip wants 0-D bounds
        last = b.cast_like(b.scalar(b.add_dim(size, -1)), like)
        # Cast from the integer size: a float Add of two 0-D values would be
        # promoted to float32 by the TorchScript exporter (a float32 literal in
        # a float64/float16 graph).
        end = b.cast_like(b.scalar(size), like)
    zero = b.float_const(0.0, like)
    high = b.op("Add", low, b.float_const(1.0, like))
    out = []
    for c in (low, high):
        out.append(b.op("Cast", b.op("Clip", c, zero, last), to=onnx.TensorProto.INT64))
    for c in (low, high):
        inside = b.op("And", b.op("Greater", c, b.float_const(-1.0, like)), b.op("Less", c, end))
        out.append(b.cast_like(inside, like))
    return tuple(out)


def channel_rows(b: Builder, x: Value, width: int) -> Value:
    """``x`` ``[N, C, H, W]`` as rows ``[N*H*W*(C/width), width]`` of a channels-last copy (one Transpose).

    Row ``((n*H + y)*W + x)*(C/width) + g`` holds channels ``g*width ..
    (g+1)*width - 1`` of pixel ``(n, y, x)``: a plain ``Gather`` on axis 0
    samples it (no ``batch_dims``, which needs opset 12).
    """
    xt = b.op("Transpose", x, perm=[0, 2, 3, 1])
    return b.reshape(xt, [-1, width])
