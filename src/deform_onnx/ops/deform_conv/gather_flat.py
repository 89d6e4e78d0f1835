"""The gather form's index math on 2-D values, offset groups folded into the rows (form ``"flat offset groups"``).

:func:`~.lower_gather.lower_gather` computes every tap's corner rows and weights on ``[K, N, G, Ho, Wo]``
values (a 6-D view of the offset), with the offset groups as an axis. onnx2tf's NCHW->NHWC layout guesses
misplace that axis in LiteRT (off by 1.8 on the bundled example), so the ``tflite`` target used to ask
for ``"offset groups apart"``: one index computation and one ``Gather`` of ``C/G``-channel rows per
corner, tap, group and band, each with onnx2tf's negative-index fix: thousands of ops with 8 groups.

Here the same numbers are computed on 2-D values ``[K*N*Hb, Wo*G]``: row ``(k, n, y)``, column
``(x, g)``. The offset ``[N, 2*G*K, Hb, Wo]`` becomes ``[N, Hb*Wo, 2*G*K]`` by one 3-D ``Transpose`` (as
:func:`~deform_onnx.sampler.gather.padded_channel_rows` makes its table), then ``[N*Hb*Wo*G, 2*K]``,
transposed to ``[2*K, N*Hb*Wo*G]``: the ``dy`` and ``dx`` rows of each tap. Every per-row term
(the output row, the tap, the image) is a ``[K*N*Hb, 1]`` constant and every per-column one (the output
column, the group) a ``[1, Wo*G]`` constant: O(K*N*H + W*G) values, never O(H*W); dynamic sizes build them
from ``Range``. Each tap then gathers the rows of all groups at once from the ``[N*(H+3)*(W+3)*G, C/G]``
table, with 1-D indices of length ``N*Hb*Wo*G``: one ``Gather`` per corner and tap, whatever ``G``.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from ...sampler.coords import in_coordinate_dtype, in_input_dtype
from ...sampler.gather import PAD_AFTER, PAD_BEFORE, BilinearCorners, RowReading, padded_corner
from .common import Band
from .spec import DeformConvSpec

__all__ = ["flat_corners", "index_dtype", "row_index_type", "take_flat"]


def row_index_type(rows: int) -> int:
    """The ONNX integer type of corner rows computed in float (``"float row index"``) for a table of ``rows`` rows:
    int32 under ``"int32 row index"`` when every row number fits, else int64.

    LiteRT gathers with int32 indices, and onnx2tf's negative-index fix (``Less``, ``Cast``, ``Mul``, ``Add`` on
    every dynamic index tensor) then runs on half the bytes.
    """
    return onnx.TensorProto.INT32 if wants("int32 row index") and rows <= 2**31 - 1 else onnx.TensorProto.INT64


def index_dtype(exact: bool, rows: int) -> type:
    """The numpy type of the corner rows: int32 only when computed in float (``exact``) under :func:`row_index_type`."""
    return np.int32 if exact and row_index_type(rows) == onnx.TensorProto.INT32 else np.int64


def flat_corners(
    b: Builder, spec: DeformConvSpec, x: Value, rows: Value, coord: Value, band: Band, exact: bool,
    quad: Value | None = None,
) -> BilinearCorners:  # fmt: skip
    """The bilinear sampler of every tap and offset group of ``band``, its indices and weights ``[K, N*Hb*Wo*G]``.

    ``rows``: the table ``[N*(H+3)*(W+3)*G, C/G]``
    (:func:`~deform_onnx.sampler.gather.padded_channel_rows`); ``coord``: a value of the coordinate dtype;
    ``exact``: the corner rows in that dtype, cast once (the ``"float row index"`` form: static sizes only);
    ``quad``: ``rows``' :func:`~deform_onnx.sampler.gather.quad_table` (form ``"quad table"``), or None.
    Column ``((n*Hb + y)*Wo + x)*G + g`` of tap ``k`` samples point ``(y, x)`` of image ``n`` for group ``g``:
    the rows of the sampled ``[N*Hb*Wo*G, C/G]`` read as ``[N*Hb*Wo, C]``.
    """
    G, K, Cg = spec.offset_groups, spec.taps, spec.channels_per_offset_group
    N, H, W = b.dim(x, 0), b.dim(x, 2), b.dim(x, 3)
    Hb, Wo = band.rows, band.cols
    grid = [b.mul_dim(b.mul_dim(K, N), Hb), b.mul_dim(Wo, G)]  # [K*N*Hb, Wo*G]

    def per_point(t: Value, per_group: int) -> Value:
        """``[N, G*per_group, Hb, Wo]`` -> ``[per_group, N*Hb*Wo*G]`` (3-D and 2-D steps only)."""
        t = b.op("Transpose", b.reshape(t, [-1, G * per_group, band.pixels]), perm=[0, 2, 1])
        return b.op("Transpose", b.reshape(t, [-1, per_group]), perm=[1, 0])

    off = per_point(band.offset, 2 * K)  # rows 2k (dy), 2k + 1 (dx)
    dy, dx = (b.reshape(b.op("Gather", off, b.i64(list(range(d, 2 * K, 2))), axis=0), grid) for d in (0, 1))
    y_rows, x_rows, n_rows = _row_terms(b, spec, N, H, W, band, coord, exact)
    x_cols, g_cols = _col_terms(b, spec, Wo, coord, exact)
    py = b.op("Add", dy, y_rows)
    px = b.op("Add", b.op("Add", dx, x_rows), x_cols)
    border = spec.bilinear_interpolation_pad
    iy, hy, ly = padded_corner(b, py, H, coord, border, as_float=exact)
    ix, hx, lx = padded_corner(b, px, W, coord, border, as_float=exact)
    if band.mask is not None:
        m = in_coordinate_dtype(b, x, b.reshape(per_point(band.mask, K), grid))
        hy, ly = b.op("Mul", hy, m), b.op("Mul", ly, m)

    # Flat row of the corner (y0, x0) = ((n*(H+3) + iy)*(W+3) + ix)*G + g, as lower_gather's.
    row = b.mul_dim(b.add_dim(W, PAD_BEFORE + PAD_AFTER), G)
    if exact:
        assert isinstance(row, int)
        i00 = b.op("Mul", iy, b.float_const(float(row), coord))
        i00 = b.op("Add", i00, ix if G == 1 else b.op("Mul", ix, b.float_const(float(G), coord)))
    else:
        i00 = b.op("Add", b.op("Mul", iy, b.as_dim(row)), ix if G == 1 else b.op("Mul", ix, b.i64(G)))
    for term in (n_rows, g_cols):
        if term is not None:
            i00 = b.op("Add", i00, term)
    if exact:
        i00 = b.op("Cast", i00, to=row_index_type(_table_rows(N, H, W, G)))
    flat = [K, -1]
    weights = [b.reshape(in_input_dtype(b, x, b.op("Mul", wy, wx)), flat) for wy in (hy, ly) for wx in (hx, lx)]
    table = _table_rows(N, H, W, G) if exact else 0
    i00 = b.reshape(i00, flat)
    return BilinearCorners(b, rows, Cg, i00, row, G, weights, RowReading(index_dtype(exact, table), quad))


def _table_rows(N: Dim, H: Dim, W: Dim, G: int) -> int:
    """Rows of the padded table (static sizes: the ``"float row index"`` form needs them)."""
    assert isinstance(N, int) and isinstance(H, int) and isinstance(W, int)
    pad = PAD_BEFORE + PAD_AFTER
    return N * (H + pad) * (W + pad) * G


def take_flat(b: Builder, v: Value, tap: Value, image: int | None, columns: Dim) -> Value:
    """Tap ``tap`` of a :func:`flat_corners` value, then image ``image``'s ``columns`` (``Hb*Wo*G``) of it."""
    v = b.op("Gather", v, tap, axis=0)
    if image is None:
        return v
    assert isinstance(columns, int)  # per-image sampling needs static sizes
    return b.slice(v, image * columns, (image + 1) * columns, axis=0)


