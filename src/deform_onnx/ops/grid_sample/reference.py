"""Plain-maths (numpy, float64) references of the new ``F.grid_sample`` samplers: 5-D trilinear/nearest, 4-D bicubic.

The tests compare these with PyTorch (so the rules below are checked against
ATen itself) and read them to review the graphs of :mod:`.lower_3d` and
:mod:`.lower_cubic`, which follow the same steps. Semantics are ATen's
(``aten/src/ATen/native/GridSampler.h``: ``grid_sampler_unnormalize``,
``reflect_coordinates``, ``clip_coordinates``, ``get_cubic_upsample_coefficients``,
``get_value_bounded``; the CPU kernel ``cpu/GridSamplerKernel.cpp`` computes the same).
Not used by the lowerings.
"""

from __future__ import annotations

import numpy as np

#: ATen's cubic convolution coefficient (``get_cubic_upsample_coefficients``).
CUBIC_A = -0.75


def unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Pixel coordinate of normalised ``g`` (``grid_sampler_unnormalize``)."""
    return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2


def reflect(p: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """``reflect_coordinates`` about the corner-pixel centres (``align_corners``) or the image edges, then clip."""
    low, span = (0.0, size - 1.0) if align_corners else (-0.5, float(size))
    if span <= 0:
        return np.zeros_like(p)
    a = np.abs(p - low)
    flips = np.floor(a / span)
    extra = a - flips * span
    r = np.where(flips % 2 == 0, extra + low, span - extra + low)
    return np.clip(r, 0, size - 1)


def source_index(g: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    """``grid_sampler_compute_source_index``: unnormalise, then the padding rule (bilinear and nearest)."""
    p = unnormalize(g, size, align_corners)
    if padding == "border":
        return np.clip(p, 0, size - 1)
    if padding == "reflection":
        return reflect(p, size, align_corners)
    return p


def _take(x: np.ndarray, n: np.ndarray, idx: list[np.ndarray], sizes: tuple[int, ...]) -> np.ndarray:
    """``x[n, :, *idx]`` as ``[N, C, *out]``, 0 where any index is outside (``within_bounds_*``)."""
    inside = np.ones(idx[0].shape, dtype=bool)
    for i, s in zip(idx, sizes):
        inside &= (i >= 0) & (i < s)
    clipped = [np.clip(i, 0, s - 1) for i, s in zip(idx, sizes)]
    v = x[(n, slice(None), *clipped)]  # [N, *out, C]: advanced indices first
    v = np.where(inside[..., None], v, 0.0)
    return np.moveaxis(v, -1, 1)


def grid_sample_3d(
    x: np.ndarray, grid: np.ndarray, mode: str = "bilinear", padding: str = "zeros", align_corners: bool = False
) -> np.ndarray:
    """``F.grid_sample`` of ``x [N, C, D, H, W]`` at ``grid [N, Do, Ho, Wo, 3]`` (x, y, z) -> ``[N, C, Do, Ho, Wo]``.

    Trilinear: the 8 corners ``floor(p)``, ``floor(p) + 1`` per axis weighted by
    ``1 - frac`` and ``frac``; nearest: ``round`` half to even (``nearbyint``).
    A corner outside the volume reads 0.
    """
    x, grid = np.asarray(x, np.float64), np.asarray(grid, np.float64)
    sizes = x.shape[2:]
    p = [source_index(grid[..., 2 - axis], sizes[axis], padding, align_corners) for axis in range(3)]  # z, y, x
    n = np.arange(x.shape[0]).reshape(-1, 1, 1, 1)
    if mode == "nearest":
        return _take(x, n, [np.rint(q).astype(np.int64) for q in p], sizes)
    lo = [np.floor(q) for q in p]
    frac = [q - f for q, f in zip(p, lo)]
    out = np.zeros((*x.shape[:2], *grid.shape[1:4]))
    for corner in np.ndindex(2, 2, 2):
        w = np.ones_like(p[0])
        idx = []
        for axis, c in enumerate(corner):
            w = w * (frac[axis] if c else 1 - frac[axis])
            idx.append(lo[axis].astype(np.int64) + c)
        out = out + _take(x, n, idx, sizes) * w[:, None]
    return out


def cubic_weights(t: np.ndarray, A: float = CUBIC_A) -> list[np.ndarray]:
    """The weights of taps ``floor - 1 .. floor + 2`` at fraction ``t`` (``get_cubic_upsample_coefficients``)."""

    def near(d):  # cubic_convolution1, |d| <= 1
        return ((A + 2) * d - (A + 3)) * d * d + 1

    def far(d):  # cubic_convolution2, 1 < |d| < 2
        return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bounded(i: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    """A tap's integer index after the padding rule (``get_value_bounded``'s ``compute_coordinates``)."""
    if padding == "border":
        return np.clip(i, 0, size - 1)
    if padding == "reflection":
        return reflect(i, size, align_corners)
    return i  # zeros: out-of-range taps read 0 (in _take)


def grid_sample_bicubic(
    x: np.ndarray, grid: np.ndarray, padding: str = "zeros", align_corners: bool = False
) -> np.ndarray:
    """``F.grid_sample(mode='bicubic')`` of ``x [N, C, H, W]`` at ``grid [N, Ho, Wo, 2]`` -> ``[N, C, Ho, Wo]``.

    ATen unnormalises without the padding rule for bicubic, takes the 4x4 taps
    around ``floor(p)`` and applies the padding rule to each tap's integer
    index (``get_value_bounded``): zeros reads 0 outside, border clips the
    index, reflection reflects it. Weights: :func:`cubic_weights` (A = -0.75).
    """
    x, grid = np.asarray(x, np.float64), np.asarray(grid, np.float64)
    H, W = x.shape[2:]
    px, py = unnormalize(grid[..., 0], W, align_corners), unnormalize(grid[..., 1], H, align_corners)
    fx, fy = np.floor(px), np.floor(py)
    wx, wy = cubic_weights(px - fx), cubic_weights(py - fy)
    n = np.arange(x.shape[0]).reshape(-1, 1, 1)
    out = np.zeros((*x.shape[:2], *grid.shape[1:3]))
    for i in range(4):
        iy = _bounded(fy - 1 + i, H, padding, align_corners).astype(np.int64)
        for j in range(4):
            ix = _bounded(fx - 1 + j, W, padding, align_corners).astype(np.int64)
            out = out + _take(x, n, [iy, ix], (H, W)) * (wy[i] * wx[j])[:, None]
    return out
