"""Native lowering: the standard ONNX ``DeformConv`` operator (opset >= 19)."""

from __future__ import annotations

import numpy as np

from ...builder import Builder, Value
from ...core.opsets import DEFORM_CONV_NATIVE_MIN_OPSET
from .spec import DeformConvSpec

MIN_OPSET = DEFORM_CONV_NATIVE_MIN_OPSET


def lower_native(
    b: Builder,
    spec: DeformConvSpec,
    x: Value,
    weight: Value,
    offset: Value,
    mask: Value | None,
    bias: Value | None,
) -> Value:
    """Emit one ``DeformConv`` node (inputs ``X, W, offset, B, mask``; ONNX spec).

    Raises:
        ValueError: ``spec`` has OpenVINO's border rule, which ``DeformConv`` cannot express.
    """
    if not spec.bilinear_interpolation_pad:
        raise ValueError(
            "DeformConv samples with torchvision's border rule, not OpenVINO's "
            "(bilinear_interpolation_pad=false); use method 'grid_sample' or 'gather'"
        )
    # DeformConv takes every float input in X's type (T); a model whose offsets (or mask, weight, bias) are of another
    # float dtype (mmrotate's float32 anchors' offsets beside a float16 map) gets them cast, as the other forms do.
    offset, mask, weight, bias = (_as_input_dtype(b, x, v) for v in (offset, mask, weight, bias))
    if mask is not None and bias is None:
        # B precedes mask in DeformConv's inputs; a zero bias keeps the node simple
        # for runtimes that mishandle empty optional inputs.
        bias = b.float_const(np.zeros((spec.out_channels,)), x)
    return b.op(
        "DeformConv",
        x,
        weight,
        offset,
        bias,
        mask,
        dilations=list(spec.dilation),
        group=spec.groups,
        kernel_shape=list(spec.kernel),
        offset_group=spec.offset_groups,
        pads=list(spec.pads),
        strides=list(spec.stride),
    )


def _as_input_dtype(b: Builder, x: Value, value: Value | None) -> Value | None:
    """``value`` cast to ``x``'s float dtype when both are known and differ (else as it is)."""
    if value is None:
        return None
    want, have = b.dtype(x), b.dtype(value)
    if want is None or have is None or np.dtype(want) == np.dtype(have):
        return value
    return b.cast_like(value, x)
