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

Deformable convolution samples a zero-padded table instead
(:func:`padded_channel_rows`, :func:`padded_corner`): a corner outside the
image then reads a zero row, so no per-corner validity factor or index clip
is computed (fewer passes over the per-sample tensors, measured faster).

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


#: Zero rows :func:`padded_channel_rows` adds before / after the image along H and W.
PAD_BEFORE, PAD_AFTER = 1, 2


def padded_channel_rows(b: Builder, x: Value, width: int) -> Value:
    """``x`` ``[N, C, H, W]`` as rows ``[N*(H+3)*(W+3)*(C/width), width]`` of a zero-padded channels-last copy.

    One zero row and column before the image and two after
    (:data:`PAD_BEFORE`, :data:`PAD_AFTER`), so that both corners of any
    coordinate clamped by :func:`padded_corner` index the table. Row
    ``((n*(H+3) + y + 1)*(W+3) + x + 1)*(C/width) + g`` holds channels
    ``g*width .. (g+1)*width - 1`` of pixel ``(n, y, x)``.
    """
    xt = b.op("Transpose", x, perm=[0, 2, 3, 1])  # [N, H, W, C]
    # Zero blocks concatenated, not Pad: onnx's version converter (which
    # torch.onnx.export uses below opset 18) has no Pad 18->17 adapter.
    N, H, W, C = b.dim(x, 0), b.dim(x, 2), b.dim(x, 3), b.dim(x, 1)
    zero = b.float_const(0.0, x)
    for axis, dims in ((1, [N, None, W, C]), (2, [N, b.add_dim(H, PAD_BEFORE + PAD_AFTER), None, C])):
        before, after = (b.op("Expand", zero, b.shape_vector([n if d is None else d for d in dims]))
                         for n in (PAD_BEFORE, PAD_AFTER))
        xt = b.op("Concat", before, xt, after, axis=axis)
    return b.reshape(xt, [-1, width])


def padded_corner(b: Builder, p: Value, size: Dim, like: Value, border_rule: bool = True):
    """Corner ``floor(p)`` along one axis for :func:`padded_channel_rows`, and the two bilinear weights.

    Returns ``(i, low_w, high_w)``: int64 index of the corner ``floor(p)`` in
    padded coordinates (``floor(p) + 1``; the other corner is ``i + 1``) and
    the weights of the corners ``floor(p)`` and ``floor(p) + 1``, in ``like``'s dtype.

    ``border_rule=True`` is torchvision's (and ATen's zero padding): ``p`` is
    clamped into ``[-1, size]``, which changes no result (a sample at
    ``p <= -1`` or ``p >= size`` reads only zero rows either way) and keeps
    every index inside the table; NaN becomes -1 and samples 0, as ONNX
    Runtime's DeformConv does (found with ``Equal(p, p)``: MNN rejects
    ``IsNaN``). ``border_rule=False`` is OpenVINO's
    ``bilinear_interpolation_pad=false``: the sample is 0 unless
    ``0 <= p < size``, and a corner past the last pixel repeats it (``p`` is
    clamped into ``[0, size-1]``).
    """
    if border_rule:
        low, high = b.float_const(-1.0, like), _size_plus(b, size, 0, like)
    else:
        low, high = b.float_const(0.0, like), _size_plus(b, size, -1, like)
    clamped = b.op("Where", b.op("Equal", p, p), b.op("Clip", p, low, high), low)
    p0 = b.op("Floor", clamped)
    high_w = b.op("Sub", clamped, p0)
    low_w = b.op("Sub", b.float_const(1.0, like), high_w)
    if not border_rule:
        inside = b.op("And", b.op("Not", b.op("Less", p, b.float_const(0.0, like))),
                      b.op("Less", p, _size_plus(b, size, 0, like)))
        inside = b.cast_like(inside, like)
        low_w, high_w = b.op("Mul", low_w, inside), b.op("Mul", high_w, inside)
    i = b.op("Cast", b.op("Add", p0, b.float_const(float(PAD_BEFORE), like)), to=onnx.TensorProto.INT64)
    return i, low_w, high_w


def _size_plus(b: Builder, size: Dim, delta: int, like: Value) -> Value:
    """``size + delta`` as a 0-D value of ``like``'s dtype (from the integer size when dynamic)."""
    if isinstance(size, int):
        return b.float_const(size + delta, like)
    return b.cast_like(b.scalar(b.add_dim(size, delta) if delta else size), like)
