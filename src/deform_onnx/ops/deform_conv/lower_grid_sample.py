"""Lowering on GridSample (opset >= 16): standard ops, torchvision's numbers at any size.

GridSample with ``mode=bilinear`` (``linear`` from opset 20),
``padding_mode=zeros`` and ``align_corners=0`` zeroes each corner outside the
image, exactly torchvision's rule; with ``align_corners=0`` the normalised
coordinate ``(2p+1)/size - 1`` stays finite for H or W = 1.

Precision sets its reach. GridSample takes *normalised* coordinates and the
runtime turns them back into pixels, so each rounding of ``g`` (``2^-24`` near
±1 in float32) moves the sample by about ``size * 2^-25`` pixels: measured
against torchvision (c17-style layer, offsets up to 100 px, worst of 3 seeds)
the output error is 1.0e-5 at width 256, 2.0e-5 at 512, 5.6e-5 at 1024,
1.3e-4 at 1920 and 4.0e-4 at 4096. So GridSample samples static maps up to
:data:`BILINEAR_MAX_SIZE` pixels a side; larger maps, and maps whose size is
dynamic (an export made small and run at 4K must stay exact), are sampled
with the gather lowering's exact sampler, which computes pixel coordinates as
torchvision does (one rounding of ``base + offset``). A nearest-mode
GridSample of the four integer corners (from a four-block copy of the padded
input) is exact too, but measured 8-10x slower than bilinear GridSample on
ONNX Runtime CPU, so it is not used. float64 maps always use
GridSample (``size * 2^-54`` px). For float16 models the grid is computed in
float32 (a float16 pixel coordinate resolves 1 pixel at width 2048);
GridSample takes a float32 grid on a float16 map.

Graph: the input is viewed as ``[N*G, C/G, H, W]``; one grid of
``[N*G, K, Ho, Wo, 2]`` sampling points holds every tap of every output pixel.
The taps are then processed one kernel row at a time: a GridSample of that
row's taps, the mask product, and a MatMul with that row's slice of the
weight, accumulated. Measured with ONNX Runtime's profiler (BENCHMARKS.md),
this keeps the sampled columns of one kernel row (``C*kw*Ho*Wo``) alive
instead of all ``C*K*Ho*Wo``, so the mask product runs in cache and peak
memory stays below the native kernel's; MatMul also avoids the NCHWc copy
ONNX Runtime makes in front of a 1x1 Conv. A static batch of 2 to
:data:`~.common.PER_IMAGE_MAX_BATCH` images of 64x64 output pixels or more is
sampled image by image (:func:`~.common.per_image`), so one image's row of
columns is alive.

A static output map of more than :data:`~.common.BAND_PIXELS` pixels is
lowered in bands of output rows (:func:`~.common.row_bands`): each band
samples all K taps of its rows with one GridSample (from the whole input),
multiplies the mask and contracts once. A band's columns stay in the CPU's
caches; measured side by side on ONNX Runtime CPU (BENCHMARKS.md, "Row
bands"), three 64-channel DCNv2 layers at 192x192 ran in 1.24x the native
``DeformConv``'s time instead of 1.60x (2 threads). Dynamic sizes stay in one
piece.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from ...core.opsets import DEFORM_CONV_GRID_SAMPLE_MIN_OPSET
from ...sampler.coords import coordinate_dtype
from ...sampler.gather import nan_guard
from ..grid_sample.lower import GridSampleSpec, grid_sample_node
from .common import (
    Band,
    add_product,
    band_inputs,
    base_coords,
    checked_spatial,
    normalised,
    output_dims,
    output_positions,
    per_image,
    row_bands,
)
from .integer_contraction import integer_contraction, row_scales, weight_first_contraction
from .lower_gather import lower_gather
from .sampler_columns import sampler_columns, shift_offsets
from .spec import DeformConvSpec

MIN_OPSET = DEFORM_CONV_GRID_SAMPLE_MIN_OPSET
#: Largest static H or W sampled with bilinear GridSample (output error about 2e-5
#: there, measured); larger or dynamic maps use the exact gather sampler.
BILINEAR_MAX_SIZE = 512
#: Channels per GridSample batch entry in the ``"GridSample channel blocks"`` form (MNN's fastest: see
#: :mod:`deform_onnx.builder.forms`).
BLOCK_CHANNELS = 32
#: The same in the ``"GridSample channel blocks of 8"`` form (OpenVINO's fastest).
SMALL_BLOCK_CHANNELS = 8
#: Most rows of the ``"offset groups along H"`` form's stacked map, ``G*(H+2)``: GridSample's coordinate rounding
#: grows with the sampled side (see the module docstring; 2.0e-5 at 512, 5.6e-5 at 1024, measured).
STACKED_MAX_ROWS = 2 * BILINEAR_MAX_SIZE
#: Band-local rows the stacked form clamps a sample's row to: midway into the two zero rows around each band, so
#: that a point beyond the band reads zeros only, even one GridSample unnormalises a little off.
_ROW_LOW, _ROW_HIGH_PAST = -1.5, 0.5


def _contract_rows(b: Builder, spec: DeformConvSpec, out, pairs, flat: bool, step: int, Pb):
    """Add each ``(weight rows, sampled columns)`` product of a band to ``out`` (``None`` before the first).

    ``cols``: ``[N*G, C/G, step*Pb]``; rows (g, c/G, tap) == (channel, tap) == (group, channel in group, tap).
    ``flat``: one 2-D Gemm per step of taps, else ``[N, groups, Co/groups, Pb]`` batched products.
    """
    C, Co = spec.in_channels, spec.out_channels
    groups, Cpg = spec.groups, spec.channels_per_group
    for w_i, cols in pairs:
        if flat:
            out = add_product(b, out, b.reshape(w_i, [Co, C * step]), b.reshape(cols, [C * step, Pb]))
        else:
            cols = b.reshape(cols, [-1, groups, Cpg * step, Pb])
            out = add_product(b, out, b.reshape(w_i, [groups, Co // groups, Cpg * step]), cols, two_d=False)
    return out


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
    kh, kw = spec.kernel
    Co = spec.out_channels
    groups, Cpg = spec.groups, spec.channels_per_group
    H, W = b.dim(x, 2), b.dim(x, 3)
    Ho, Wo = output_dims(b, spec, x)
    offset, mask = checked_spatial(b, offset, Ho, Wo), checked_spatial(b, mask, Ho, Wo)
    P = b.mul_dim(Ho, Wo)

    images = per_image(b.dim(x, 0), P)
    flat = groups == 1 and (b.dim(x, 0) == 1 or images != [None])  # a batch of one per MatMul
    w_const = _weight_first(b, spec, weight) if flat else None
    # ONNX Runtime's INT8 form: its DeformConv samples (exact at any size), an integer MatMul contracts.
    sampler = (
        wants("DeformConv sampler")
        and b.opset >= 19
        and spec.bilinear_interpolation_pad
        and w_const is not None
        and (isinstance(H, int) or row_bands(Ho, Wo, sampler=True) == [None])
    )
    if not sampler and (use_exact_sampler(b, x) or not spec.bilinear_interpolation_pad):
        # (OpenVINO's border rule is written once, in the gather sampler.)
        return lower_gather(b, spec, x, weight, offset, mask, bias)
    coord, offset = coordinate_dtype(b, x, offset)
    # ncnn's and MNN's forms: every tap sampled at once, contracted by a Conv (kernel K x 1 stride K, or 1 x 1)
    as_conv = (wants("contraction as Conv") or wants("taps as channels")) and w_const is None and not sampler
    stacked = as_conv and stacks_offset_groups(b, spec, x)
    bands = row_bands(Ho, Wo, sampler=sampler)
    # Taps sampled by one GridSample: a kernel row, or every tap of a band (a band's columns are small:
    # one GridSample and one product per band, no sum of kernel rows; measured faster, BENCHMARKS.md)
    step = kh * kw if bands != [None] or as_conv else kw
    # shared by every image (the weight-first form reads the constant weight instead)
    w_rows = []
    if w_const is None:
        w = b.reshape(weight, [groups, Co // groups, Cpg, kh * kw])
        w_rows = [b.slice(w, k, k + step, axis=3) for k in range(0, kh * kw, step)]

    if sampler:  # every band's row shift at once (one Add per layer, not one per band)
        offset = shift_offsets(b, spec, offset, H, bands)
    outs = []
    for n in images:
        if n is None:
            x_n, offset_n, mask_n = x, offset, mask
        else:
            x_n, offset_n, mask_n = (None if t is None else b.slice(t, n, n + 1, axis=0) for t in (x, offset, mask))
        x_stack = _stacked_map(b, spec, x_n) if stacked else None  # once per image, read by every band
        parts = []
        for band in bands:
            # output rows first .. first+Hb-1, sampled from the whole input
            rows_b = band_inputs(b, band, Ho, Wo, offset_n, mask_n)
            Pb, offset_b, mask_b = rows_b.pixels, rows_b.offset, rows_b.mask
            out, rows = None, []  # rows: the sampled columns of each step of taps
            if x_stack is not None:  # [N, Co, Hb, Wo]: every offset group by one GridSample, one Conv
                out = _stacked_contraction(b, spec, x_stack, coord, rows_b, (H, W), weight, bias)
            elif as_conv:  # [N, Co, Hb, Wo], the bias added by each band's Conv
                out = _conv_contraction(b, spec, x_n, coord, rows_b, (H, W), weight, bias)
            elif sampler:  # [N, C*K, Hb, Wo]: rows (channel, tap), as weight_first_contraction takes them
                cols = sampler_columns(b, spec, x_n, offset_b, mask_b, H, band)
                out = weight_first_contraction(b, [cols], w_const, step=kh * kw, P=Pb, scale=False)  # type: ignore[arg-type]
            else:
                rows = _rows(b, spec, x_n, coord, rows_b, (H, W), step)
                if w_const is not None:
                    rows, out = [], weight_first_contraction(b, rows, w_const, step=step, P=Pb, scale=False)
                elif wants("integer contraction"):  # MatMuls on 2-D constant weights (quantization)
                    rows, out = [], integer_contraction(b, rows, w_rows, groups=groups, Co=Co, Cpg=Cpg, kw=step, P=Pb)
            out = _contract_rows(b, spec, out, zip(w_rows, rows), flat, step, Pb)
            parts.append(out if as_conv else b.reshape(out, [-1, Co, Pb]))
        out = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=2)
        if as_conv:  # [N, Co, Ho, Wo] already, with its bias
            outs.append(out)
            continue
        if w_const is not None:  # the weight-first rows' scales, once
            out = b.op("Mul", out, b.const(row_scales(w_const)))
        if bias is not None:
            out = b.op("Add", out, b.reshape(bias, [Co, 1]))
        outs.append(b.reshape(out, [-1, Co, Ho, Wo]))
    return outs[0] if len(outs) == 1 else b.op("Concat", *outs, axis=0)


def _weight_first(b: Builder, spec: DeformConvSpec, weight: Value):
    """ONNX Runtime's INT8 contraction: the constant weight as ``[Co, C, K]`` (None: another form)."""
    if not (wants("weight first") and wants("integer contraction")):
        return None
    w_const = b.constant_array(weight)
    if w_const is None:
        return None
    return w_const.reshape(spec.out_channels, spec.in_channels, spec.kernel[0] * spec.kernel[1])