def _row_terms(b: Builder, spec, N: Dim, H: Dim, W: Dim, band: Band, like: Value, exact: bool):
    """Per row ``(k, n, y)`` of ``[K*N*Hb, 1]``: the y base, the x tap term, the image's first table row (or None)."""
    K, G = spec.taps, spec.offset_groups
    Hb = band.rows
    tap_y = np.asarray(spec.tap_rows(), dtype=np.float64).reshape(K, 1, 1)
    tap_x = np.asarray(spec.tap_cols(), dtype=np.float64).reshape(K, 1, 1)
    sh, ph = spec.stride[0], spec.padding[0]
    if isinstance(N, int) and isinstance(Hb, int):
        y = (np.arange(Hb, dtype=np.float64) + band.first) * sh - ph
        shape = (K, N, Hb)
        y_rows = b.float_const(np.broadcast_to(tap_y + y.reshape(1, 1, Hb), shape).reshape(-1, 1), like)
        x_rows = b.float_const(np.broadcast_to(tap_x, shape).reshape(-1, 1), like)
        if N == 1:
            return y_rows, x_rows, None
        if not (isinstance(H, int) and isinstance(W, int)):
            return y_rows, x_rows, _dynamic_images(b, spec, N, H, W, Hb)
        image = np.arange(N).reshape(1, N, 1) * ((H + PAD_BEFORE + PAD_AFTER) * (W + PAD_BEFORE + PAD_AFTER) * G)
        first = np.broadcast_to(image, shape).reshape(-1, 1)
        return y_rows, x_rows, b.float_const(first, like) if exact else b.i64(first)
    if band.first:
        raise ValueError("flat_corners: a band start needs static sizes")
    full = b.shape_vector([K, N, Hb])
    o = b.cast_like(b.reshape(b.op("Range", b.i64(0), b.scalar(Hb), b.i64(1)), [1, 1, -1]), like)
    o = b.op("Add", b.op("Mul", o, b.float_const(float(sh), like)), b.float_const(tap_y - ph, like))
    y_rows = b.reshape(b.op("Expand", o, full), [-1, 1])
    x_rows = b.reshape(b.op("Expand", b.float_const(tap_x, like), full), [-1, 1])
    return y_rows, x_rows, _dynamic_images(b, spec, N, H, W, Hb)


