"""``F.grid_sample`` as core ATen ops, for torch.export stacks (:func:`deform_onnx.decompositions`).

5-D calls (``aten.grid_sampler_3d``, which no torch.export backend here lowers) always take the
trilinear / nearest gather lowering of :mod:`.lower_3d`; 4-D calls (``aten.grid_sampler_2d``, which
ExecuTorch and LiteRT run) are decomposed only for method ``gather`` (its gather sampler form).
Both through the dynamo translation of :mod:`.binding` driven by the torch-ops builder.
"""

from __future__ import annotations

import functools

from ...builder.forms import graph_forms
from ...builder.torch_ops import DECOMPOSITION_OPSET, TorchOpsBuilder


def _four_d_only(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with graph_forms(["GridSample 4-D only"]):
            return fn(*args, **kwargs)

    return run


def decompositions(method: str) -> dict:
    """``{aten.grid_sampler_3d: fn}``, and ``aten.grid_sampler_2d`` too for method ``gather``."""
    import torch

    from .binding import translations

    sampler = "gather" if method == "gather" else "native"
    table = translations(sampler, DECOMPOSITION_OPSET, lambda _default: DECOMPOSITION_OPSET, TorchOpsBuilder)
    ops = [torch.ops.aten.grid_sampler_3d.default]
    if method == "gather":
        ops.append(torch.ops.aten.grid_sampler_2d.default)
    return {op: _four_d_only(table[op]) for op in ops}
