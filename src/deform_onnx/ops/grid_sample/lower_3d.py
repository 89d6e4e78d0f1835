"""5-D (volumetric) ``F.grid_sample`` in standard ops from opset 11: trilinear and nearest.

For runtimes without a 5-D GridSample (OpenVINO rejects it,
openvinotoolkit/openvino#37770; TensorRT's GridSample is 4-D only) and for
opsets below 20 (GridSample is 4-D only before GridSample-20). Semantics are
ATen's ``grid_sampler_3d`` (``aten/src/ATen/native/GridSampler.cpp``): per
axis the coordinate of :func:`.lower.source_index` (unnormalise, then
border / reflection), then

- trilinear: the 8 corners ``floor(p)`` and ``floor(p) + 1`` per axis,
  weights the products of ``1 - frac`` / ``frac``, a corner outside the volume
  contributes 0 (``within_bounds_3d``);
- nearest: ``round(p)`` half to even (``std::nearbyint``), 0 outside.

The gather sampler's pieces (:mod:`deform_onnx.sampler.gather`) do the work, one axis more: a
zero-padded channels-last row table (one zero slice before each spatial axis,
two after), :func:`~deform_onnx.sampler.gather.padded_corner` / :func:`~deform_onnx.sampler.gather.padded_nearest`
per axis, and the 8 corners as two :class:`~deform_onnx.sampler.gather.BilinearCorners` (the
``z`` and ``z + 1`` planes) whose weights carry the ``z`` factor. The numpy
reference of these steps is :func:`deform_onnx.ops.grid_sample.reference.grid_sample_3d`.
"""

from __future__ import annotations

from ...builder import Builder, Dim, Value
from ...builder.forms import wants
from ...sampler.coords import coordinate_dtype, in_input_dtype
from ...sampler.gather import PAD_AFTER, PAD_BEFORE, BilinearCorners, padded_corner, padded_nearest
from .flat import grid_components
from .lower import GridSampleSpec, source_index

PAD = PAD_BEFORE + PAD_AFTER


def padded_rows_3d(b: Builder, x: Value, width: Dim) -> Value:
    """``x`` ``[N, C, D, H, W]`` as rows ``[N*(D+3)*(H+3)*(W+3)*(C/width), width]`` of a zero-padded channels-last copy.

    As :func:`deform_onnx.sampler.gather.padded_channel_rows` with one more spatial axis: row
    ``((n*(D+3) + z + 1)*(H+3) + y + 1)*(W+3) + x + 1`` holds voxel ``(n, z, y, x)``.
    Zero blocks are concatenated (no Pad: no Pad 18->17 adapter in onnx's converter).
    """
    N, C = b.dim(x, 0), b.dim(x, 1)
    sizes = [b.dim(x, axis) for axis in (2, 3, 4)]
    zero = b.float_const(0.0, x)
    xt = x
    for k in range(3):
        done = [b.add_dim(s, PAD) for s in sizes[:k]]
        for_block = [N, C, *done, None, *sizes[k + 1 :]]
        before, after = (
            b.op("Expand", zero, b.shape_vector([n if d is None else d for d in for_block]))
            for n in (PAD_BEFORE, PAD_AFTER)
        )
        xt = b.op("Concat", before, xt, after, axis=2 + k)
    voxels = b.mul_dim(b.mul_dim(b.add_dim(sizes[0], PAD), b.add_dim(sizes[1], PAD)), b.add_dim(sizes[2], PAD))
    xt = b.op("Transpose", b.reshape(xt, [-1, C, voxels]), perm=[0, 2, 1])  # a 3-D Transpose, as in 4-D
    return b.reshape(xt, [-1, width])


def lower_gather_3d(b: Builder, spec: GridSampleSpec, x: Value, grid: Value) -> Value:
    """``x [N, C, D, H, W]`` at ``grid [N, Do, Ho, Wo, 3]`` (x, y, z) -> ``[N, C, Do, Ho, Wo]``; trilinear or nearest.

    Static or dynamic sizes; float16 input keeps float32 coordinates and weights.

    Raises:
        ValueError: ``mode='bicubic'`` (5-D bicubic: PyTorch refuses it too; ONNX Runtime has no 5-D cubic).
    """
    if spec.mode == "bicubic":
        raise ValueError(
            "grid_sample: mode 'bicubic' is 4-D only (PyTorch and ONNX Runtime have no 5-D cubic); "
            "use mode 'bilinear' (trilinear) or 'nearest' for 5-D input, or keep the GridSample node "
            "(method 'native', opset >= 20)"
        )
    N, C, D, H, W = (b.dim(x, i) for i in range(5))
    Do, Ho, Wo = (b.dim(grid, i) for i in (1, 2, 3))
    coord, grid = coordinate_dtype(b, x, grid)
    row = b.add_dim(W, PAD)
    plane = b.mul_dim(b.add_dim(H, PAD), row)
    coords, n = grid_components(b, grid, N, [Do, Ho, Wo], b.mul_dim(b.add_dim(D, PAD), plane))
    px, py, pz = (source_index(b, spec, g, size, coord) for g, size in zip(coords, (W, H, D)))
    rows = padded_rows_3d(b, x, C)

    def flat(iz, iy, ix):
        at = b.op("Add", b.op("Mul", iz, b.as_dim(plane)), b.op("Mul", iy, b.as_dim(row)))
        return b.op("Add", b.op("Add", at, ix), n)

    if spec.mode == "nearest":
        idx = flat(*(padded_nearest(b, p, size, coord) for p, size in ((pz, D), (py, H), (px, W))))
        out = b.op("Gather", rows, idx, axis=0)  # [N, Do, Ho, Wo, C]
        out = b.reshape(out, [N, Do, Ho, Wo, C]) if wants("flat sampling grid") else out
    else:
        iz, hz, lz = padded_corner(b, pz, D, coord)
        iy, hy, ly = padded_corner(b, py, H, coord)
        ix, hx, lx = padded_corner(b, px, W, coord)
        i000 = flat(iz, iy, ix)
        planes = []
        for i0, wz in ((i000, hz), (b.op("Add", i000, b.as_dim(plane)), lz)):
            weights = [in_input_dtype(b, x, b.op("Mul", wz, b.op("Mul", wy, wx))) for wy in (hy, ly) for wx in (hx, lx)]
            planes.append(BilinearCorners(b, rows, C, i0, row, 1, weights).sample(b))
        out = b.reshape(b.op("Add", *planes), [N, Do, Ho, Wo, C])
    return b.op("Transpose", out, perm=[0, 4, 1, 2, 3])
