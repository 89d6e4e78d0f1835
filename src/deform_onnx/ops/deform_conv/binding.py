"""Deformable convolution's torch bindings: the TorchScript symbolic and the dynamo translation.

Both receive ``torchvision::deform_conv2d``'s 14 arguments (``input, weight,
offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups,
offset_groups, use_mask``; torchvision's op schema), build the
:class:`~.spec.DeformConvSpec` from the builder's static shapes and emit the
lowering that ``method`` resolves to (:func:`deform_onnx.ops.registry.resolve`).
The exporters (:mod:`deform_onnx.exporters`) install them for every op of the
registry that has a binding.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...builder import IRValueBuilder, written
from ...core.opsets import DYNAMO_BUILD_MIN_OPSET
from ..class_methods import lowering_for
from ..registry import Lowering, resolve
from .classes import shape_class
from .spec import DeformConvSpec

if TYPE_CHECKING:
    from ...builder.torchscript import TorchScriptBuilder

#: TorchScript op name.
TORCHSCRIPT_OP = "torchvision::deform_conv2d"


def emit_deform_conv2d(
    b,
    lowering: Lowering,
    input,
    weight,
    offset,
    mask,
    bias,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
    offset_groups: int,
    use_mask: bool,
    weight_shape=None,
    opset: int | None = None,
):
    """Lower one ``torchvision::deform_conv2d`` call, given its arguments as the exporters receive them.

    Shared by the TorchScript symbolic and the dynamo translation: builds the
    :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec` from the builder's static
    shapes (raising ``ValueError`` on inconsistent shapes) and emits ``lowering``, or, at ``opset``, the
    target's form for the call's shape class where one is in force
    (:func:`deform_onnx.ops.class_methods.lowering_for`, :mod:`.classes`).
    ``weight_shape`` overrides the builder's view of the weight's shape (the
    TorchScript exporter completes it from the trace). Returns the
    ``[N, Co, Ho, Wo]`` output value.
    """
    bias_shape = b.static_shape(bias) if bias is not None else None
    input_shape = b.static_shape(input)
    spec = DeformConvSpec.from_shapes(
        input_shape,
        weight_shape if weight_shape is not None else b.static_shape(weight),
        b.static_shape(offset),
        b.static_shape(mask) if use_mask else None,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        offset_groups=offset_groups,
        out_channels=bias_shape[0] if bias_shape and len(bias_shape) == 1 else None,
    )
    batch = input_shape[0] if input_shape else None
    lowering = lowering_for("deform_conv2d", lowering, opset, shape_class(batch, spec.offset_groups))
    # The form written and, where values carry the exporter's names (onnx-ir), the graph values (.written).
    named = isinstance(b, IRValueBuilder)
    roles = {"input": input, "offset": offset, "mask": mask if use_mask else None} if named else {}
    with written.call("deform_conv2d", dataclasses.asdict(spec), **roles) as record:
        out = lowering.fn(b, spec, input, weight, offset, mask if use_mask else None, bias)
        if input_shape is not None and len(input_shape) == 4:
            ho, wo = (None if s is None else spec.out_len(axis, s) for axis, s in enumerate(input_shape[2:]))
            out = b.declare_shape(out, (batch, spec.out_channels, ho, wo), like=input)
        if record is not None and named:
            record.handles["output"] = out
    return out


def make_symbolic(method: str = "auto"):
    """Return the symbolic function for ``torchvision::deform_conv2d`` using ``method``."""
    from torch.onnx import symbolic_helper

    from ...builder.torchscript import TorchScriptBuilder, _keep_error_one_line

    @symbolic_helper.parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
    def deform_conv2d(
        g,
        input,
        weight,
        offset,
        mask,
        bias,
        stride_h,
        stride_w,
        pad_h,
        pad_w,
        dil_h,
        dil_w,
        groups,
        offset_groups,
        use_mask,
    ):
        b = TorchScriptBuilder(g)
        try:
            lowering = resolve("deform_conv2d", method, g.opset)
            if b.dtype(input) is None and b.static_shape(input) is not None:
                raise ValueError(
                    "deform_conv2d: input dtype is not supported for ONNX export "
                    f"({input.type().scalarType()}); use float16, float32 or float64"
                )
            return emit_deform_conv2d(
                b,
                lowering,
                input,
                weight,
                offset,
                mask,
                bias,
                (stride_h, stride_w),
                (pad_h, pad_w),
                (dil_h, dil_w),
                groups,
                offset_groups,
                use_mask,
                weight_shape=_weight_shape(g, b, weight),
                opset=g.opset,
            )
        except ValueError as exc:
            _keep_error_one_line(exc, g)
            raise

    return deform_conv2d


def _weight_shape(g, b: TorchScriptBuilder, weight) -> tuple[int | None, ...] | None:
    """The weight's shape, completed from the trace when ONNX shape inference lost it.

    A weight computed in ``forward`` (``x.new_ones(C, 1, 1, 1)``, a dynamic
    filter from a Linear layer) has a shape built from ``Shape`` ops; with
    ``dynamic_axes`` the exporter's shape inference may leave all of it
    unknown. The traced op's own input still carries the sizes it had when
    traced; kernel and channel sizes do not change with the dynamic axes.
    """
    shape = b.static_shape(weight)
    if shape is not None and len(shape) == 4 and None not in shape:
        return shape
    try:
        traced = tuple(list(g.original_node.inputs())[1].type().sizes())
    except (AttributeError, RuntimeError, IndexError, TypeError):
        return shape
    if shape is None or len(shape) != len(traced):
        return traced
    return tuple(s if s is not None else t for s, t in zip(shape, traced))


def translations(method: str, opset: int | None, build_opset, builder) -> dict:
    """Dynamo translation of ``torch.ops.torchvision.deform_conv2d`` (see :func:`~deform_onnx.translation_table`).

    ``build_opset(default)`` reads the exporter's build opset; ``builder(opset)`` makes the Builder.
    """
    import torch
    import torchvision  # noqa: F401  (registers torch.ops.torchvision.deform_conv2d)

    # Parameter names as in torchvision's op schema: torch 2.9's dispatcher matches them by name.
    def deform_conv2d(
        input,
        weight,
        offset,
        mask,
        bias,
        stride_h: int,
        stride_w: int,
        pad_h: int,
        pad_w: int,
        dilation_h: int,
        dilation_w: int,
        groups: int,
        offset_groups: int,
        use_mask: bool,
    ):
        build = build_opset(opset or DYNAMO_BUILD_MIN_OPSET)
        target = opset if opset is not None else build
        lowering = resolve("deform_conv2d", method, target)
        if lowering.min_opset > build:
            raise ValueError(f"method {lowering.name!r} needs opset >= {lowering.min_opset}")
        return emit_deform_conv2d(
            builder(build),
            lowering,
            input,
            weight,
            offset,
            mask,
            bias,
            (stride_h, stride_w),
            (pad_h, pad_w),
            (dilation_h, dilation_w),
            groups,
            offset_groups,
            use_mask,
            opset=min(target, build),
        )

    return {torch.ops.torchvision.deform_conv2d.default: deform_conv2d}
