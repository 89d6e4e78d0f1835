"""Deformable convolution's registry entry: its three lowerings, the methods that pick them, what it brings.

Imported by the op registry's discovery (:func:`deform_onnx.ops.registry.discover`);
importing it registers ``deform_conv2d`` once. :data:`LOWERINGS` and
:func:`resolve_method` are public (``deform_onnx.LOWERINGS``, ``deform_onnx.resolve_method``).
"""

from __future__ import annotations

from ..registry import Lowering, OpEntry, register, resolve
from . import lower_gather, lower_grid_sample, lower_native
from .source_kinds import SOURCE_OPS

#: Deformable convolution's lowerings (``deform_onnx.LOWERINGS``), by method.
LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", lower_native.MIN_OPSET, lower_native.lower_native, node="DeformConv"),
    "grid_sample": Lowering("grid_sample", lower_grid_sample.MIN_OPSET, lower_grid_sample.lower_grid_sample),
    "gather": Lowering("gather", lower_gather.MIN_OPSET, lower_gather.lower_gather),
}

ENTRY = register(
    OpEntry(
        name="deform_conv2d",
        title="deformable convolution",
        lowerings=LOWERINGS,
        methods={m: m for m in LOWERINGS},
        auto=("grid_sample", "gather"),
        torch_ops=("torchvision::deform_conv2d",),
        onnx_nodes=tuple(SOURCE_OPS),
        order=10,
        binding="deform_onnx.ops.deform_conv.binding",
        sources="deform_onnx.ops.deform_conv.sources",
        rules="deform_onnx.ops.deform_conv.rules",
        module_checks="deform_onnx.ops.deform_conv.module_checks",
        decompositions="deform_onnx.ops.deform_conv.decompose",
        shape_classes="deform_onnx.ops.deform_conv.classes",
    )
)


def resolve_method(method: str, opset: int, *, path_min_opset: int | None = None) -> Lowering:
    """Pick deformable convolution's lowering for ``method`` at ``opset`` (:func:`~deform_onnx.ops.registry.resolve`).

    ``"auto"`` is grid_sample at opset >= 16 and gather below.
    ``path_min_opset``: the lowest opset the caller's export path reaches
    (e.g. 14 on the dynamo path); below it, the error suggests no other
    method, since none would work on that path either.

    Raises:
        ValueError: unknown method, opset below 11, or a method whose ops the
            opset does not have (e.g. ``native`` below 19).
    """
    return resolve(ENTRY.name, method, opset, path_min_opset=path_min_opset)
