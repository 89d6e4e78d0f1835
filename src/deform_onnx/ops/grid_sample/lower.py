"""``torch.nn.functional.grid_sample`` (``aten::grid_sampler``, 4-D and 5-D): its spec and two lowerings.

``native``: one ONNX ``GridSample`` (opset >= 16; the mode is spelled
``bilinear`` below opset 20, ``linear`` from 20, whose GridSample also takes
N-D inputs). ``gather``: standard ops from opset 11, through the gather
sampler (:mod:`deform_onnx.sampler`), for runtimes and converters without a usable
GridSample.

Semantics are ATen's CPU kernel (``aten/src/ATen/native/cpu/GridSamplerKernel.cpp``,
``ComputeLocation`` / ``ApplyGridSample``; the scalar reference is
``aten/src/ATen/native/GridSampler.h``, ``grid_sampler_compute_source_index``).
The gather lowering computes pixel coordinates in the same float32 steps:

- unnormalise: ``(g + 1) * ((size - 1) / 2)`` with ``align_corners``, else
  ``(g + 1) * (size / 2) - 0.5`` (the vectorised kernel's form; GridSampler.h's
  ``((g + 1) * size - 1) / 2`` is the same number up to one rounding);
- ``border``: clip into ``[0, size - 1]``;
- ``reflection``: reflect about the corner-pixel centres (``align_corners``,
  period ``2 * (size - 1)``) or the image edges (period ``2 * size``, on
  ``p + 0.5``) with ``extra = |p| - trunc(|p| / period) * period`` and
  ``min(extra, period - extra)``, then clip (``reflect_coordinates``);
- ``bilinear``: corners ``floor(p)`` and ``floor(p) + 1``, weights
  ``1 - (p - floor(p))`` and ``p - floor(p)``, a corner outside the image
  contributes 0 (``within_bounds_2d``);
- ``nearest``: ``round(p)`` half to even (``std::nearbyint``; ONNX ``Round``
  rounds half to even too), 0 outside the image.

5-D input (``[N, C, D, H, W]``, grid ``[N, Do, Ho, Wo, 3]``): ``native`` is
GridSample-20 (N-D; opset >= 20), ``gather`` the trilinear / nearest form of
:mod:`.lower_3d`. ``bicubic`` (4-D only, as in PyTorch): ``native`` is
GridSample ``cubic`` (``bicubic`` below opset 20), ``gather`` the 16-tap form
of :mod:`.lower_cubic`. Which form each call gets: :func:`deform_onnx.ops.grid_sample.call.grid_sample_call`.
A NaN coordinate samples 0 (ATen's result there is undefined: it casts NaN
to an integer index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from ...core.opsets import GRID_SAMPLE_GATHER_MIN_OPSET, GRID_SAMPLE_NATIVE_MIN_OPSET, GRID_SAMPLE_ND_MIN_OPSET
from ...sampler.coords import coordinate_dtype, in_input_dtype
from ...sampler.gather import BilinearCorners, nan_guard, padded_channel_rows, padded_corner, padded_nearest
from .flat import grid_components

#: ATen's enums (``GridSamplerUtils.h``): index = the int ``aten::grid_sampler`` receives.
TORCH_MODES = ("bilinear", "nearest", "bicubic")
TORCH_PADDINGS = ("zeros", "border", "reflection")
#: ONNX GridSample's mode names (16: bilinear/bicubic; 20: linear/cubic) -> torch's.
ONNX_MODES = {
    "bilinear": "bilinear",
    "linear": "bilinear",
    "nearest": "nearest",
    "bicubic": "bicubic",
    "cubic": "bicubic",
}

NATIVE_MIN_OPSET = GRID_SAMPLE_NATIVE_MIN_OPSET
GATHER_MIN_OPSET = GRID_SAMPLE_GATHER_MIN_OPSET


@dataclass(frozen=True)
class GridSampleSpec:
    """One ``grid_sample`` call: ``input [N, C, H, W]``, ``grid [N, Ho, Wo, 2]`` (x, y in [-1, 1]) -> ``[N, C, Ho, Wo]``.

    Or 5-D: ``input [N, C, D, H, W]``, ``grid [N, Do, Ho, Wo, 3]`` (x, y, z) -> ``[N, C, Do, Ho, Wo]``
    (bilinear, i.e. trilinear, and nearest; bicubic is 4-D only, as in PyTorch).

    Raises:
        ValueError: an unknown mode or padding mode.
    """

    mode: str = "bilinear"
    padding_mode: str = "zeros"
    align_corners: bool = False

    def __post_init__(self):
        if self.mode not in TORCH_MODES:
            raise ValueError(f"unknown grid_sample mode {self.mode!r}; use one of {', '.join(TORCH_MODES)}")
        if self.padding_mode not in TORCH_PADDINGS:
            raise ValueError(
                f"unknown grid_sample padding_mode {self.padding_mode!r}; use one of {', '.join(TORCH_PADDINGS)}"
            )

    @classmethod
    def from_torch(cls, interpolation_mode: int, padding_mode: int, align_corners) -> GridSampleSpec:
        """From ``aten::grid_sampler``'s integer arguments (ATen's enum order)."""
        if not 0 <= interpolation_mode < len(TORCH_MODES) or not 0 <= padding_mode < len(TORCH_PADDINGS):
            raise ValueError(
                f"grid_sampler: unknown interpolation_mode {interpolation_mode} or padding_mode {padding_mode}"
            )
        return cls(TORCH_MODES[interpolation_mode], TORCH_PADDINGS[padding_mode], bool(align_corners))

    @classmethod
    def from_onnx(cls, mode: str, padding_mode: str, align_corners: int) -> GridSampleSpec:
        """From an ONNX ``GridSample`` node's attributes (defaults: linear/bilinear, zeros, 0)."""
        if mode not in ONNX_MODES:
            raise ValueError(f"unknown GridSample mode {mode!r}")
        return cls(ONNX_MODES[mode], padding_mode, bool(align_corners))


