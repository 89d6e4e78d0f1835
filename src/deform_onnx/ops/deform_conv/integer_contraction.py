"""The ``"integer contraction"`` form of the grid_sample lowering: a contraction ONNX Runtime runs on integers.

The default form accumulates the kernel rows' products with ``Gemm(w, cols,
acc)``. Quantized by ``onnxruntime.quantization.quantize_static`` that Gemm stays
float: its ``C`` input (the running sum) is no constant, and ONNX Runtime's QDQ
``Gemm`` rule (``GemmQDQRules`` -> ``QGemm``) takes only a constant int32 bias.
Its weight is also the *first* input, and ONNX Runtime's ``MatMul`` rule
(``MatMulQDQRules`` in
``onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``;
``MatMulNodeGroupSelector::Check`` in ``qdq_selectors.cc``) refuses an int8
first input on x86 (``QDQIsInt8Allowed()`` is false there), so a per-channel
int8 weight must be the second input.

So this form writes, per kernel row ``i`` and group ``g``::

    y_i = MatMul(Transpose(cols_i), W_i^T)      # [.., Ho*Wo, C*kw] @ [C*kw, Co]: 2-D constant weight
    out = Transpose(Sum(y_0, .., y_{kh-1}))     # [.., Co, Ho*Wo]

With Q/DQ on both MatMul inputs and none on its output, the rule fuses
``DQ -> MatMul`` into ``MatMulIntegerToFloat`` (uint8 columns, per-channel
int8 weight, float result), and the ``Transpose`` of the quantized columns
runs on uint8 (``DropQDQNodesRules`` lists ``Transpose``). ``Sum`` rather
than ``Add`` because ONNX Runtime's basic optimizations fuse ``MatMul + Add``
into a float ``Gemm`` before quantization (``MatMulAddFusion``). The numbers
are those of the default form (the same products, summed in another order).

For ONNX Runtime, :func:`weight_first_contraction` (the ``"weight first"``
form) puts a row-normalised weight first instead: no transposes, and with int8
columns (:mod:`deform_onnx.quantize.weight_first`) the U8S8 kernel.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder, Value


def integer_contraction(b: Builder, rows, w_rows: list[Value], *, groups: int, Co: int, Cpg: int, kw: int, P) -> Value:
    """``sum_i W_i @ cols_i`` for the grid_sample lowering, as 2-D-weight MatMuls.

    Args:
        rows: each kernel row's sampled columns ``[N*G, C/G, kw*Ho*Wo]`` (rows (channel, tap)).
        w_rows: each kernel row's weight ``[groups, Co/groups, C/groups, kw]``.
        groups, Co, Cpg, kw: groups, output channels, input channels per group, kernel width.
        P: ``Ho*Wo`` (an int or a 1-element int64 dim).

    Returns:
        ``[N, Co, Ho*Wo]``, the caller's layout.
    """
    sums = []
    for w_i, cols in zip(w_rows, rows):
        cols = b.reshape(cols, [-1, groups, Cpg * kw, P])  # [N, groups, C/groups*kw, P]
        w_i = b.reshape(w_i, [groups, Co // groups, Cpg * kw])
        parts = []
        for g in range(groups):
            cols_g = cols if groups == 1 else b.slice(cols, g, g + 1, axis=1)
            cols_g = b.op("Transpose", b.reshape(cols_g, [-1, Cpg * kw, P]), perm=[0, 2, 1])  # [N, P, C/g*kw]
            w_g = b.op("Transpose", b.reshape(b.slice(w_i, g, g + 1, axis=0), [Co // groups, Cpg * kw]), perm=[1, 0])
            parts.append(b.op("MatMul", cols_g, w_g))  # [N, P, Co/groups]
        sums.append(parts[0] if groups == 1 else b.op("Concat", *parts, axis=2))
    total = sums[0] if len(sums) == 1 else b.op("Sum", *sums)
    return b.op("Transpose", total, perm=[0, 2, 1])  # [N, Co, P]


def tap_product(b: Builder, cols: Value, w_k: Value, *, groups: int, Cpg: int, Cog: int, P) -> Value:
    """One tap's product in the gather lowering, on 2-D constant weights (summed by the caller with ``Sum``).

    Args:
        cols: the tap's sampled rows ``[(N*)Ho*Wo, C]`` (rows (n, y, x), channels (group, channel in group)).
        w_k: the tap's weight ``[groups, C/groups, Co/groups]``.

    Returns:
        ``[(N*)Ho*Wo, Co]`` for ``groups == 1``, else ``[N, groups, Ho*Wo, Co/groups]`` (the caller's layouts).
        Each group is its own ``MatMul`` with a ``[C/groups, Co/groups]`` weight: a batched 3-D weight
        would need per-channel scales on its last axis, which ONNX Runtime's ``MatMulIntegerToFloat``
        refuses for batched ``B`` ("b zero point is not valid", measured here).
    """
    if groups == 1:
        return b.op("MatMul", b.reshape(cols, [-1, Cpg]), b.reshape(w_k, [Cpg, Cog]))
    cols = b.reshape(cols, [-1, P, groups, Cpg])
    parts = []
    for g in range(groups):
        cols_g = b.reshape(b.slice(cols, g, g + 1, axis=2), [-1, P, Cpg])
        w_g = b.reshape(b.slice(w_k, g, g + 1, axis=0), [Cpg, Cog])
        parts.append(b.reshape(b.op("MatMul", cols_g, w_g), [-1, 1, P, Cog]))
    return b.op("Concat", *parts, axis=1)


def row_scales(weight: np.ndarray) -> np.ndarray:
    """``r``: each output channel's largest weight magnitude, ``[Co, 1]`` (1 for an all-zero row)."""
    r = np.abs(weight.reshape(weight.shape[0], -1)).max(axis=1, keepdims=True)
    return np.where(r > 0, r, 1).astype(weight.dtype)


def weight_first_contraction(b: Builder, rows, weight: np.ndarray, *, step: int, P, scale: bool = True) -> Value:
    """``sum_i W_i @ cols_i`` with the constant weight first, rows normalised: ``[Co, P]``, no transposes.

    The form for ONNX Runtime (``"weight first"``; one image, ``groups == 1``).
    :func:`integer_contraction` puts the columns first, so each band's columns
    are transposed (uint8) and its result transposed back (float): 21 of the
    171 ms of the quantized 64-channel stack (ONNX Runtime profile). Here::

        r   = max_j |W[o, j]|                      # per output channel, [Co, 1] (1 where a row is 0)
        out = Mul(Sum_i MatMul(W_i / r, cols_i), r)  # [Co, C*step] @ [C*step, P] -> [Co, P]

    Every row of ``W / r`` has largest magnitude 1, so a per-tensor uint8
    weight (symmetric, zero point 128) rounds each row as finely as a
    per-channel int8 weight would; ONNX Runtime's ``MatMul`` QDQ rule takes a
    uint8 first input on x86 (``MatMulNodeGroupSelector::Check``, ``qdq_selectors.cc``)
    and :func:`deform_onnx.quantize` gives it int8 columns as the second input,
    so the fused ``MatMulIntegerToFloat`` runs MLAS's U8S8 kernel (measured at
    one band's shape, ``[64, 576] @ [576, 2304]``, 2 threads: 0.35 ms, against
    0.74 ms for uint8 columns and 0.49 ms for the transposed form).
    In float the numbers are those of the default form to rounding
    (``(W/r)*r``).

    Args:
        rows: each step's sampled columns ``[1, C, step*P]`` (rows (channel, tap)).
        weight: the constant weight ``[Co, C, K]`` (``K = kh*kw``, taps in row-major order).
        step: taps per entry of ``rows``.
        P: output pixels of the contraction.
        scale: apply ``r`` here; ``False`` leaves it to the caller (one ``Mul`` by :func:`row_scales`
            after the row bands are joined, instead of one per band).

    Returns:
        ``[Co, P]``.
    """
    Co, C = weight.shape[0], weight.shape[1]
    r = row_scales(weight)
    normalised = weight / r[:, :, None]
    sums = []
    for i, cols in enumerate(rows):
        w_i = np.ascontiguousarray(normalised[:, :, i * step : (i + 1) * step].reshape(Co, C * step))
        sums.append(b.op("MatMul", b.const(w_i), b.reshape(cols, [C * step, P])))
    total = sums[0] if len(sums) == 1 else b.op("Sum", *sums)
    return b.op("Mul", total, b.const(r)) if scale else total