def use_exact_sampler(b: Builder, x: Value) -> bool:
    """Whether ``x`` is too large (or of unknown size) for bilinear GridSample's precision.

    Then the gather lowering's exact sampler is used (see the module docstring).
    """
    if b.dtype(x) == np.float64:  # float64 grid: bilinear is exact to ~size * 2^-53
        return False
    H, W = b.dim(x, 2), b.dim(x, 3)
    return not (isinstance(H, int) and isinstance(W, int) and max(H, W) <= BILINEAR_MAX_SIZE)


def _rows(
    b: Builder, spec: DeformConvSpec, x: Value, coord: Value, band: Band, size: tuple[Dim, Dim], step=0, tap_major=False
):
    """:func:`_bilinear_rows`, or with the ``"batch 1"`` form one GridSample per offset group.

    Each group's columns ``[N, C/G, kw*Ho*Wo]`` are concatenated on axis 1:
    the same memory as the folded ``[N*G, C/G, kw*Ho*Wo]``.
    """
    G = spec.offset_groups
    if G == 1 or not wants("batch 1"):
        yield from _bilinear_rows(b, spec, x, coord, band, size, step, tap_major)
        return
    offset, mask = band.offset, band.mask
    Cg, K = spec.channels_per_offset_group, spec.taps
    parts = []
    for g in range(G):
        x_g = b.slice(x, g * Cg, (g + 1) * Cg, axis=1)
        offset_g = b.slice(offset, 2 * g * K, 2 * (g + 1) * K, axis=1)
        mask_g = None if mask is None else b.slice(mask, g * K, (g + 1) * K, axis=1)
        parts.append(_bilinear_rows(b, spec, x_g, coord, band.with_inputs(offset_g, mask_g), size, step, tap_major))
    for cols in zip(*parts):
        yield b.op("Concat", *cols, axis=1)