def check_shapes(b: Builder, x: Value, grid: Value) -> int:
    """The input's rank (4 or 5; 4 when unknown), after checking ``grid`` against it where ranks are known.

    Raises:
        ValueError: input neither 4-D nor 5-D, or a grid that is not ``[N, H_out, W_out, 2]`` (4-D input) /
            ``[N, D_out, H_out, W_out, 3]`` (5-D input).
    """
    xs, gs = b.static_shape(x), b.static_shape(grid)
    if xs is not None and len(xs) not in (4, 5):
        raise ValueError(
            f"grid_sample: input has rank {len(xs)}; 4-D (2-D sampling) and 5-D (3-D sampling) are lowered"
        )
    rank = len(xs) if xs is not None else (len(gs) if gs is not None and len(gs) in (4, 5) else 4)
    if gs is not None and (len(gs) != rank or gs[-1] not in (rank - 2, None)):
        want = "[N, H_out, W_out, 2]" if rank == 4 else "[N, D_out, H_out, W_out, 3]"
        raise ValueError(f"grid_sample: grid has shape {list(gs)} for a {rank}-D input; expected {want}")
    return rank


#: GridSample-20 takes N-D input (16 to 19: 4-D only) and spells the modes linear / cubic.
ND_MIN_OPSET = GRID_SAMPLE_ND_MIN_OPSET


def lower_native(b: Builder, spec: GridSampleSpec, x: Value, grid: Value) -> Value:
    """One ONNX ``GridSample`` with the spec's attributes; returns ``[N, C, Ho, Wo]`` (``[N, C, Do, Ho, Wo]``).

    Opset >= 16 (4-D), >= 20 for 5-D input (GridSample-20). The mode is
    ``bilinear``/``bicubic`` below opset 20 and ``linear``/``cubic`` from 20.

    Raises:
        ValueError: 5-D input below opset 20.
    """
    return grid_sample_node(b, spec, x, grid)


