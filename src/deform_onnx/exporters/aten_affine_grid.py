"""``F.affine_grid`` (``aten::affine_grid_generator``) from standard ops at every TorchScript opset from 11.

Spatial transformer networks (pytorch/pytorch#96449; case c34) call ``F.affine_grid(theta, x.size())``
and then ``F.grid_sample``. torch's TorchScript exporter has a symbolic for it only at opset 20 (one
``AffineGrid`` node, which ONNX added in opset 20), so ``dynamo=False`` below 20 and every default export
at opsets 11-13 (which take the TorchScript path) stopped with "Support for this operator was added in
version 20". Two parts, one per path:

- :func:`torchscript_symbolics`: the symbolic, registered below torch's own (opset 20) through
  :data:`.aten_gaps.SYMBOLICS`; :func:`emit_affine_grid` writes the grid from standard ops.
- :func:`affine_grid`: an export-time rewrite of ``F.affine_grid`` (:mod:`.rewriters`) for
  ``torch.export``, taken only when a size is symbolic. torch's decomposition
  (``torch/_decomp/decompositions.py`` ``affine_grid_generator``) calls ``torch.linspace`` with the
  size as ``steps``, which specialises H and W to the example (measured, torch 2.14: "You marked
  L['x'].size()[2] as dynamic but your code specialized it"); the rewrite computes the same grid from
  an ``arange`` over each size, so the dynamo file follows the input's shape.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Dim, Value
from .rewriters import SizeMode, is_symbolic, register


def linspace_from_neg_one(b: Builder, n: Dim, align_corners: bool, like: Value) -> Value:
    """The normalised pixel centres of one axis of ``n`` pixels: ``[n]`` in ``like``'s dtype.

    As ATen's ``linspace_from_neg_one`` (``aten/src/ATen/native/AffineGridGenerator.cpp``):
    ``linspace(-1, 1, n)``, scaled by ``(n - 1) / n`` without ``align_corners``; ``[0]`` for ``n <= 1``.
    A static ``n`` is a constant of ``n`` values computed by torch's own ``linspace`` (O(H + W) in all);
    a dynamic one (an int64 ``[1]`` tensor) is computed at run time from an integer ``Range``
    (``(2 i - (n - 1)) / max(n - 1, 1)``, or ``(2 i + 1) / n - 1``: the same values, 0 for ``n = 1``),
    so the only shape path stays integer.
    """
    if isinstance(n, int):
        import torch

        dt = b.value_dtype(like)
        torch_dtype = torch.from_numpy(np.zeros(0, dtype=dt)).dtype if dt is not None else torch.float32
        if n <= 1:
            values = torch.zeros(max(n, 0) and 1, dtype=torch_dtype)
        else:
            values = torch.linspace(-1, 1, n, dtype=torch_dtype)
            if not align_corners:
                values = values * (n - 1) / n
        const = b.const(values.numpy())
        return const if dt is not None else b.cast_like(const, like)
    index = b.cast_like(b.op("Range", b.i64(0), b.scalar(n), b.i64(1)), like)
    size = b.cast_like(n, like)  # [1]
    one, two = b.float_const(1.0, like), b.float_const(2.0, like)
    if align_corners:
        last = b.op("Sub", size, one)
        return b.op("Div", b.op("Sub", b.op("Mul", index, two), last), b.op("Max", last, one))
    return b.op("Sub", b.op("Div", b.op("Add", b.op("Mul", index, two), one), size), one)


def emit_affine_grid(b: Builder, theta: Value, size: list[Dim], align_corners: bool) -> Value:
    """``F.affine_grid(theta, size, align_corners)``: the sampling grid of an affine transform.

    Shapes: 4-D ``size = (N, C, H, W)``, ``theta [N, 2, 3]`` -> ``grid [N, H, W, 2]``; 5-D
    ``size = (N, C, D, H, W)``, ``theta [N, 3, 4]`` -> ``[N, D, H, W, 3]``; ``theta``'s floating dtype.
    Semantics from ATen's ``affine_grid_generator_4D``/``_5D``: the base grid ``(x, y[, z], 1)`` of
    normalised pixel centres (x along W, y along H, z along D; :func:`linspace_from_neg_one`) times
    ``theta^T``. Written as ``x * theta[:, :, 0] + y * theta[:, :, 1] [+ z * theta[:, :, 2]] + theta[:, :, k]``
    with each axis' coordinates broadcast along its own axis, so the file holds per-axis coordinates
    only (O(D + H + W), or a ``Range`` when the size is dynamic) and no constant folding can turn the
    base grid into an O(D*H*W) constant. Each size in ``size`` is a Python int or an int64 ``[1]``
    tensor (read from ``Shape`` where the input is dynamic); the batch comes from ``theta``.

    Raises:
        ValueError: ``size`` not of length 4 or 5.
    """
    if len(size) not in (4, 5):
        raise ValueError(f"affine_grid: size must have 4 (N, C, H, W) or 5 (N, C, D, H, W) entries, got {len(size)}")
    spatial = list(size[2:])  # [H, W] or [D, H, W]
    k = len(spatial)
    rows = b.op("Transpose", theta, perm=[0, 2, 1])  # [N, k + 1, k]: row j multiplies coordinate j
    lead = list(range(1, k + 1))  # the spatial axes of the grid, size 1 in theta's rows

    def row(j: int) -> Value:
        return b.unsqueeze(b.slice(rows, j, j + 1, axis=1), lead[:-1])  # [N, 1, ..., 1, k]

    grid = None
    for j in range(k):  # coordinate j (x, y, z) runs along spatial axis k - 1 - j (W, H, D)
        axis = k - 1 - j
        coords = linspace_from_neg_one(b, spatial[axis], align_corners, theta)
        shape = [1] * (k + 2)
        shape[1 + axis] = -1
        term = b.op("Mul", b.reshape(coords, shape), row(j))
        grid = term if grid is None else b.op("Add", grid, term)
    return b.op("Add", grid, row(k))  # the homogeneous coordinate's column: [N, D?, H, W, k]


def _size_dims(b: Builder, size) -> list[Dim]:
    """The entries of a traced ``int[]`` size: Python ints where constant, else int64 ``[1]`` tensors."""
    from torch.onnx import symbolic_helper as sh

    const = sh._maybe_get_const(size, "is")
    if isinstance(const, (list, tuple)):
        return [int(v) for v in const]
    if not sh._is_packed_list(size):
        # one int64 [rank] tensor of sizes (e.g. Shape(x) itself): read each entry
        rank = b.static_shape(size)
        if rank is None or rank[0] is None:
            raise ValueError("affine_grid: the length of size must be known at export")
        return [b.op("Gather", size, b.i64([i]), axis=0) for i in range(int(rank[0]))]
    dims: list[Dim] = []
    for item in sh._unpack_list(size):
        value = sh._maybe_get_const(item, "i")
        if isinstance(value, int):
            dims.append(value)
        else:
            shape = b.static_shape(item)
            dims.append(b.unsqueeze(item, [0]) if shape is not None and len(shape) == 0 else item)
    return dims


def _affine_grid_symbolic(g, theta, size, align_corners):
    from torch.onnx import symbolic_helper as sh

    from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line

    b = TorchScriptBuilder(g)
    try:
        return emit_affine_grid(b, theta, _size_dims(b, size), bool(sh._maybe_get_const(align_corners, "b")))
    except ValueError as exc:
        _keep_error_one_line(exc, g)
        raise


def torchscript_symbolics(min_opset: int) -> dict:
    """TorchScript op name -> (symbolic, opsets) for :data:`.aten_gaps.SYMBOLICS`: below torch's own (20)."""
    return {"aten::affine_grid_generator": (_affine_grid_symbolic, range(min_opset, 20))}


