"""Pieces shared by the standard-op lowerings: the sample-grid bases, output sizes, dtypes, batch chunking."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from .spec import DeformConvSpec


def base_coords(
    b: Builder,
    spec: DeformConvSpec,
    axis: int,
    n_out: Dim,
    like: Value,
    layout: tuple[list[int], list[int]],
    *,
    size: Dim | None = None,
    start: int = 0,
) -> Value:
    """Sampling position of every (output index, tap) along one spatial axis.

    ``base = o*stride - pad + tap*dilation`` (torchvision), with ``o`` laid
    out as ``layout[0]`` (one ``-1`` entry) and the K taps as ``layout[1]``
    (one ``-1`` entry), broadcast together. With ``size`` given the result is
    normalised for GridSample with ``align_corners=0``:
    ``(2*base + 1) / size - 1``.

    ``start`` (static sizes only) is the first output index: a band of
    output rows ``start .. start + n_out - 1`` (:func:`row_bands`).

    Static sizes give a constant of O(Ho + K) elements (never O(Ho*Wo));
    dynamic ones are built from ``Range`` at run time. ``axis`` 0 = rows, 1 = columns.
    """
    stride, pad = spec.stride[axis], spec.padding[axis]
    out_shape, tap_shape = layout
    taps = np.asarray(spec.tap_rows() if axis == 0 else spec.tap_cols(), dtype=np.float64)
    if isinstance(n_out, int) and (size is None or isinstance(size, int)):
        base = output_positions(spec, axis, n_out, start).reshape(out_shape) + taps.reshape(tap_shape)
        return b.float_const(base if size is None else normalised(base, size), like)
    if start:
        raise ValueError("base_coords: a band start needs static sizes")
    # Dynamic: o from Range (integer), cast once to the input's dtype.
    o = b.op("Range", b.i64(0), b.scalar(n_out), b.i64(1))
    o = b.cast_like(b.reshape(o, out_shape), like)
    if size is None:
        o = b.op("Add", b.op("Mul", o, b.float_const(stride, like)), b.float_const(-pad, like))
        return b.op("Add", o, b.float_const(taps.reshape(tap_shape), like))
    s = b.cast_like(b.as_dim(size), like)
    scale = b.op("Div", b.float_const(2.0, like), s)  # 2 / size
    o = b.op("Mul", o, b.float_const(stride, like))
    t = b.float_const((2.0 * (taps.reshape(tap_shape) - pad) + 1.0) / 2.0, like)
    # (2*(o*stride + tap - pad) + 1)/size - 1  ==  (o*stride + (tap - pad + 0.5)) * (2/size) - 1
    return b.op("Sub", b.op("Mul", b.op("Add", o, t), scale), b.float_const(1.0, like))


def output_positions(spec: DeformConvSpec, axis: int, n_out: int, start: int = 0) -> np.ndarray:
    """``o*stride - pad`` for output indices ``o = start .. start + n_out - 1`` along ``axis`` (float64 ``[n_out]``).

    The first input position each output index's window reads (torchvision's ``deform_conv2d``); a tap adds
    ``tap*dilation`` (:meth:`DeformConvSpec.tap_rows` / :meth:`DeformConvSpec.tap_cols`).
    """
    return (np.arange(n_out, dtype=np.float64) + start) * spec.stride[axis] - spec.padding[axis]


def normalised(position: np.ndarray, size: int) -> np.ndarray:
    """Pixel positions as GridSample's coordinates with ``align_corners=0``: ``(2*position + 1) / size - 1``."""
    return (2.0 * position + 1.0) / size - 1.0


def output_dims(b: Builder, spec: DeformConvSpec, x: Value) -> tuple[Dim, Dim]:
    """``(Ho, Wo)`` of the convolution, from the input's size and the conv arithmetic.

    Never from the offset's size (an offset of the wrong size must not set the
    output's size): ``Ho = (H - span) // stride + 1`` with
    :meth:`DeformConvSpec.span`; static ints when H / W are static, else int64
    ``[1]`` tensors (integer-only, as TensorRT wants shape tensors).
    """
    dims = []
    for axis in (0, 1):
        size = b.dim(x, 2 + axis)
        if isinstance(size, int):
            dims.append(spec.out_len(axis, size))
            continue
        span, stride = spec.span(axis), spec.stride[axis]
        if stride == 1:
            dims.append(b.add_dim(size, 1 - span))
        else:  # (size - span) >= 0 whenever the kernel fits: Div's truncation is floor there
            dims.append(b.add_dim(b.op("Div", b.add_dim(size, -span), b.i64([stride])), 1))
    return dims[0], dims[1]


