"""The sampling grid's components and batch offsets, per point or flat (target form ``"flat sampling grid"``).

The gather form of ``grid_sample`` splits ``grid [N, *out, k]`` into its ``k`` coordinates and adds each
point's batch offset into the row table. Written the plain way, every coordinate, index and weight is an
``[N, *out]`` value (``[N, Ho, Wo]`` for 4-D input). onnx2tf (1.29.24) takes any value of 3 or more axes
whose non-batch axes are all equal (``[1, 16, 16]``: a square output) for a transposed one
(``inverted_operation_enable_disable`` in ``onnx2tf/utils/common_functions.py``: "patterns of misjudgment
when the second and subsequent dimensions are all the same value"), and the ``Reshape`` that flattens the
indices then transposes them: a plain optical-flow warp on a 16x16 image came out 3.1 off PyTorch in
LiteRT (measured here; ``tests/targets/test_tflite_warp.py``). Under the form the grid is first reshaped to
``[N * prod(out), k]`` and every per-point value is 1-D (the batch offset too), which onnx2tf never
re-lays out; the values are the same.
"""

from __future__ import annotations

from ...builder import Builder, Dim, Value
from ...builder.forms import wants

__all__ = ["grid_components"]


def grid_components(b: Builder, grid: Value, n: Dim, out: list[Dim], stride: Dim) -> tuple[list[Value], Value]:
    """``grid [N, *out, k]`` -> (its ``k`` coordinates, the batch offset ``n * stride`` of each point).

    Plain: coordinates ``[N, *out]`` and offsets ``[N, 1, ...]`` (broadcast). Under ``"flat sampling grid"``:
    both ``[N * prod(out)]``.
    """
    k = len(out)
    batch = b.op("Range", b.i64(0), b.scalar(n), b.i64(1))
    if not wants("flat sampling grid"):
        coords = [b.op("Gather", grid, b.i64(i), axis=k + 1) for i in range(k)]
        return coords, b.op("Mul", b.reshape(batch, [-1] + [1] * k), b.as_dim(stride))
    points: Dim = out[0]
    for d in out[1:]:
        points = b.mul_dim(points, d)
    flat = b.reshape(grid, [-1, k])
    coords = [b.op("Gather", flat, b.i64(i), axis=1) for i in range(k)]
    per_point = b.op("Expand", b.reshape(batch, [-1, 1]), b.shape_vector([n, points]))
    return coords, b.reshape(b.op("Mul", per_point, b.as_dim(stride)), [-1])