# -- torch.export: F.affine_grid over symbolic sizes -----------------------------------------------
@register("torch.nn.functional.affine_grid", "pytorch/pytorch#96449 (spatial transformer networks: F.affine_grid)")
def affine_grid(mode: SizeMode, original, theta, size, align_corners=None):
    """``F.affine_grid(theta, size, align_corners)`` from an ``arange`` per spatial size when a size is
    symbolic (``torch.export``), as :func:`emit_affine_grid` writes it; ``NotImplemented`` (torch's own,
    with its checks and messages) otherwise, or when ``theta`` does not fit ``size``.
    """
    import torch

    size = [mode.scalar(v) for v in size]
    if not any(is_symbolic(v) for v in size) or len(size) not in (4, 5):
        return NotImplemented
    k = len(size) - 2
    if not (isinstance(theta, torch.Tensor) and theta.is_floating_point() and theta.dim() == 3):
        return NotImplemented
    if tuple(theta.shape[1:]) != (k, k + 1):
        return NotImplemented
    spatial = size[2:]
    rows = theta.transpose(1, 2)  # [N, k + 1, k]

    def row(j):
        return rows[:, j].reshape(theta.shape[0], *([1] * k), k)

    grid = row(k)
    for j in range(k):  # coordinate j (x, y, z) runs along spatial axis k - 1 - j (W, H, D)
        axis = k - 1 - j
        n = spatial[axis]
        index = torch.arange(n, device=theta.device).to(theta.dtype)
        if align_corners:
            coords = (2 * index - (n - 1)) / torch.sym_max(n - 1, 1)
        else:  # None: torch's default since 1.3 (F.affine_grid warns about it in eager)
            coords = (2 * index + 1) / n - 1
        shape = [1] * (k + 2)
        shape[1 + axis] = -1
        grid = grid + coords.reshape(shape) * row(j)
    return grid