def checked_spatial(b: Builder, t: Value | None, Ho: Dim, Wo: Dim) -> Value | None:
    """``t`` (an offset or mask ``[N, C, h, w]``), failing at run time unless ``(h, w) == (Ho, Wo)``.

    Static sizes are checked at export (:meth:`DeformConvSpec.from_shapes`).
    With dynamic ones ONNX has no assert, so ``t`` goes through a Reshape to
    ``[N, C, Ho, Wo]`` whose two spatial entries turn into ``-1, -1`` when
    either size differs: a Reshape with two ``-1`` is an error in every
    runtime, while a plain Reshape could silently re-split ``h*w`` pixels.
    """
    if t is None:
        return None
    shape = b.static_shape(t)
    if shape is not None and isinstance(Ho, int) and isinstance(Wo, int) and shape[2] == Ho and shape[3] == Wo:
        return t
    want = b.shape_vector([Ho, Wo])
    same = b.op("Equal", b.slice(b.op("Shape", t), 2, 4, axis=0), want)
    both = b.op("And", b.op("Gather", same, b.i64(0), axis=0), b.op("Gather", same, b.i64(1), axis=0))
    hw = b.op("Where", both, want, b.i64([-1, -1]))
    # Leading 0s copy N and C. (Not two Slices of one Shape: onnxscript's optimizer
    # fuses those into a Split that it places after their users, an unsorted graph.)
    return b.op("Reshape", t, b.op("Concat", b.i64([0, 0]), hw, axis=0))


#: Largest static batch that the lowerings unroll image by image (:func:`per_image`).
PER_IMAGE_MAX_BATCH = 16
#: Smallest static output map (Ho*Wo) that is worth unrolling: below it the
#: extra nodes cost more time than the smaller working set saves.
PER_IMAGE_MIN_PIXELS = 64 * 64


def per_image(N: Dim, pixels: Dim) -> list[int | None]:
    """The images a lowering samples and contracts one at a time: ``[0 .. N-1]``, or ``[None]`` = all at once.

    ``pixels`` is the output map's ``Ho*Wo``. ONNX Runtime's ``DeformConv``
    works one image at a time, so its peak memory does not grow with the
    batch; a lowering that samples a tap (or a kernel row) of all N images at
    once holds N images' columns. For a static batch of 2 to
    :data:`PER_IMAGE_MAX_BATCH` images of at least
    :data:`PER_IMAGE_MIN_PIXELS` output pixels the lowerings therefore emit
    the sampling and contraction once per image (the index math stays
    batched; the weights are sliced once and shared). Measured with ONNX
    Runtime CPU, side by side (BENCHMARKS.md): at 8x64x64 peak memory 75.9 ->
    29.5 MB (grid_sample) and 139 -> 61 MB (gather), time within noise
    (grid_sample +6%, gather -12%); at 4x64x32 memory also halves but time
    grows 9-19% (per-node overhead on small maps), hence the size floor. A
    dynamic batch would need a ``Loop``: it stays batched.
    """
    if (
        isinstance(N, int)
        and 1 < N <= PER_IMAGE_MAX_BATCH
        and isinstance(pixels, int)
        and pixels >= PER_IMAGE_MIN_PIXELS
    ):
        return list(range(N))
    return [None]


def pick(b: Builder, v: Value, first: Value, image: int | None) -> Value:
    """``v[first]``, then image ``image`` of that (the next axis), unless ``image`` is ``None``."""
    v = b.op("Gather", v, first, axis=0)
    return v if image is None else b.op("Gather", v, b.i64(image), axis=0)


def add_product(b: Builder, acc: Value | None, a: Value, m: Value, two_d: bool = True) -> Value:
    """``acc + a @ m`` (``a @ m`` when ``acc`` is None): the lowerings' accumulation of per-tap products.

    2-D ``a``, ``m``: one ``Gemm`` with ``C = acc``, what ONNX Runtime fuses a
    MatMul + Add into anyway. Written out, it leaves no MatMul + Add pair for
    onnxoptimizer's ``fuse_matmul_add_bias_into_gemm`` (run by onnxsim 0.4.36,
    which onnx2tf pins and runs first), which turns ``Add(MatMul, MatMul)``
    into a Gemm placed before its own input: an invalid graph that onnxsim
    refuses (measured here). Batched (``two_d=False``): MatMul, then Add (the
    fusion takes only 2-D products).
    """
    if acc is None:
        return b.op("MatMul", a, m)
    return b.op("Gemm", a, m, acc) if two_d else b.op("Add", acc, b.op("MatMul", a, m))


