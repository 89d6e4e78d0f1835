"""``deform_onnx.decompositions``: the op family as core ATen ops, for torch.export stacks.

Each op folder with a ``decompose`` module (:attr:`~deform_onnx.ops.registry.OpEntry.decompositions`)
gives its entries; they run the op's ONNX lowering through the torch-ops builder
(:mod:`deform_onnx.builder.torch_ops`), so one implementation serves every format.
"""

from __future__ import annotations

import importlib

from ..ops.registry import METHODS, OPS

__all__ = ["decompositions"]


def decompositions(method: str = "auto", *, core: bool = True) -> dict:
    """A table for ``ExportedProgram.run_decompositions`` that rewrites the op family into core ATen ops.

    Covers ``torchvision::deform_conv2d`` (every attribute), ``aten.grid_sampler_3d`` (5-D
    ``F.grid_sample``), ``deform_onnx::ms_deform_attn``, and for ``method="gather"`` 4-D
    ``F.grid_sample`` too (the gather sampler form). 4-D ``F.grid_sample`` (which ExecuTorch and
    LiteRT run) is kept otherwise.

    Args:
        method: ``"auto"`` (= ``"grid_sample"``), ``"grid_sample"`` (bilinear sampling through 4-D
            ``grid_sample``) or ``"gather"`` (index gathers, no grid_sample at all).
        core: start from ``torch.export.default_decompositions()`` (what ``run_decompositions()``
            does with no table), so the result is core ATen; ``False``: the family's entries, and that table's
            ``aten.meshgrid`` entries (InternImage's ``torch.meshgrid(a, b)`` without ``indexing=``, over sizes
            that stay symbolic, is kept as ``aten.meshgrid.default`` by torch.export, and ``run_decompositions``
            without an entry for it fails: "meshgrid() missing 1 required keyword-only argument: 'indexing'",
            measured on torch 2.14.1).

    Returns:
        ``{OpOverload: fn}``.

    Raises:
        ValueError: an unknown method, or ``"native"`` (no runtime of these has the op to call).

    Example:
        >>> ep = torch.export.export(model, (x,))  # doctest: +SKIP
        >>> ep = ep.run_decompositions(deform_onnx.decompositions())  # doctest: +SKIP
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: use one of {', '.join(m for m in METHODS if m != 'native')}")
    import torch

    table: dict = {}
    default = torch.export.default_decompositions()
    if core:
        table.update(default)
    else:
        meshgrid = (torch.ops.aten.meshgrid.default, torch.ops.aten.meshgrid.indexing)
        table.update({op: default[op] for op in meshgrid if op in default})
    for entry in OPS.values():
        if entry.decompositions is not None:
            table.update(importlib.import_module(entry.decompositions).decompositions(method))
    return table