def _conv_contraction(
    b: Builder, spec: DeformConvSpec, x: Value, coord: Value, band: Band, size: tuple[Dim, Dim], weight, bias
) -> Value:
    """The ``"contraction as Conv"`` form: ``[N, Co, Hb, Wo]`` from one GridSample of every tap in (row, tap) order.

    The sampled map ``[N, C, Hb*K, Wo]`` holds tap ``k`` of output row ``h`` at row ``h*K + k``, so a ``Conv``
    with the weight as a ``K x 1`` kernel and stride ``(K, 1)`` is the contraction (its bias added there): no
    reshape of the columns and no ``MatMul`` (ncnn repacks the columns for both; its convolution kernels read
    the packed map as it is).

    The ``"taps as channels"`` form samples in (tap, row) order instead, ``[N, C, K*Hb, Wo]``, reads it as
    ``[N, C*K, Hb, Wo]`` (channel ``c*K + k``) and contracts with a ``1 x 1`` ``Conv`` (the weight as
    ``[Co, C/groups*K, 1, 1]``): MNN's fastest contraction (see :mod:`deform_onnx.builder.forms`).
    """
    K, Co, Cpg = spec.taps, spec.out_channels, spec.channels_per_group
    if wants("taps as channels"):  # [N*G, C/G, K*Hb*Wo] in (channel, tap, row) order read as [N, C*K, Hb, Wo]
        cols = next(iter(_rows(b, spec, x, coord, band, size, step=K)))
        cols = b.reshape(cols, [-1, spec.in_channels * K, band.rows, band.cols])
        w = b.reshape(weight, [Co, Cpg * K, 1, 1])  # channel c*K + k: the weight's own (c, kh, kw) order
        inputs = (cols, w) if bias is None else (cols, w, bias)
        return b.op("Conv", *inputs, kernel_shape=[1, 1], group=spec.groups)
    cols = next(iter(_rows(b, spec, x, coord, band, size, tap_major=True)))
    cols = b.reshape(cols, [-1, spec.in_channels, b.mul_dim(band.rows, K), band.cols])
    w = b.reshape(weight, [Co, Cpg, K, 1])
    inputs = (cols, w) if bias is None else (cols, w, bias)
    return b.op("Conv", *inputs, kernel_shape=[K, 1], strides=[K, 1], group=spec.groups)