def grid_sample_node(b: Builder, spec: GridSampleSpec, x: Value, grid: Value, float16_map: bool | None = None) -> Value:
    """:func:`lower_native`'s ``GridSample``, for lowerings that build the grid themselves.

    ``float16_map``: the caller's word that ``x`` is float16 and ``grid`` float32 (the builder may not know
    intermediate dtypes); ``None``: read from the builder (a float16 ``x`` on a float32 or float16 grid). With
    the form ``"GridSample one dtype"`` (:mod:`deform_onnx.builder.forms`) such a map is sampled in float32 (a
    float16 grid cast up too, exactly) and the result cast back to float16.

    Raises:
        ValueError: 5-D input below opset 20.
    """
    shape = b.static_shape(x)
    if shape is not None and len(shape) == 5 and b.opset < ND_MIN_OPSET:
        raise ValueError(f"grid_sample: 5-D input as GridSample needs opset >= {ND_MIN_OPSET}, not {b.opset}")
    mode = spec.mode
    if b.opset >= ND_MIN_OPSET:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    # a float16 map with the float32 grid the lowerings compute coordinates in: ONNX allows it (GridSample's
    # T1, T2); a runtime that wants one dtype gets the map in float32 and the result back in float16. A float16
    # grid (a model's own F.grid_sample in float16) too: TVM 0.27's legalized GridSample of a float16 map returns
    # float32 whatever the grid, so a float16 op reading it was refused
    if float16_map is None:
        float16_map = b.dtype(x) == np.float16 and b.dtype(grid) in (np.float32, np.float16)
    one_dtype = wants("GridSample one dtype") and float16_map
    if one_dtype:
        x = b.op("Cast", x, to=onnx.TensorProto.FLOAT)
        if b.dtype(grid) == np.float16:
            grid = b.op("Cast", grid, to=onnx.TensorProto.FLOAT)
    out = b.op("GridSample", x, grid, mode=mode, padding_mode=spec.padding_mode, align_corners=int(spec.align_corners))
    return b.op("Cast", out, to=onnx.TensorProto.FLOAT16) if one_dtype else out


def lower_gather(b: Builder, spec: GridSampleSpec, x: Value, grid: Value) -> Value:
    """Standard ops from opset 11 (Gather, Clip, Floor/Round, MatMul, elementwise); returns ``[N, C, Ho, Wo]``.

    Static or dynamic N, H, W, Ho, Wo. Samples the gather sampler's zero-padded
    row table (:mod:`deform_onnx.sampler`, shared with deformable convolution): a corner
    outside the image reads a zero row. Coordinates and weights are float32
    for a float16 input (as the deformable-convolution gather lowering does).

    5-D input: :func:`.lower_3d.lower_gather_3d` (trilinear / nearest);
    bicubic: :func:`.lower_cubic.lower_gather_cubic` (16 taps).

    Raises:
        ValueError: 5-D bicubic (PyTorch has none either).
    """
    if check_shapes(b, x, grid) == 5:  # unknown ranks: 4-D (DCNv3's sampler values; files are checked first)
        from .lower_3d import lower_gather_3d

        return lower_gather_3d(b, spec, x, grid)
    if spec.mode == "bicubic":
        from .lower_cubic import lower_gather_cubic

        return lower_gather_cubic(b, spec, x, grid)
    N, C, H, W = (b.dim(x, i) for i in range(4))
    Ho, Wo = b.dim(grid, 1), b.dim(grid, 2)
    coord, grid = coordinate_dtype(b, x, grid)
    # Row of padded pixel (n, iy, ix) = (n*(H+3) + iy)*(W+3) + ix; n as [N, 1, 1] ([N*Ho*Wo] when flat).
    (gx, gy), n = grid_components(b, grid, N, [Ho, Wo], b.mul_dim(b.add_dim(H, 3), b.add_dim(W, 3)))
    px = source_index(b, spec, gx, W, coord)  # [N, Ho, Wo]
    py = source_index(b, spec, gy, H, coord)
    rows = padded_channel_rows(b, x, C)  # [N*(H+3)*(W+3), C]
    row = b.as_dim(b.add_dim(W, 3))
    if spec.mode == "nearest":
        iy, ix = padded_nearest(b, py, H, coord), padded_nearest(b, px, W, coord)
        out = b.op("Gather", rows, b.op("Add", b.op("Add", b.op("Mul", iy, row), ix), n), axis=0)  # [N, Ho, Wo, C]
        out = b.reshape(out, [N, Ho, Wo, C]) if wants("flat sampling grid") else out
    else:
        iy, hy, ly = padded_corner(b, py, H, coord)  # ATen's s and n weights
        ix, hx, lx = padded_corner(b, px, W, coord)  # ATen's e and w weights
        i00 = b.op("Add", b.op("Add", b.op("Mul", iy, row), ix), n)  # [N, Ho, Wo]
        weights = [in_input_dtype(b, x, b.op("Mul", wy, wx)) for wy in (hy, ly) for wx in (hx, lx)]
        out = b.reshape(BilinearCorners(b, rows, C, i00, row, 1, weights).sample(b), [N, Ho, Wo, C])
    return b.op("Transpose", out, perm=[0, 3, 1, 2])


