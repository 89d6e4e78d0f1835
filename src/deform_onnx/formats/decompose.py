"""``deform_onnx.decompositions``: the op family as core ATen ops, for torch.export stacks.

Each op folder with a ``decompose`` module (:attr:`~deform_onnx.ops.registry.OpEntry.decompositions`)
gives its entries; they run the op's ONNX lowering through the torch-ops builder
(:mod:`deform_onnx.builder.torch_ops`), so one implementation serves every format.
"""

from __future__ import annotations

import functools
import importlib

from ..ops.registry import METHODS, OPS

__all__ = ["decompositions", "eager_strides"]


def eager_strides(fn):
    """``fn`` (a decomposition) whose tensor outputs have the row-major strides the eager ops give theirs.

    The lowerings end in a ``Transpose`` (``[N, Ho, Wo, C]`` to ``[N, C, Ho, Wo]``), a permuted view in the
    torch-ops builder: channels-last strides, where ``aten.grid_sampler_2d``, torchvision's ``deform_conv2d``
    and ``ms_deform_attn`` return contiguous tensors. The program's later ops were traced on the eager
    strides, and a ``Conv`` after a channels-last input is channels-last too (even at one channel, whose
    strides are "contiguous" as well), so a ``view`` there failed: the Spatial Transformer tutorial's
    ``x.view(-1, 4 * 12 * 12)`` after ``conv1`` and ``max_pool2d`` ("Cannot view a tensor with shape
    [1, 4, 12, 12] and strides (576, 1, 48, 4)"). An output whose strides are not known to be row-major is
    copied to them (``clone(memory_format=torch.contiguous_format)``); the others are returned as they are.
    """
    import torch

    def fix(t):
        if not isinstance(t, torch.Tensor):
            return t
        from torch._prims_common import make_contiguous_strides_for
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        row_major = make_contiguous_strides_for(t.shape)
        if all(statically_known_true(a == b) for a, b in zip(t.stride(), row_major)):
            return t
        return t.clone(memory_format=torch.contiguous_format)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, tuple | list):
            return type(out)(fix(t) for t in out)
        return fix(out)

    return run


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
            entries = importlib.import_module(entry.decompositions).decompositions(method)
            table.update({op: eager_strides(fn) for op, fn in entries.items()})
    return table