def stacks_offset_groups(b: Builder, spec: DeformConvSpec, x: Value) -> bool:
    """Whether the ``"offset groups along H"`` form samples this layer (:func:`_stacked_contraction`).

    Asked for, more than one offset group, one convolution group (the contraction reorders the input channels
    across offset groups), static ``N, C, H, W`` (the zero rows are constants), one channel block per group
    (:func:`channel_blocks`) and a stacked map of at most :data:`STACKED_MAX_ROWS` rows.
    """
    if not wants("offset groups along H") or spec.offset_groups < 2 or spec.groups != 1:
        return False
    dims = [b.dim(x, i) for i in range(4)]
    if not all(isinstance(d, int) for d in dims):
        return False
    H = dims[2]
    return channel_blocks(spec.channels_per_offset_group) == 1 and spec.offset_groups * (H + 2) <= STACKED_MAX_ROWS


def _stacked_map(b: Builder, spec: DeformConvSpec, x: Value) -> Value:
    """The offset groups' maps stacked along H: ``[N, C/G, G*(H+2), W]``, band ``g`` at rows ``g*(H+2) + 1 ..``.

    Each group's map ``[N, C/G, H, W]`` gets one zero row above and one below (one ``Concat`` on the whole map),
    then the groups move from the channel axis to the row axis (a ``Transpose`` of ``[N, G, C/G, (H+2)*W]``):
    no value has more than 4 axes or a leading axis other than the batch (ncnn's rules).
    """
    N, C, H, W = (b.dim(x, i) for i in range(4))
    G, Cg = spec.offset_groups, spec.channels_per_offset_group
    zero = b.float_const(np.zeros((N, C, 1, W)), x)
    padded = b.op("Concat", zero, x, zero, axis=2)  # [N, C, H+2, W]
    bands = b.reshape(padded, [N, G, Cg, (H + 2) * W])
    bands = b.op("Transpose", bands, perm=[0, 2, 1, 3])  # [N, C/G, G, (H+2)*W]
    return b.reshape(bands, [N, Cg, G * (H + 2), W])


