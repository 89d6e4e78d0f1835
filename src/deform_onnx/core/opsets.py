"""Every opset bound deform-onnx relies on, one distinct name each (the lowest opset that holds it).

The lowerings' bounds are what each graph needs (the ONNX op or op version it
uses first appears there); the op registry (:mod:`deform_onnx.ops.registry`)
reads them into each lowering's ``min_opset``, and tests read them from the
registry. The exporters' bounds are what torch's exporters reach. Opset
spellings inside one lowering (e.g. ``ReduceSum``'s ``axes`` input from 13)
stay in the lowest layer that has them (:class:`deform_onnx.builder.Builder`).
"""

from __future__ import annotations

#: Lowest opset any lowering of the family reaches (the gather forms: Gather, MatMul, Where).
FAMILY_MIN_OPSET = 11

# -- deformable convolution (torchvision deform_conv2d) -------------------------------------
#: ONNX ``DeformConv`` (added in opset 19).
DEFORM_CONV_NATIVE_MIN_OPSET = 19
#: Standard ops on ``GridSample`` (added in opset 16).
DEFORM_CONV_GRID_SAMPLE_MIN_OPSET = 16
#: Standard ops on ``Gather`` (``GatherElements`` / ``GatherND`` without ``batch_dims``: 11).
DEFORM_CONV_GATHER_MIN_OPSET = 11
#: Lowest opset deformable convolution lowers at, whatever the method.
DEFORM_CONV_MIN_OPSET = DEFORM_CONV_GATHER_MIN_OPSET

# -- F.grid_sample ---------------------------------------------------------------------------
#: One ``GridSample`` node (added in opset 16).
GRID_SAMPLE_NATIVE_MIN_OPSET = 16
#: The gather form of ``F.grid_sample``.
GRID_SAMPLE_GATHER_MIN_OPSET = 11
#: GridSample-20: N-D input (5-D ``F.grid_sample`` as one node), modes spelled ``linear`` / ``cubic``.
GRID_SAMPLE_ND_MIN_OPSET = 20

# -- multi-scale deformable attention --------------------------------------------------------
#: The fused gather form, all levels at once.
MSDA_GATHER_MIN_OPSET = 11

# -- exporters (torch 2.14) ------------------------------------------------------------------
#: The dynamo exporter's own build floor: lower targets are converted down.
DYNAMO_BUILD_MIN_OPSET = 18
#: Lowest target the dynamo path's down-conversion reaches: onnx's version converter has no
#: Reshape adapter from 14 to 13, and every standard-op lowering uses Reshape.
DYNAMO_MIN_OPSET = 14
#: Lowest dynamo target with dynamic shapes: sizes are read with Shape, which has no
#: 15 -> 14 adapter (torch's own sym_size translation hits the same wall).
DYNAMO_DYNAMIC_MIN_OPSET = 15
#: Lowest opset the TorchScript symbolics are registered at.
TORCHSCRIPT_MIN_OPSET = FAMILY_MIN_OPSET
