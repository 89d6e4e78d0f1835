"""The ``"DeformConv sampler"`` form: ONNX Runtime's own ``DeformConv`` samples the columns, an integer MatMul contracts.

For INT8 on ONNX Runtime (:func:`deform_onnx.quantize`, opset >= 19, ONNX
Runtime >= 1.25, which has a ``DeformConv`` kernel). A depthwise
``DeformConv`` (``group = C``) with a one-hot weight (output channel
``c*K + k`` takes tap ``k`` of input channel ``c``) writes the masked,
bilinearly sampled columns ``[N, C*K, Ho, Wo]``, rows (channel, tap): the
columns of the contraction, sampled and masked by the runtime's kernel, which
then stays float while the contraction (``C*K`` times larger in work) runs
on integers (:func:`~.integer_contraction.weight_first_contraction`).
Measured at one band of the 64-channel stack's layer (12x192 output pixels,
64 channels; ONNX Runtime 1.32 CPU): 1.68 ms at 2 threads and 2.47 ms at 1,
against 2.0 and 3.2 ms for ``GridSample`` plus the mask product (and its
coordinate nodes); the one-hot product costs ``K`` multiply-adds per column
value.

Row bands (:func:`~.common.row_bands`): a band of ``Hb`` output rows from
row ``first`` is a ``DeformConv`` over the whole input with a row stride
``sh`` and bottom pad chosen so that it has ``Hb`` output rows; its base rows
``j*sh - top`` are moved to the band's ``(first + j)*stride - top`` by adding
``(first + j)*stride - j*sh`` to the band's vertical offsets (one ``Add`` of
``[1, 2*G*K, Ho, 1]`` for all bands, :func:`shift_offsets`). The sample positions are those of the layer, to one
float rounding of the offset.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder, Value
from .spec import DeformConvSpec


def onehot_weight(spec: DeformConvSpec, dtype) -> np.ndarray:
    """``[C*K, 1, kh, kw]``: output channel ``c*K + k`` is tap ``k`` (row-major) of input channel ``c``."""
    C, K = spec.in_channels, spec.taps
    kh, kw = spec.kernel
    w = np.zeros((C, K, kh, kw), dtype=dtype)
    for k in range(K):
        w[:, k, k // kw, k % kw] = 1
    return w.reshape(C * K, 1, kh, kw)


def band_stride(spec: DeformConvSpec, H: int, rows: int) -> tuple[int, int]:
    """``(row stride, bottom pad)`` of a ``DeformConv`` over ``H`` input rows with exactly ``rows`` output rows."""
    top, _, bottom, _ = spec.pads
    reach = spec.dilation[0] * (spec.kernel[0] - 1) + 1
    for pad in range(bottom, bottom + H + reach + rows):
        length = H + top + pad - reach + 1  # output rows at stride 1
        if length < rows:
            continue
        for stride in range(1, length + 1):
            if (length - 1) // stride + 1 == rows:
                return stride, pad
    raise ValueError(f"no DeformConv row stride gives {rows} output rows over {H} input rows")  # unreachable


def shift_offsets(b: Builder, spec: DeformConvSpec, offset: Value, H: int, bands) -> Value:
    """``offset`` ``[N, 2*G*K, Ho, Wo]`` with each band's row shift added to its vertical offsets (one ``Add``).

    Row ``i`` of band ``(first, end)`` is output row ``j = i - first`` of that band's ``DeformConv``
    (row stride ``sh``, :func:`band_stride`), whose base row is ``j*sh - top``; adding
    ``i*stride - j*sh`` moves it to ``i*stride - top``. ``bands == [None]``: ``offset`` unchanged.
    """
    if bands == [None]:
        return offset
    G, K = spec.offset_groups, spec.taps
    dtype = b.value_dtype(offset) or np.float32
    rows = bands[-1][1]
    shift = np.zeros((1, G, K, 2, rows, 1), dtype=dtype)
    for first, end in bands:
        sh, _ = band_stride(spec, H, end - first)
        i = np.arange(first, end)
        shift[..., 0, first:end, 0] = i * spec.stride[0] - (i - first) * sh
    return b.op("Add", offset, b.const(shift.reshape(1, 2 * G * K, rows, 1)))


def sampler_columns(
    b: Builder, spec: DeformConvSpec, x: Value, offset: Value, mask: Value | None, H: int, band
) -> Value:
    """The sampled, masked columns ``[N, C*K, Hb, Wo]`` of output rows ``band`` (``(first, end)``; ``None``: all).

    Args:
        x: the input ``[N, C, H, W]`` (static ``H``).
        offset: the band's rows of the offset ``[N, 2*G*K, Hb, Wo]``, shifted by :func:`shift_offsets`
            (the whole map for ``band=None``).
        mask: the band's rows of the mask ``[N, G*K, Hb, Wo]``, or ``None``.
    """
    C, G = spec.in_channels, spec.offset_groups
    dtype = b.value_dtype(x) or np.float32
    top, left, bottom, right = spec.pads
    stride = list(spec.stride)
    if band is not None:
        stride[0], bottom = band_stride(spec, H, band[1] - band[0])
    return b.op(
        "DeformConv",
        x,
        b.const(onehot_weight(spec, dtype)),
        offset,
        None,  # no B: ONNX Runtime's kernel adds a given bias in one more pass over the columns
        mask,
        dilations=list(spec.dilation),
        group=C,
        kernel_shape=list(spec.kernel),
        offset_group=G,
        pads=[top, left, bottom, right],
        strides=stride,
    )