def _dynamic_images(b: Builder, spec, N: Dim, H: Dim, W: Dim, Hb: Dim) -> Value:
    """``n*(H+3)*(W+3)*G`` per row ``(k, n, y)`` as int64 ``[K*N*Hb, 1]``, from ``Range``."""
    pad = PAD_BEFORE + PAD_AFTER
    per_image = b.mul_dim(b.mul_dim(b.add_dim(H, pad), b.add_dim(W, pad)), spec.offset_groups)
    n = b.op("Mul", b.reshape(b.op("Range", b.i64(0), b.scalar(N), b.i64(1)), [1, -1, 1]), b.as_dim(per_image))
    return b.reshape(b.op("Expand", n, b.shape_vector([spec.taps, N, Hb])), [-1, 1])


def _col_terms(b: Builder, spec, Wo: Dim, like: Value, exact: bool) -> tuple[Value, Value | None]:
    """Per column ``(x, g)`` of ``[1, Wo*G]``: the x base, and the group ``g`` (None for one group)."""
    G = spec.offset_groups
    sw, pw = spec.stride[1], spec.padding[1]
    groups = np.arange(G).reshape(1, G)
    if isinstance(Wo, int):
        x = np.repeat(np.arange(Wo, dtype=np.float64) * sw - pw, G).reshape(1, -1)
        g = np.tile(groups, (1, Wo))
        return b.float_const(x, like), None if G == 1 else (b.float_const(g, like) if exact else b.i64(g))
    full = b.shape_vector([Wo, G])
    o = b.cast_like(b.reshape(b.op("Range", b.i64(0), b.scalar(Wo), b.i64(1)), [-1, 1]), like)
    o = b.op("Add", b.op("Mul", o, b.float_const(float(sw), like)), b.float_const(float(-pw), like))
    x_cols = b.reshape(b.op("Expand", o, full), [1, -1])
    return x_cols, None if G == 1 else b.reshape(b.op("Expand", b.i64(groups), full), [1, -1])
