"""The gather sampler: what every standard-op lowering that samples points of a map shares.

Deformable convolution (:mod:`deform_onnx.ops.deform_conv.lower_gather`) and ``grid_sample``'s gather form
(:mod:`deform_onnx.ops.grid_sample.lower`, and through it DCNv3) sample a map at pixel
coordinates computed in floating point, by gathering channel rows of a
channels-last copy of the map at integer corner indices and weighting them.
The pieces here are written once for all of them:

- :func:`padded_channel_rows`: the row table, zero-padded (one row and column
  before the image, two after), so that a corner outside the image reads a
  zero row: no per-corner validity factor or index clip is computed;
- :func:`padded_corner` / :func:`padded_nearest`: a coordinate clamped into
  the table (NaN samples 0), its corner index and bilinear weights;
- :class:`BilinearCorners`: the four corners' rows combined with their
  weights, in the form ONNX Runtime runs fastest for the row width.
- :func:`nan_guard`: the NaN guard on sample coordinates that every
  standard-op sampler (GridSample forms and MSDA too) writes, left out under
  the ``no NaN guard`` target form.

Each op keeps its own coordinate rule (torchvision's ``base + offset`` for
deformable convolution, ATen's unnormalisation and padding modes for
``grid_sample``) and its own contraction. Multi-scale deformable attention
(:mod:`deform_onnx.ops.msda.lower`) indexes levels of different sizes in one table and keeps its
own corner code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from ..builder import Builder, Dim, Value
from ..builder.forms import wants

#: Zero rows :func:`padded_channel_rows` adds before / after the image along H and W.
PAD_BEFORE, PAD_AFTER = 1, 2


def padded_channel_rows(b: Builder, x: Value, width: Dim) -> Value:
    """``x`` ``[N, C, H, W]`` as rows ``[N*(H+3)*(W+3)*(C/width), width]`` of a zero-padded channels-last copy.

    One zero row and column before the image and two after
    (:data:`PAD_BEFORE`, :data:`PAD_AFTER`), so that both corners of any
    coordinate clamped by :func:`padded_corner` index the table. Row
    ``((n*(H+3) + y + 1)*(W+3) + x + 1)*(C/width) + g`` holds channels
    ``g*width .. (g+1)*width - 1`` of pixel ``(n, y, x)``.

    Padded while NCHW, then made channels-last by a 3-D Transpose of
    ``[N, C, pixels]``: onnx2tf guesses each 4-D value's layout from its shape
    and cannot tell NCHW from NHWC when C == H == W; a 4-D Transpose of such an
    input came out wrong in LiteRT (off by 2.0, 16 channels at 16x16, measured
    here) and this form does not. ONNX Runtime times are the same.
    """
    # Zero blocks concatenated, not Pad: onnx's version converter (which
    # torch.onnx.export uses below opset 18) has no Pad 18->17 adapter. One Pad under the
    # "table by one Pad" graph form (the .pte's).
    N, C, H, W = b.dim(x, 0), b.dim(x, 1), b.dim(x, 2), b.dim(x, 3)
    if wants("table by one Pad"):  # one pass (the .pte's XNNPACK pads; no version converter runs there)
        xt = b.op("Pad", x, b.i64([0, 0, PAD_BEFORE, PAD_BEFORE, 0, 0, PAD_AFTER, PAD_AFTER]))
    elif wants("table padded flat"):  # no 4-D value: onnx2tf misreads a square [N, C, H, W] with C == H == W
        xt = _padded_flat(b, x, (N, C, H, W))
    else:
        zero = b.float_const(0.0, x)
        xt = x
        for axis, dims in ((2, [N, C, None, W]), (3, [N, C, b.add_dim(H, PAD_BEFORE + PAD_AFTER), None])):
            before, after = (
                b.op("Expand", zero, b.shape_vector([n if d is None else d for d in dims]))
                for n in (PAD_BEFORE, PAD_AFTER)
            )
            xt = b.op("Concat", before, xt, after, axis=axis)
    # [N, C, pixels] -> [N, pixels, C]: a 3-D transpose. -1 for N, which may be 0 (C * pixels is not)
    pixels = b.mul_dim(b.add_dim(H, PAD_BEFORE + PAD_AFTER), b.add_dim(W, PAD_BEFORE + PAD_AFTER))
    xt = b.op("Transpose", b.reshape(xt, [-1, C, pixels]), perm=[0, 2, 1])
    return b.reshape(xt, [-1, width])


def _padded_flat(b: Builder, x: Value, dims: tuple[Dim, Dim, Dim, Dim]) -> Value:
    """:func:`padded_channel_rows`' zero padding on 2-D views: ``[N*C*H, W]`` padded along W, then
    ``[N*C, H*(W+3)]`` along H (whole padded rows); ``[N*C, (H+3)*(W+3)]``, the same numbers as the 4-D
    padding (form ``"table padded flat"``).
    """
    N, C, H, W = dims
    zero = b.float_const(0.0, x)
    nc = b.mul_dim(N, C)
    wide = b.add_dim(W, PAD_BEFORE + PAD_AFTER)
    for rows, width, pads in (
        (b.mul_dim(nc, H), W, (PAD_BEFORE, PAD_AFTER)),
        (nc, b.mul_dim(H, wide), (b.mul_dim(wide, PAD_BEFORE), b.mul_dim(wide, PAD_AFTER))),
    ):
        before, after = (b.op("Expand", zero, b.shape_vector([rows, n])) for n in pads)
        x = b.op("Concat", before, b.reshape(x, [rows, width]), after, axis=1)
    return x


def padded_corner(b: Builder, p: Value, size: Dim, like: Value, border_rule: bool = True, as_float: bool = False):
    """Corner ``floor(p)`` along one axis for :func:`padded_channel_rows`, and the two bilinear weights.

    Returns ``(i, low_w, high_w)``: int64 index of the corner ``floor(p)`` in
    padded coordinates (``floor(p) + 1``; the other corner is ``i + 1``) and
    the weights of the corners ``floor(p)`` and ``floor(p) + 1``, in ``like``'s dtype.
    ``as_float``: the index in ``like``'s dtype instead (a whole number, not cast to int64).

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
    clamped = _clamped(b, p, size, like, border_rule)
    p0 = b.op("Floor", clamped)
    high_w = b.op("Sub", clamped, p0)
    low_w = b.op("Sub", b.float_const(1.0, like), high_w)
    if not border_rule:
        inside = b.op(
            "And", b.op("Not", b.op("Less", p, b.float_const(0.0, like))), b.op("Less", p, _size_plus(b, size, 0, like))
        )
        inside = b.cast_like(inside, like)
        low_w, high_w = b.op("Mul", low_w, inside), b.op("Mul", high_w, inside)
    if as_float:
        return b.op("Add", p0, b.float_const(float(PAD_BEFORE), like)), low_w, high_w
    return _padded_index(b, p0, like), low_w, high_w