#: Output pixels per band of :func:`row_bands` (a static map larger than this is lowered band by band).
BAND_PIXELS = 48 * 48
#: Most bands :func:`row_bands` cuts a map into (each band is its own copy of the sampling nodes).
MAX_BANDS = 24
#: Output pixels per row band of the DeformConv-sampler form (64x64; ``sampler_columns``). Measured on
#: the 64-channel stack (ONNX Runtime 1.32; 2 threads / 2 threads with ``allow_spinning=0`` / 1 thread;
#: ratio to native DeformConv): 2304 px 0.91x / 1.01x / 0.75x; 3456 px 0.85x / 0.96x / 0.76x; 4608 px
#: 0.85x / 0.95x / 0.77x; 6912 px 0.88x / 1.02x / 0.81x; one piece 1.15x. Each band's DeformConv runs
#: ``C`` small GEMMs (one per group): fewer bands, fewer thread-pool hand-offs.
SAMPLER_BAND_PIXELS = 4096


def row_bands(Ho: Dim, Wo: Dim, sampler: bool = False) -> list[tuple[int, int] | None]:
    """Bands of output rows ``(first, end)`` that a lowering samples and contracts one at a time, or ``[None]``.

    A static output map of ``Ho*Wo > BAND_PIXELS`` pixels is cut into
    ``min(Ho, MAX_BANDS, ceil(Ho*Wo / BAND_PIXELS))`` bands of near-equal
    height (whole rows; consecutive, covering ``0 .. Ho``): each band's
    sampled columns and products stay small enough for the CPU's caches, and
    the band count bounds the graph's size. Dynamic sizes stay in one piece
    (a band count from the size would need a ``Loop``). Measured on ONNX
    Runtime CPU (BENCHMARKS.md, "Row bands"): bands of 9216 pixels gained
    nothing over one piece; 4608, 2304 and 1152 were within noise. ``sampler``:
    the DeformConv-sampler form's band size, ``SAMPLER_BAND_PIXELS``. Under the ``"whole map"`` graph
    form (:mod:`deform_onnx.builder.forms`): one piece.
    """
    if wants("whole map"):
        return [None]
    pixels = SAMPLER_BAND_PIXELS if sampler else BAND_PIXELS
    if not (isinstance(Ho, int) and isinstance(Wo, int)) or Ho * Wo <= pixels or Ho < 2:
        return [None]
    count = min(Ho, MAX_BANDS, -(-Ho * Wo // pixels))
    edges = [round(i * Ho / count) for i in range(count + 1)]
    return list(itertools.pairwise(edges))


@dataclass(frozen=True)
class Band:
    """One band of output rows of :func:`row_bands` (or the whole map), as the samplers take it.

    Attributes:
        first: its first output row.
        rows: its output rows (``Hb``); ``cols``: the output width (``Wo``); ``pixels``: ``Hb*Wo``.
        offset: its rows of the offset ``[N, 2*G*K, Hb, Wo]``.
        mask: its rows of the mask ``[N, G*K, Hb, Wo]``, or ``None``.
    """

    first: int
    rows: Dim
    cols: Dim
    pixels: Dim
    offset: Value
    mask: Value | None

    def with_inputs(self, offset: Value, mask: Value | None) -> Band:
        """The same rows of another offset and mask (one offset group's)."""
        return dataclasses.replace(self, offset=offset, mask=mask)


def band_inputs(b: Builder, band: tuple[int, int] | None, Ho: Dim, Wo: Dim, offset: Value, mask: Value | None) -> Band:
    """The :class:`Band` of one band of :func:`row_bands` (``None``: the whole map).

    ``offset`` ``[N, 2*G*K, Ho, Wo]`` and ``mask`` (``None`` stays ``None``) are sliced to its rows.
    """
    if band is None:
        return Band(0, Ho, Wo, b.mul_dim(Ho, Wo), offset, mask)
    first, end = band
    rows = [None if t is None else b.slice(t, first, end, axis=2) for t in (offset, mask)]
    return Band(first, end - first, Wo, (end - first) * Wo, rows[0], rows[1])
