"""``F.grid_sample`` as core ATen ops, for torch.export stacks (:func:`deform_onnx.decompositions`).

5-D calls (``aten.grid_sampler_3d``, which no torch.export backend here lowers) always take the
trilinear / nearest gather lowering of :mod:`.lower_3d`; 4-D calls (``aten.grid_sampler_2d``, which
ExecuTorch and LiteRT run) are decomposed only for method ``gather`` (its gather sampler form).
Both through the dynamo translation of :mod:`.binding` driven by the torch-ops builder.
:func:`bicubic_decompositions` rewrites bicubic 4-D calls only (Core ML has no bicubic sampling).
"""

from __future__ import annotations

import functools

from ...builder.forms import graph_forms
from ...builder.torch_ops import DECOMPOSITION_OPSET, TorchOpsBuilder
from .lower import TORCH_MODES

#: ATen's ``interpolation_mode`` of bicubic.
BICUBIC = TORCH_MODES.index("bicubic")


def _four_d_only(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with graph_forms(["GridSample 4-D only"]):
            return fn(*args, **kwargs)

    return run


def decompositions(method: str) -> dict:
    """``{aten.grid_sampler_3d: fn, aten.grid_sampler: fn}``, and ``aten.grid_sampler_2d`` too for method ``gather``."""
    import torch

    from .binding import translations

    sampler = "gather" if method == "gather" else "native"
    table = translations(sampler, DECOMPOSITION_OPSET, lambda _default: DECOMPOSITION_OPSET, TorchOpsBuilder)
    ops = [torch.ops.aten.grid_sampler_3d.default]
    if method == "gather":
        ops.append(torch.ops.aten.grid_sampler_2d.default)
    out = {op: _four_d_only(table[op]) for op in ops}
    lowered = _four_d_only(table[torch.ops.aten.grid_sampler.default])

    def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
        # aten.grid_sampler (composite) is what a program holds until core ATen decomposition
        # (run_decompositions(core=False), ExecuTorch's path): 4-D calls the backends run stay 2-D.
        if input.dim() == 4 and method != "gather":
            return torch.ops.aten.grid_sampler_2d.default(input, grid, interpolation_mode, padding_mode, align_corners)
        return lowered(input, grid, interpolation_mode, padding_mode, align_corners)

    out[torch.ops.aten.grid_sampler.default] = grid_sampler
    return out


def bicubic_decompositions() -> dict:
    """``{aten.grid_sampler_2d: fn}`` rewriting bicubic calls only, into the gather form of :mod:`.lower_cubic`.

    For runtimes with bilinear and nearest sampling but no bicubic (Core ML's ``resample``): the 16-tap
    gather form holds rank <= 4 tensors. Other modes are left as they are (``NotImplemented`` keeps the op).
    """
    import torch

    from .binding import translations

    lowered = translations("gather", DECOMPOSITION_OPSET, lambda _default: DECOMPOSITION_OPSET, TorchOpsBuilder)
    fn = _four_d_only(lowered[torch.ops.aten.grid_sampler_2d.default])

    def grid_sampler_2d(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
        if interpolation_mode != BICUBIC:
            return NotImplemented
        return fn(input, grid, interpolation_mode, padding_mode, align_corners)

    return {torch.ops.aten.grid_sampler_2d.default: grid_sampler_2d}