def padded_nearest(b: Builder, p: Value, size: Dim, like: Value) -> Value:
    """Index in :func:`padded_channel_rows` coordinates of the pixel nearest ``p`` (zero row outside the image).

    ``Round`` rounds half to even, as ATen's ``std::nearbyint``; ``p`` is
    clamped as in :func:`padded_corner` (NaN samples 0).
    """
    return _padded_index(b, b.op("Round", _clamped(b, p, size, like, True)), like)


def _clamped(b: Builder, p: Value, size: Dim, like: Value, border_rule: bool) -> Value:
    if border_rule:
        low, high = b.float_const(-1.0, like), _size_plus(b, size, 0, like)
    else:
        low, high = b.float_const(0.0, like), _size_plus(b, size, -1, like)
    return nan_guard(b, p, b.op("Clip", p, low, high), low)


def nan_guard(b: Builder, p: Value, value: Value, fallback: Value) -> Value:
    """``value`` where ``p`` is a number, ``fallback`` where ``p`` is NaN: ``Where(Equal(p, p), value, fallback)``.

    Every standard-op sampler guards its coordinates with this (a NaN cast to
    an integer index is undefined; GridSample returns non-zero values for
    it). ``Equal(p, p)`` is false only for NaN; ``IsNaN`` is not used because
    MNN's converter rejects it. Under the target form ``"no NaN guard"``
    (:mod:`deform_onnx.builder.forms`; pnnx writes ``Equal`` as ``torch.eq``, which ncnn has no
    layer for) this returns ``value``: finite and infinite coordinates give
    the same numbers, a NaN one gives whatever the runtime makes of it.
    """
    if wants("no NaN guard"):
        return value
    return b.op("Where", b.op("Equal", p, p), value, fallback)


