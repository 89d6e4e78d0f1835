"""The lowerings of deformable convolution, registered by name.

Each entry: the lowest opset its graph is valid at, and one function
``fn(builder, spec, x, weight, offset, mask, bias) -> output`` that every
entry point (TorchScript symbolic, dynamo translation, file rewrite) calls.
The other ops of the family and the op -> lowerings map: :mod:`.registry`;
the sampling pieces they share with :mod:`.gather`: :mod:`.sampler`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ops.deform_conv.spec import MIN_OPSET
from ..ops.deform_conv import lower_gather as gather, lower_grid_sample as grid_sample, lower_native as native


@dataclass(frozen=True)
class Lowering:
    name: str
    min_opset: int
    fn: Callable
    summary: str


LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", native.MIN_OPSET, native.lower_native, "ONNX DeformConv op"),
    "grid_sample": Lowering(
        "grid_sample", grid_sample.MIN_OPSET, grid_sample.lower_grid_sample, "standard ops on GridSample"
    ),
    "gather": Lowering("gather", gather.MIN_OPSET, gather.lower_gather, "standard ops on Gather"),
}

METHODS = ("auto", *LOWERINGS)


def resolve_method(method: str, opset: int, *, path_min_opset: int | None = None) -> Lowering:
    """Pick the lowering for ``method`` at ``opset``.

    ``"auto"`` is grid_sample at opset >= 16 and gather below.
    ``path_min_opset``: the lowest opset the caller's export path reaches
    (e.g. 14 on the dynamo path); below it, the error suggests no other
    method, since none would work on that path either.

    Raises:
        ValueError: unknown method, opset below 11, or a method whose ops the
            opset does not have (e.g. ``native`` below 19).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise ValueError(f"opset {opset!r} is not supported: deformable convolution lowers at opset >= {MIN_OPSET}")
    if method == "auto":
        method = "grid_sample" if opset >= grid_sample.MIN_OPSET else "gather"
    lowering = LOWERINGS[method]
    if opset < lowering.min_opset:
        usable = [m for m, l in LOWERINGS.items() if l.min_opset <= opset]
        if path_min_opset is not None and opset < path_min_opset:
            usable = []  # no method works at this opset on the caller's path
        fix = f"raise the opset or use one of: {', '.join(usable)}" if usable else f"raise the opset to {lowering.min_opset} or more"
        raise ValueError(f"method {method!r} needs opset >= {lowering.min_opset} but opset {opset} was requested; {fix}")
    return lowering


def emit_deform_conv2d(
    b, lowering: Lowering, input, weight, offset, mask, bias,
    stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
    groups: int, offset_groups: int, use_mask: bool, weight_shape=None,
):
    """Lower one ``torchvision::deform_conv2d`` call, given its arguments as the exporters receive them.

    Shared by the TorchScript symbolic and the dynamo translation: builds the
    :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec` from the builder's static
    shapes (raising ``ValueError`` on inconsistent shapes) and emits ``lowering``.
    ``weight_shape`` overrides the builder's view of the weight's shape (the
    TorchScript exporter completes it from the trace). Returns the
    ``[N, Co, Ho, Wo]`` output value.
    """
    from ..ops.deform_conv.spec import DeformConvSpec

    bias_shape = b.static_shape(bias) if bias is not None else None
    spec = DeformConvSpec.from_shapes(
        b.static_shape(input),
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
    return lowering.fn(b, spec, input, weight, offset, mask if use_mask else None, bias)
