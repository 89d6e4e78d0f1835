"""Precision rules of sampling coordinates, shared by every op's standard-op lowering.

float16 maps are sampled at float32 coordinates (a float16 pixel coordinate
resolves only 1 pixel at width 2048, 0.5 at 1024), and the samples cast back.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..builder import Builder, Value


def coordinate_dtype(b: Builder, x: Value, offset: Value) -> tuple[Value, Value]:
    """``(ref, offset)``: a value of the dtype sampling coordinates are computed in, and the offset in it.

    float32 for float16 inputs (a float16 pixel coordinate resolves only 1
    pixel at width 2048, 0.5 at 1024); the input itself otherwise.
    """
    if b.dtype(x) == np.float16:
        off = b.op("Cast", offset, to=onnx.TensorProto.FLOAT)
        return off, off
    return x, offset


def in_coordinate_dtype(b: Builder, x: Value, value: Value) -> Value:
    """``value`` (of the input's dtype) in the coordinate dtype: float32 when ``x`` is float16."""
    return b.op("Cast", value, to=onnx.TensorProto.FLOAT) if b.dtype(x) == np.float16 else value


def in_input_dtype(b: Builder, x: Value, value: Value) -> Value:
    """``value`` (of the coordinate dtype) back in the input's dtype: float16 when ``x`` is float16."""
    return b.op("Cast", value, to=onnx.TensorProto.FLOAT16) if b.dtype(x) == np.float16 else value