def _padded_index(b: Builder, p0: Value, like: Value) -> Value:
    return b.op("Cast", b.op("Add", p0, b.float_const(float(PAD_BEFORE), like)), to=onnx.TensorProto.INT64)


#: Narrowest row (channels) that :class:`BilinearCorners` samples with one Gather
#: of the four corners and a MatMul; narrower rows use four Gathers and a Sum.
GATHER4_MIN_WIDTH = 32


@dataclass(frozen=True)
class RowReading:
    """How :class:`BilinearCorners` indexes its table.

    Attributes:
        index_dtype: the corner rows' integer type, ``np.int64`` or ``np.int32`` (the ``"int32 row index"`` form;
            a static row count only).
        quad: the table's :func:`quad_table`, built once by a caller whose samplers share the table (form
            ``"quad table"``); ``None``: built by the sampler when the form is asked for.
    """

    index_dtype: type = np.int64
    quad: Value | None = None


class BilinearCorners:
    """The four bilinear corners of a set of points in a :func:`padded_channel_rows` table.

    Args:
        rows: the ``[R, width]`` table.
        width: channels per row (an int, or an int64 ``[1]`` value when dynamic).
        i00: int64 (or ``index_dtype``) row of each point's corner ``(floor(y), floor(x))``, any shape ``S``.
        row: rows per table row of pixels (``(W+3) * groups``), an int or int64 ``[1]``.
        step: rows per pixel (the offset groups, 1 for one group).
        weights: the bilinear weights of corners 00, 01, 10, 11 (``S``, the table's dtype).
        reading: how the rows are indexed (:class:`RowReading`: the index dtype, a prebuilt quad table).

    Raises:
        ValueError: int32 rows with a dynamic ``row``.

    :meth:`sample` returns ``sum(w * rows[i])`` over the four corners as
    ``[prod(S), width]``, in the form ONNX Runtime ran faster for the width
    (profiled, BENCHMARKS.md "gather sampler"): rows of at least
    :data:`GATHER4_MIN_WIDTH` channels with ONE Gather of the four corner rows
    ``[M, 4, width]`` and a batched MatMul with the ``[M, 1, 4]`` weights;
    narrower rows with four Gathers, each scaled by its weight, added by one
    ``Sum`` (a batched MatMul of tiny matrices is slower there). The corners
    are stacked once here, so a caller sampling in slices (one kernel tap at a
    time) slices the stacked tensors with ``take``. Under the graph forms ``"corner-major gather"``, ``"four
    corner gathers"`` and ``"quad table"`` (:mod:`deform_onnx.builder.forms`) rows of every width take those
    forms instead (the quad table: one ``Gather`` of the top-left row of :func:`quad_table`).
    """

    def __init__(
        self, b: Builder, rows: Value, width: Dim, i00: Value, row: Dim, step: int, weights: list[Value],
        reading: RowReading | None = None,
    ):  # fmt: skip
        reading = reading or RowReading()
        index_dtype, quad = reading.index_dtype, reading.quad
        if index_dtype is np.int32 and not isinstance(row, int):
            raise ValueError("BilinearCorners: int32 rows need a static row count")
        self.rows, self.width = rows, width
        self.quad = wants("quad table")  # rows of every width; overrides the forms below
        if self.quad:  # one Gather of i00 from the quad table: no other corner's index is computed
            self.rows = quad if quad is not None else quad_table(b, rows, row, step)
            self.idx, self.wgt = i00, list(weights)
            self.corner_major = self.stacked = False
            return
        index = lambda v: b.const(np.asarray(v, dtype=index_dtype))  # noqa: E731 - the rows' integer type
        i01 = b.op("Add", i00, index(step))
        i10 = b.op("Add", i00, index([row]) if isinstance(row, int) else b.as_dim(row))
        idx = [i00, i01, i10, b.op("Add", i10, index(step))]
        # A width known only at run time gets the wide form (the common case: 32+ channels per group).
        wide = not isinstance(width, int) or width >= GATHER4_MIN_WIDTH
        self.corner_major = wants("corner-major gather")  # rows of every width
        self.stacked = wide and not wants("four corner gathers") and not self.corner_major
        if self.stacked:
            # Corner axis last, a Concat of trailing 1s (a broadcast Add onto a trailing 4 profiled slower).
            self.idx = b.op("Concat", *[b.unsqueeze(i, [-1]) for i in idx], axis=-1)
            self.wgt = b.op("Concat", *[b.unsqueeze(w, [-1]) for w in weights], axis=-1)
        else:
            self.idx, self.wgt = idx, list(weights)

    def sample(self, b: Builder, take: Callable[[Value], Value] = lambda v: v) -> Value:
        """``[M, width]``: the weighted corners of the points ``take`` selects (all by default)."""
        if self.quad:  # [M, 4*width] rows: the four corners side by side, weighted and summed over the corners
            v = b.reshape(b.op("Gather", self.rows, b.reshape(take(self.idx), [-1]), axis=0), [-1, 4, self.width])
            # the weights as whole [1, M] blocks, then [M, 4, 1] (a last-axis Concat of [M, 1] runs element by
            # element in LiteRT: BENCHMARKS.md "Deployed runtimes")
            wgt = b.op("Concat", *[b.reshape(take(w), [1, -1]) for w in self.wgt], axis=0)
            wgt = b.reshape(b.op("Transpose", wgt, perm=[1, 0]), [-1, 4, 1])
            return b.reduce_sum(b.op("Mul", v, wgt), [1], keepdims=0)
        if self.corner_major:  # [4, M] rows, one Gather of [4, M, width], weighted and summed over the corners
            idx = b.op("Concat", *[b.reshape(take(i), [1, -1]) for i in self.idx], axis=0)
            # 2-D [4, M], then [4, M, 1]: onnx2tf lays a 3-D Concat of [1, M, 1] out as [1, M, 4] and transposes
            wgt = b.reshape(b.op("Concat", *[b.reshape(take(w), [1, -1]) for w in self.wgt], axis=0), [4, -1, 1])
            v = b.op("Mul", b.op("Gather", self.rows, idx, axis=0), wgt)
            return b.reduce_sum(v, [0], keepdims=0)
        if self.stacked:
            v = b.op("Gather", self.rows, b.reshape(take(self.idx), [-1, 4]), axis=0)  # [M, 4, width]
            out = b.op("MatMul", b.reshape(take(self.wgt), [-1, 1, 4]), v)  # [M, 1, width]
            return b.reshape(out, [-1, self.width])
        terms = [
            b.op("Mul", b.op("Gather", self.rows, b.reshape(take(i), [-1]), axis=0), b.reshape(take(w), [-1, 1]))
            for i, w in zip(self.idx, self.wgt)
        ]
        return b.op("Sum", *terms)  # one pass instead of three Adds


