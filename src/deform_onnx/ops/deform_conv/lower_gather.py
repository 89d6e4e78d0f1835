"""Lowering on Gather (opset >= 11): standard ops for runtimes without GridSample.

The bilinear corners are gathered as channel rows from a zero-padded,
channels-last copy of the input (:func:`~deform_onnx.sampler.gather.padded_channel_rows`:
zero blocks concatenated, one Transpose). Coordinates are clamped so that
both corners always index the table (:func:`~deform_onnx.sampler.gather.padded_corner`); a
corner outside the image reads a zero row, which is torchvision's rule (a
sample with ``py <= -1`` or ``py >= H`` is 0), so no validity factor or index
clip is computed per corner.
The mask is folded into the small per-sample weights, so it costs no pass over
the sampled columns.

Indices are flat row numbers into the table, so a plain ``Gather`` (no
``batch_dims``, which needs opset 12) does the sampling.

Indices and weights are computed for all K taps at once (small tensors, tap
axis first); the sampling and the contraction then run one tap at a time, and
each tap's columns are contracted with its slice of the weight by one MatMul,
accumulated. This keeps one tap's columns alive instead of all K taps' (about
3x less peak memory than sampling every tap first) and runs the elementwise
passes in cache (BENCHMARKS.md). With a static batch of 2 to
:data:`~.common.PER_IMAGE_MAX_BATCH` images of 64x64 output pixels or more,
the taps run image by image (:func:`~.common.per_image`): one image's
columns alive instead of N's. A static output map of more than
:data:`~.common.BAND_PIXELS` pixels is lowered in bands of output rows
(:func:`~.common.row_bands`), each with its own index math: one band's
indices, weights and columns alive at a time. The
offset groups' index math runs on 5-D values ``[K, N, G, Ho, Wo]``; under the ``"flat offset groups"``
form on 2-D ones (:mod:`.gather_flat`). The four corners of a tap are combined by
:class:`~deform_onnx.sampler.gather.BilinearCorners` (one Gather of the four corners and a
MatMul for rows of 32+ channels, four Gathers and a Sum for narrower ones).
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from ...core.opsets import DEFORM_CONV_GATHER_MIN_OPSET
from ...sampler.coords import coordinate_dtype, in_coordinate_dtype, in_input_dtype
from ...sampler.gather import BilinearCorners, RowReading, padded_channel_rows, padded_corner, quad_table
from .common import (
    Band,
    add_product,
    band_inputs,
    base_coords,
    checked_spatial,
    output_dims,
    per_image,
    pick,
    row_bands,
)
from .gather_flat import flat_corners, index_dtype, row_index_type, take_flat
from .integer_contraction import tap_product
from .spec import DeformConvSpec

MIN_OPSET = DEFORM_CONV_GATHER_MIN_OPSET


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
    N = b.dim(x, 0)
    Ho, Wo = output_dims(b, spec, x)
    offset, mask = checked_spatial(b, offset, Ho, Wo), checked_spatial(b, mask, Ho, Wo)
    P = b.mul_dim(Ho, Wo)

    coord, offset = coordinate_dtype(b, x, offset)
    flat = G > 1 and wants("flat offset groups")
    apart = G > 1 and wants("offset groups apart") and not flat
    table = padded_channel_rows(b, x, C if apart else Cg)
    # Form "quad table": the four corners of each row side by side, built once for every band (apart: per group,
    # each from its channels of the table, one pixel a row).
    quads: list[Value | None] = [None]
    if wants("quad table"):
        W3 = b.add_dim(b.dim(x, 3), 3)
        if apart:
            quads = [quad_table(b, b.slice(table, g * Cg, (g + 1) * Cg, axis=1), W3, 1) for g in range(G)]
        else:
            quads = [quad_table(b, table, b.mul_dim(W3, G), G)]

    # Weight per tap as [K, groups, C/groups, Co/groups] (folded when constant); sliced once,
    # shared by every image and band.
    w = b.op("Transpose", b.reshape(weight, [groups, Cog, Cpg, K]), perm=[3, 0, 2, 1])
    taps = [b.i64(k) for k in range(K)]
    w_taps = [b.op("Gather", w, t, axis=0) for t in taps]
    images = per_image(N, P)
    outs: list[list[Value]] = [[] for _ in images]
    for band in row_bands(Ho, Wo):
        # output rows first .. first+Hb-1, sampled from the whole input
        rows = band_inputs(b, band, Ho, Wo, offset, mask)
        if flat:  # one sampler, 2-D index math ([K, N*Pb*G])
            exact = _float_rows(b, coord, N, b.dim(x, 2), b.dim(x, 3), G)
            sampler = flat_corners(b, spec, x, table, coord, rows, exact, quad=quads[0])
            samplers, columns = [sampler], b.mul_dim(rows.pixels, G)
        else:
            samplers, columns = _samplers(b, spec, x, table, rows, coord, quads), None
        for at, n in enumerate(images):
            outs[at].append(_contract(b, spec, (samplers, columns), taps, w_taps, n, rows.pixels, bias))
    parts = [o[0] if len(o) == 1 else b.op("Concat", *o, axis=3) for o in outs]  # bands: [N, groups, Co/g, Pb]
    parts = [b.reshape(o, [-1, Co, Ho, Wo]) for o in parts]
    return parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=0)


def _samplers(b: Builder, spec, x, table, band: Band, coord, quads: list) -> list[BilinearCorners]:
    """One sampler for all offset groups, or one per group under the ``"offset groups apart"`` form.

    ``quads``: the table's :func:`~deform_onnx.sampler.gather.quad_table` (each group's when apart), or ``[None]``
    (form ``"quad table"`` not asked for).
    """
    G, K, Cg = spec.offset_groups, spec.taps, spec.channels_per_offset_group
    if G > 1 and wants("offset groups apart"):  # ("flat offset groups" takes precedence: see lower_gather)
        # One table of all C channels, sliced per group: [N*(H+3)*(W+3), C/G] each
        K2 = 2 * K
        offset, mask = band.offset, band.mask
        return [
            _corners(b, spec, x, b.slice(table, g * Cg, (g + 1) * Cg, axis=1), 1, coord,
                     band.with_inputs(b.slice(offset, g * K2, (g + 1) * K2, axis=1),
                                      None if mask is None else b.slice(mask, g * K, (g + 1) * K, axis=1)),
                     quads[g] if len(quads) == G else None)
            for g in range(G)
        ]  # fmt: skip
    return [_corners(b, spec, x, table, G, coord, band, quads[0])]


def _contract(b: Builder, spec, sampling: tuple[list[BilinearCorners], Dim | None], taps, w_taps, n: int | None,
              P, bias) -> Value:  # fmt: skip
    """Sum over taps of the sampled columns times the tap's weight, plus bias: ``[N, groups, Co/groups, P]``.

    ``sampling``: the samplers, and each image's columns of a :func:`~.gather_flat.flat_corners` sampler
    (``None``: samplers with a batch axis); ``n``: the image (``None``: all at once); ``P``: the output pixels
    the samplers cover.
    """
    samplers, columns = sampling
    C, Co, groups, Cpg = spec.in_channels, spec.out_channels, spec.groups, spec.channels_per_group
    Cog = Co // groups
    out = None
    for tap, w_k in zip(taps, w_taps):
        if columns is None:
            take = lambda v, t=tap, n=n: pick(b, v, t, n)  # noqa: E731
        else:
            take = lambda v, t=tap, n=n: take_flat(b, v, t, n, columns)  # noqa: E731
        cols = [c.sample(b, take) for c in samplers]  # each [(N*)P*G, C/G] (G = 1 when apart)
        cols = cols[0] if len(cols) == 1 else b.op("Concat", *cols, axis=1)
        # cols: rows (n, y, x, g) of C/G channels, i.e. [(N*)P, C].
        if wants("integer contraction"):  # 2-D constant weights, summed after the loop (quantization)
            out = [*(out or []), tap_product(b, cols, w_k, groups=groups, Cpg=Cpg, Cog=Cog, P=P)]
        elif groups == 1:  # 2-D: one Gemm per tap, [(N*)P, Co]
            out = add_product(b, out, b.reshape(cols, [-1, C]), b.reshape(w_k, [C, Co]))
        else:  # conv groups as a MatMul batch axis: [N, groups, P, Co/groups]
            cols = b.op("Transpose", b.reshape(cols, [-1, P, groups, Cpg]), perm=[0, 2, 1, 3])
            out = add_product(b, out, cols, w_k, two_d=False)
    if isinstance(out, list):
        out = out[0] if len(out) == 1 else b.op("Sum", *out)
    assert out is not None
    if bias is not None:
        out = b.op("Add", out, bias if groups == 1 else b.reshape(bias, [groups, 1, Cog]))
    out = b.reshape(out, [-1, groups, P, Cog])
    return b.op("Transpose", out, perm=[0, 1, 3, 2])  # [N, groups, Co/groups, P]


def _corners(
    b: Builder, spec: DeformConvSpec, x: Value, rows: Value, G: int, coord: Value, band: Band,
    quad: Value | None = None,
) -> BilinearCorners:  # fmt: skip
    """The bilinear sampler of every tap of ``G`` offset groups sharing one index computation.

    ``x`` ``[N, C, H, W]`` (for its sizes and dtype); ``rows``: the groups' table
    ``[N*(H+3)*(W+3)*G, C/G]`` (:func:`~deform_onnx.sampler.gather.padded_channel_rows`); ``band``:
    output rows ``first .. first+Ho-1``, with their offset ``[N, 2*G*K, Ho, Wo]`` and mask
    ``[N, G*K, Ho, Wo]`` or None; ``quad``: ``rows``' quad table, or None (form ``"quad table"``: built here).
    """
    offset, mask, first, Ho, Wo = band.offset, band.mask, band.first, band.rows, band.cols
    K, Cg = spec.taps, spec.channels_per_offset_group
    N, H, W = b.dim(x, 0), b.dim(x, 2), b.dim(x, 3)

    # Index math on [K, N, G, Ho, Wo] (tap axis first; Wo last: a short trailing
    # axis makes ONNX Runtime's elementwise ops up to 100x slower).
    # Coordinates and bilinear weights in float32 for float16 inputs (``coord``'s dtype).
    off = b.reshape(offset, [-1, G, K, 2, Ho, Wo])
    off = b.op("Transpose", off, perm=[2, 3, 0, 1, 4, 5])  # [K, (dy, dx), N, G, Ho, Wo]
    dy = b.op("Gather", off, b.i64(0), axis=1)  # [K, N, G, Ho, Wo]
    dx = b.op("Gather", off, b.i64(1), axis=1)
    py = b.op(
        "Add",
        dy,
        base_coords(b, spec, 0, Ho, coord, ([1, 1, 1, -1, 1], [-1, 1, 1, 1, 1]), start=first),
    )
    px = b.op("Add", dx, base_coords(b, spec, 1, Wo, coord, ([1, 1, 1, 1, -1], [-1, 1, 1, 1, 1])))
    border = spec.bilinear_interpolation_pad
    exact = _float_rows(b, coord, N, H, W, G)
    iy, hy, ly = padded_corner(b, py, H, coord, border, as_float=exact)
    ix, hx, lx = padded_corner(b, px, W, coord, border, as_float=exact)
    if mask is not None:
        m = b.reshape(mask, [-1, G, K, Ho, Wo])
        m = in_coordinate_dtype(b, x, b.op("Transpose", m, perm=[2, 0, 1, 3, 4]))  # [K, N, G, Ho, Wo]
        hy, ly = b.op("Mul", hy, m), b.op("Mul", ly, m)

    # Flat row of the corner (y0, x0) = ((n*(H+3) + iy)*(W+3) + ix)*G + g; the other
    # corners are +G (next column), +row (next row) and +row+G.
    row_dim = b.mul_dim(b.add_dim(W, 3), G)  # an int when static (int32 rows add an int32 constant)
    row = b.as_dim(row_dim)
    if exact:  # static sizes, every row number a whole number of the coordinate dtype: one Cast at the end
        assert isinstance(N, int) and isinstance(H, int) and isinstance(W, int)
        per_row = (W + 3) * G
        ng = np.arange(N).reshape(1, N, 1, 1, 1) * ((H + 3) * per_row) + np.arange(G).reshape(G, 1, 1)
        i00 = b.op("Mul", iy, b.float_const(float(per_row), coord))
        i00 = b.op("Add", i00, ix if G == 1 else b.op("Mul", ix, b.float_const(float(G), coord)))
        if ng.any():  # more than one image or offset group
            i00 = b.op("Add", i00, b.float_const(ng, coord))
        i00 = b.op("Cast", i00, to=row_index_type(N * (H + 3) * (W + 3) * G))
    else:
        n = b.op("Range", b.i64(0), b.scalar(N), b.i64(1))
        n = b.op("Mul", b.reshape(n, [1, -1, 1, 1, 1]), b.as_dim(b.mul_dim(b.add_dim(H, 3), row)))
        ng = b.op("Add", n, b.i64(np.arange(G, dtype=np.int64).reshape(G, 1, 1)))  # [1, N, G, 1, 1]
        i00 = b.op("Add", b.op("Add", b.op("Mul", iy, row), b.op("Mul", ix, b.i64(G))), ng)
    weights = [b.op("Mul", wy, wx) for wy in (hy, ly) for wx in (hx, lx)]  # corners 00, 01, 10, 11
    if G > 1:  # [K, N, Ho, Wo, G]: G next to the gathered C/G
        i00 = b.op("Transpose", i00, perm=[0, 1, 3, 4, 2])
        weights = [b.op("Transpose", w_, perm=[0, 1, 3, 4, 2]) for w_ in weights]
    weights = [in_input_dtype(b, x, w_) for w_ in weights]
    table = N * (H + 3) * (W + 3) * G if exact else 0  # static when exact
    return BilinearCorners(b, rows, Cg, i00, row_dim, G, weights, RowReading(index_dtype(exact, table), quad))


#: Largest row count (table rows, :func:`~deform_onnx.sampler.gather.padded_channel_rows`) whose row numbers
#: the ``"float row index"`` form computes in each coordinate dtype: every integer up to it is exact there.
FLOAT_ROWS_MAX = {"float32": 2**24, "float64": 2**53}


def _float_rows(b: Builder, coord: Value, N, H, W, G: int) -> bool:
    """Whether the corner rows are computed in the coordinate dtype (the ``"float row index"`` form).

    Only with static sizes whose table rows (``N*(H+3)*(W+3)*G``) are at most :data:`FLOAT_ROWS_MAX` of
    that dtype: every row number is then a whole number it holds exactly, the same as the int64 computation.
    """
    if not wants("float row index") or not all(isinstance(d, int) for d in (N, H, W)):
        return False
    dt = b.value_dtype(coord)
    limit = FLOAT_ROWS_MAX.get(np.dtype(dt).name, 0) if dt is not None else 0
    return limit >= N * (H + 3) * (W + 3) * G
