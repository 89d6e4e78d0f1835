"""Sampling points of a map with standard ONNX ops, shared by every op's standard-op lowering.

- :mod:`.gather`: the gather sampler (a zero-padded channels-last row table,
  corner indices and bilinear / nearest weights, the NaN guard);
- :mod:`.coords`: the precision rules of sampling coordinates (float16 maps
  are sampled at float32 coordinates).

Each op keeps its own coordinate rule and contraction in its folder under
:mod:`deform_onnx.ops`; new sampling forms (bicubic, trilinear) belong here.
"""

from .coords import coordinate_dtype, in_coordinate_dtype, in_input_dtype
from .gather import BilinearCorners, nan_guard, padded_channel_rows, padded_corner, padded_nearest

__all__ = [
    "BilinearCorners",
    "coordinate_dtype",
    "in_coordinate_dtype",
    "in_input_dtype",
    "nan_guard",
    "padded_channel_rows",
    "padded_corner",
    "padded_nearest",
]