def source_index(b: Builder, spec: GridSampleSpec, g: Value, size: Dim, like: Value) -> Value:
    """Pixel coordinate of normalised ``g`` along an axis of ``size`` pixels, after the padding mode.

    ATen's ``grid_sampler_compute_source_index`` (see the module docstring).
    Zero padding returns ``p`` itself (the sampler clamps it; NaN samples 0);
    border and reflection return coordinates in ``[0, size - 1]`` (NaN -> 0).
    """
    p = unnormalize(b, spec, g, size, like)
    if spec.padding_mode == "zeros":
        return p
    if spec.padding_mode == "reflection":
        p = _reflect(b, p, size, spec.align_corners, like)
    last = _size_const(b, size, -1, 1.0, like)
    clipped = b.op("Clip", p, b.float_const(0.0, like), last)
    return nan_guard(b, p, clipped, b.float_const(0.0, like))


def unnormalize(b: Builder, spec: GridSampleSpec, g: Value, size: Dim, like: Value) -> Value:
    """Pixel coordinate of normalised ``g`` before any padding rule (ATen's ``grid_sampler_unnormalize``, vectorised)."""
    scale = _size_const(b, size, -1 if spec.align_corners else 0, 0.5, like)
    p = b.op("Mul", b.op("Add", g, b.float_const(1.0, like)), scale)
    return p if spec.align_corners else b.op("Sub", p, b.float_const(0.5, like))


def _reflect(b: Builder, p: Value, size: Dim, align_corners: bool, like: Value) -> Value:
    """ATen's ``reflect_coordinates`` (vectorised form): fold ``p`` into one period, mirror the upper half."""
    if align_corners:
        if isinstance(size, int) and size == 1:  # period 0: every point maps to pixel 0
            return b.op("Mul", p, b.float_const(0.0, like))
        # A dynamic size of 1 divides by 0: NaN, mapped to 0 by the caller's NaN guard.
        period = _size_const(b, size, -1, 2.0, like)
    else:
        period = _size_const(b, size, 0, 2.0, like)
        p = b.op("Add", p, b.float_const(0.5, like))
    a = b.op("Abs", p)
    extra = b.op("Sub", a, b.op("Mul", b.op("Floor", b.op("Div", a, period)), period))
    r = b.op("Min", extra, b.op("Sub", period, extra))
    return r if align_corners else b.op("Sub", r, b.float_const(0.5, like))


def _size_const(b: Builder, size: Dim, add: int, factor: float, like: Value) -> Value:
    """``(size + add) * factor`` in ``like``'s dtype: a constant, or from the integer size at run time."""
    if isinstance(size, int):
        return b.float_const(np.float64(size + add) * factor, like)
    s = b.cast_like(b.scalar(b.add_dim(size, add) if add else size), like)
    return b.op("Mul", s, b.float_const(factor, like))