def _stacked_contraction(
    b: Builder, spec: DeformConvSpec, x_stack: Value, coord: Value, band: Band, size: tuple[Dim, Dim], weight, bias
) -> Value:
    """The ``"offset groups along H"`` form: ``[N, Co, Hb, Wo]`` from one GridSample of every group's taps.

    ``x_stack``: :func:`_stacked_map`. Each sample's row is clamped to ``[-1.5, H + 0.5]`` in its own band and
    moved to that band: a row in ``(-1, H)`` reads its band (rows ``-1`` and ``H`` are zeros, torchvision's
    zero padding), any other row reads only zero rows (torchvision: 0 at ``y <= -1`` or ``y >= H``); a NaN row
    too (replaced by ``-1.5``) unless ``"no NaN guard"``. Columns need no bands: the map keeps its width.

    With ``"taps as channels"`` the samples are in (group, tap, output row) order, ``[N, C/G, G*K*Hb, Wo]``,
    read as ``[N, C/G*G*K, Hb, Wo]`` and contracted by a ``1 x 1`` ``Conv``; else in (output row, group, tap)
    order, ``[N, C/G, Hb*G*K, Wo]``, contracted by a ``Conv`` with a ``G*K x 1`` kernel and stride ``(G*K, 1)``
    on ``C/G`` channels (no reshape of the columns). Either way the weight's input channels are read in
    (channel in group, group, tap) order (a ``Transpose`` of the weight, folded when it is a constant), so the
    sampled columns need no ``Concat`` and no ``Transpose``.
    """
    offset, mask, first, Ho, Wo = band.offset, band.mask, band.first, band.rows, band.cols
    H, W = size
    G, K, Cg, Co = spec.offset_groups, spec.taps, spec.channels_per_offset_group, spec.out_channels
    half = b.dtype(x_stack) == np.float16  # coordinates in float32 then (coordinate_dtype): the grid is float32
    rows = G * (H + 2)
    taps_as_channels = wants("taps as channels")
    # [N, G*K, (dy, dx), Hb, Wo] (offset channel (g*K + k)*2 + (0: dy, 1: dx))
    off = b.reshape(offset, [-1, G * K, 2, Ho, Wo])
    dy, dx = b.slice(off, 0, 1, axis=2), b.slice(off, 1, 2, axis=2)
    tap_y = np.tile(np.asarray(spec.tap_rows(), dtype=np.float64), G).reshape(1, G * K, 1, 1, 1)
    out_y = output_positions(spec, 0, Ho, first).reshape(1, 1, 1, -1, 1)
    y = b.op("Add", dy, b.float_const(tap_y + out_y, coord))  # band-local pixel rows
    low = b.float_const(_ROW_LOW, coord)
    y = nan_guard(b, y, b.op("Clip", y, low, b.float_const(H + _ROW_HIGH_PAST, coord)), low)
    # band g's row r is stacked row g*(H+2) + 1 + r; normalised (align_corners=0): (2*row + 1) / rows - 1
    start = np.repeat(np.arange(G) * (H + 2) + 1.0, K).reshape(1, G * K, 1, 1, 1)
    gy = b.op("Add", b.op("Mul", y, b.float_const(2.0 / rows, coord)), b.float_const(normalised(start, rows), coord))
    tap_x = np.tile(np.asarray(spec.tap_cols(), dtype=np.float64), G).reshape(1, G * K, 1, 1, 1)
    out_x = output_positions(spec, 1, Wo).reshape(1, 1, 1, 1, -1)
    gx = b.op("Add", b.op("Mul", dx, _two_over(b, W, coord)), b.float_const(normalised(tap_x + out_x, W), coord))
    gx = _finite_grid(b, gx, coord)
    grid = b.op("Concat", gx, gy, axis=2)  # [N, G*K, (x, y), Hb, Wo]
    zeros = GridSampleSpec("bilinear", "zeros", align_corners=False)
    samples = b.mul_dim(b.mul_dim(Ho, G), K)
    if taps_as_channels:  # rows (g, k, h)
        g = b.reshape(b.op("Transpose", grid, perm=[0, 1, 3, 4, 2]), [-1, samples, Wo, 2])
        m = None if mask is None else b.reshape(mask, [-1, 1, samples, Wo])
    else:  # rows (h, g, k)
        g = b.reshape(b.op("Transpose", grid, perm=[0, 3, 1, 4, 2]), [-1, samples, Wo, 2])
        m = None if mask is None else b.reshape(b.op("Transpose", mask, perm=[0, 2, 1, 3]), [-1, 1, samples, Wo])
    cols = grid_sample_node(b, zeros, x_stack, g, half)  # [N, C/G, G*K*Hb, Wo]
    if m is not None:
        cols = b.op("Mul", cols, m)
    if taps_as_channels:
        cols = b.reshape(cols, [-1, Cg * G * K, Ho, Wo])
        inputs = [cols, _stacked_weight(b, spec, weight, [Co, Cg * G * K, 1, 1])]
        kernel, strides = [1, 1], [1, 1]
    else:
        inputs = [cols, _stacked_weight(b, spec, weight, [Co, Cg, G * K, 1])]
        kernel, strides = [G * K, 1], [G * K, 1]
    if bias is not None:
        inputs.append(bias)
    return b.op("Conv", *inputs, kernel_shape=kernel, strides=strides)


