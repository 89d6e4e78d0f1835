"""``F.grid_sample`` in both exporters: the TorchScript symbolic and the dynamo translation.

Both build a :class:`~deform_onnx.ops.grid_sample.lower.GridSampleSpec` from
``aten::grid_sampler``'s arguments (``input, grid, interpolation_mode,
padding_mode, align_corners``; ATen's enum order) and emit the lowering that
``method`` resolves to for this op (:func:`deform_onnx.ops.registry.resolve`).
The TorchScript symbolic is registered at every opset from 11 (torch's own
exists only from 16, and is overridden so that ``method`` is honoured).
"""

from __future__ import annotations

from ...builder import written
from .call import grid_sample_call
from .lower import GridSampleSpec, check_shapes

#: TorchScript op name. The dynamo exporter (torch 2.14) records and translates
#: ``aten.grid_sampler`` (checked); ``aten.grid_sampler_2d``, what a decomposition
#: would leave, takes the same arguments and is mapped too (``grid_sampler_3d`` for 5-D).
TORCHSCRIPT_OP = "aten::grid_sampler"


def emit_grid_sampler(
    b, method: str, target_opset: int, input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool
):
    """Lower one ``aten::grid_sampler`` call with ``b``; ``target_opset`` picks the lowering.

    Raises:
        ValueError: an input neither 4-D nor 5-D, or a method the opset (or the call) cannot hold
            (:func:`~.call.grid_sample_call`).
    """
    spec = GridSampleSpec.from_torch(interpolation_mode, padding_mode, align_corners)
    lowering = grid_sample_call(method, target_opset, spec, check_shapes(b, input, grid))
    x_dtype, grid_dtype = b.dtype(input), b.dtype(grid)
    if x_dtype is not None and grid_dtype is not None and x_dtype != grid_dtype:
        # PyTorch requires one dtype, so the model computed the grid in the input's dtype; a
        # different one here is the TorchScript exporter's type promotion (seen: a float64 grid
        # in Hugging Face's Deformable DETR), which ONNX Runtime's GridSample has no kernel for.
        grid = b.cast_like(grid, input)
    with written.call("grid_sample"):  # the form written (.written): a 5-D call below opset 20 is gather
        out = lowering.fn(b, spec, input, grid)
    xs, gs = b.static_shape(input), b.static_shape(grid)
    if xs is not None and gs is not None and len(xs) == len(gs):  # [N, C, *grid's spatial sizes]
        out = b.declare_shape(out, (xs[0] if xs[0] is not None else gs[0], xs[1], *gs[1:-1]), like=input)
    return out


def make_symbolic(method: str = "auto"):
    """The TorchScript symbolic for ``aten::grid_sampler`` using ``method``."""
    from torch.onnx import symbolic_helper

    from ...builder.torchscript import TorchScriptBuilder

    @symbolic_helper.parse_args("v", "v", "i", "i", "b")
    def grid_sampler(g, input, grid, interpolation_mode, padding_mode, align_corners):
        b = TorchScriptBuilder(g)
        return emit_grid_sampler(b, method, g.opset, input, grid, interpolation_mode, padding_mode, align_corners)

    return grid_sampler


def translations(method: str, opset: int | None, build_opset, builder) -> dict:
    """Dynamo translations of ``aten.grid_sampler`` and ``aten.grid_sampler_2d`` (see :func:`translation_table`).

    ``build_opset(default)`` reads the exporter's build opset; ``builder(opset)`` makes the Builder.
    """
    import torch

    def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
        build = build_opset(opset or 18)
        target = opset if opset is not None else build
        return emit_grid_sampler(
            builder(build), method, target, input, grid, interpolation_mode, padding_mode, align_corners
        )

    return {
        torch.ops.aten.grid_sampler.default: grid_sampler,
        torch.ops.aten.grid_sampler_2d.default: grid_sampler,
        torch.ops.aten.grid_sampler_3d.default: grid_sampler,
    }