def quad_table(b: Builder, rows: Value, row: Dim, step: int) -> Value:
    """The four bilinear corners of every top-left row of a :func:`padded_channel_rows` table, side by side.

    ``rows`` ``[R, width]``, ``row`` (rows per table row of pixels, an int or int64 ``[1]``) and ``step`` (rows
    per pixel) as :class:`BilinearCorners` takes them. Returns ``[R - row - step, 4*width]``: row ``r`` is rows
    ``r``, ``r + step``, ``r + row``, ``r + row + step`` of ``rows`` (corners 00, 01, 10, 11) concatenated, four
    ``Slice`` nodes and one ``Concat``. Every corner :func:`padded_corner` clamps has all four rows in the table
    (:data:`PAD_AFTER` rows and columns after the image), so its top-left row is one of these; one ``Gather``
    of it reads the four corners (form ``"quad table"``). Other layouts and weightings of the quad rows (a
    batched ``MatMul``, slices, an identity ``MatMul``, the corners stacked on a leading axis) ran no faster
    where measured (commits 68ff0de and 7d53a34 hold them and their numbers).
    """
    R = b.dim(rows, 0)
    last = b.add_dim(row, step)  # the 11 corner's shift; the quad table has R - last rows

    def part(start: Dim) -> Value:  # rows[start : R - last + start]
        if isinstance(R, int) and isinstance(last, int) and isinstance(start, int):
            end: Value = b.i64([R - last + start])
        else:
            end = b.op("Add", b.op("Sub", b.as_dim(R), b.as_dim(last)), b.as_dim(start))
        return b.op("Slice", rows, b.as_dim(start), end, b.i64([0]))

    return b.op("Concat", *[part(s) for s in (0, step, row, last)], axis=1)


def _size_plus(b: Builder, size: Dim, delta: int, like: Value) -> Value:
    """``size + delta`` as a 0-D value of ``like``'s dtype (from the integer size when dynamic)."""
    if isinstance(size, int):
        return b.float_const(size + delta, like)
    return b.cast_like(b.scalar(b.add_dim(size, delta) if delta else size), like)