def _stacked_weight(b: Builder, spec: DeformConvSpec, weight: Value, shape: list[int]) -> Value:
    """The weight ``[Co, C, kh, kw]`` with its input channels in (channel in group, group, tap) order, as ``shape``.

    ``[Co, C/G, G, K]`` read as ``shape`` (the contraction Conv's weight); a constant weight is reordered here.
    """
    G, K, Cg, Co = spec.offset_groups, spec.taps, spec.channels_per_offset_group, spec.out_channels
    w = b.constant_array(weight)
    if w is not None:  # folded here: the file holds the weight as the Conv reads it
        return b.const(np.ascontiguousarray(w.reshape(Co, G, Cg, K).transpose(0, 2, 1, 3).reshape(shape)))
    return b.reshape(b.op("Transpose", b.reshape(weight, [Co, G, Cg, K]), perm=[0, 2, 1, 3]), shape)


def _bilinear_rows(
    b: Builder, spec: DeformConvSpec, x: Value, coord: Value, band: Band, size: tuple[Dim, Dim], step=0, tap_major=False
):
    """Yield the sampled columns ``[N*G, C/G, step*Ho*Wo]`` of each ``step`` taps: one bilinear GridSample each.

    ``step`` taps (default: a kernel row, ``kw``) per GridSample; ``band``: ``Ho``
    output rows from output row ``first`` on (a band of :func:`~.common.row_bands`); ``size``: the input's ``(H, W)``.
    ``tap_major``: one GridSample of every tap, yielded as ``[N*G, C/G, Ho*K, Wo]`` with tap ``k`` of output
    row ``h`` at row ``h*K + k`` (:func:`_conv_contraction`).
    """
    offset, mask, first, Ho, Wo = band.offset, band.mask, band.first, band.rows, band.cols
    H, W = size
    K, kw, Cg = spec.taps, spec.kernel[1], spec.channels_per_offset_group
    half = b.dtype(x) == np.float16  # coordinates in float32 then (coordinate_dtype): the grid is float32
    xg = b.reshape(x, [-1, Cg, H, W])  # [N*G, C/G, H, W]
    dy, dx = _split(b, spec, offset, Ho, Wo)
    gy_base = base_coords(b, spec, 0, Ho, coord, ([1, -1, 1], [-1, 1, 1, 1]), size=H, start=first)
    gx_base = base_coords(b, spec, 1, Wo, coord, ([1, 1, -1], [-1, 1, 1, 1]), size=W)
    gy = b.op("Add", b.op("Mul", dy, _two_over(b, H, coord)), gy_base)
    gx = b.op("Add", b.op("Mul", dx, _two_over(b, W, coord)), gx_base)
    grid = _finite_grid(b, b.op("Concat", gx, gy, axis=2), coord)  # [N*G, K, (x, y), Ho, Wo]
    if tap_major:  # [N*G, Ho, K, Wo, (x, y)]: one GridSample, rows (h, k)
        g = b.reshape(b.op("Transpose", grid, perm=[0, 3, 1, 4, 2]), [-1, b.mul_dim(Ho, K), Wo, 2])
        cols = grid_sample_node(b, GridSampleSpec("bilinear", "zeros", align_corners=False), xg, g, half)
        if mask is not None:
            m = b.op("Transpose", b.reshape(mask, [-1, K, Ho, Wo]), perm=[0, 2, 1, 3])
            cols = b.op("Mul", cols, b.reshape(m, [-1, 1, b.mul_dim(Ho, K), Wo]))
        yield cols
        return
    grid = b.op("Transpose", grid, perm=[0, 1, 3, 4, 2])  # [N*G, K, Ho, Wo, (x, y)]
    m = None if mask is None else b.reshape(mask, [-1, 1, K, Ho, Wo])  # [N*G, 1, K, Ho, Wo]
    zeros = GridSampleSpec("bilinear", "zeros", align_corners=False)  # torchvision's sampling rule
    step = step or kw
    blocks = channel_blocks(Cg)
    if blocks > 1:  # [N*G*blocks, C/G/blocks, H, W]: each block's map is sampled by its own copy of the grid
        xg = b.reshape(x, [-1, Cg // blocks, H, W])
    for k0 in range(0, K, step):
        k1 = k0 + step
        rows = b.mul_dim(step, Ho)
        g = b.reshape(b.slice(grid, k0, k1, axis=1), [-1, rows, Wo, 2])
        if blocks > 1:  # [N*G, blocks, rows*Wo*2] -> [N*G*blocks, rows, Wo, 2]
            g = b.op("Expand", b.reshape(g, [-1, 1, b.mul_dim(b.mul_dim(rows, Wo), 2)]), b.i64([1, blocks, 1]))
            g = b.reshape(g, [-1, rows, Wo, 2])
        cols = grid_sample_node(b, zeros, xg, g, half)  # one GridSample
        # cols: [N*G, C/G, kw*Ho, Wo] ([N*G, blocks, C/G/blocks, kw*Ho, Wo] with channel blocks: the same memory)
        if m is not None:
            m_k = b.slice(m, k0, k1, axis=2)
            if blocks > 1:
                cols = b.reshape(cols, [-1, blocks, Cg // blocks, rows, Wo])
                m_k = b.reshape(m_k, [-1, 1, 1, rows, Wo])
            else:
                m_k = b.reshape(m_k, [-1, 1, rows, Wo])
            cols = b.op("Mul", cols, m_k)
        yield b.reshape(cols, [-1, Cg, b.mul_dim(rows, Wo)])


def channel_blocks(channels: int) -> int:
    """How many blocks the ``"GridSample channel blocks"`` forms sample an offset group's channels in.

    ``channels``: the channels of one offset group; a block: :data:`BLOCK_CHANNELS` of them, or
    :data:`SMALL_BLOCK_CHANNELS` with ``"GridSample channel blocks of 8"``. 1 (one block) without either form, or
    unless ``channels`` is a multiple of the block above it.
    """
    if wants("GridSample channel blocks of 8"):
        size = SMALL_BLOCK_CHANNELS
    elif wants("GridSample channel blocks"):
        size = BLOCK_CHANNELS
    else:
        return 1
    return 1 if channels <= size or channels % size else channels // size


def _split(b: Builder, spec: DeformConvSpec, offset: Value, Ho, Wo) -> tuple[Value, Value]:
    """``(dy, dx)`` of every tap, each ``[N*G, K, 1, Ho, Wo]``."""
    off = b.reshape(offset, [-1, spec.taps, 2, Ho, Wo])  # [N*G, K, (dy, dx), Ho, Wo]
    return b.slice(off, 0, 1, axis=2), b.slice(off, 1, 2, axis=2)


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
    (torchvision has no answer: its CPU kernel crashes). NaN is found with
    ``Equal(g, g)`` (false only for NaN), not ``IsNaN``, which MNN rejects.
    """
    # Constants typed from ``like``: an intermediate value's dtype may be
    # unknown to the builder (file rewrite), which would need a float32 CastLike.
    three = b.float_const(3.0, like)
    clipped = b.op("Clip", grid, b.float_const(-3.0, like), three)
    return nan_guard(b, grid, clipped, three)
