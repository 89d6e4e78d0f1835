"""The example ``torch.export`` captures with: a dynamic dimension whose example is 1 is captured at 2.

``torch.export`` specialises every dimension whose example size is 0 or 1 (its "0/1
specialisation"): with a batch-1 example and a dynamic batch the capture either fails
("You marked N as dynamic but your code specialized it to be a constant (1)") or, through
torch's ONNX exporter, writes a file that keeps batch 1 in some node (measured on a
Deformable-DETR encoder: "Grid batch size 4 does not match input batch size 8" at batch 2).
Size-oblivious capture (``torch.fx.experimental._config.backed_size_oblivious``) was tried
first and still adds ``N == 1`` through stride checks in reductions (``torch.sum(~mask[:, 0, :], 1)``,
Deformable DETR's ``get_valid_ratio``). Capturing with that dimension doubled (the example
repeated along it) keeps it symbolic; the file is still verified on the caller's own example.
"""

from __future__ import annotations

import torch

from .guards import parameter_names


def widen_unit_dims(model, args: tuple, dynamic_shapes) -> tuple:
    """``args`` with every tensor repeated to size 2 along each dynamic axis whose example size is 1.

    Args:
        model: the module (its ``forward`` names the inputs when ``dynamic_shapes`` is a dict).
        args: positional example inputs.
        dynamic_shapes: ``torch.export`` dynamic shapes (a tuple/list per input, or a dict by name),
            each entry ``None``, ``{axis: Dim}`` or a per-axis list.

    Returns:
        The widened inputs (``args`` itself when nothing needs widening or the form is not understood).
    """
    if dynamic_shapes is None:
        return args
    if isinstance(dynamic_shapes, dict):
        names = parameter_names(model, len(args))
        if names is None:
            return args
        entries = [dynamic_shapes.get(name) for name in names]
    elif isinstance(dynamic_shapes, (list, tuple)):
        entries = list(dynamic_shapes) + [None] * (len(args) - len(dynamic_shapes))
    else:
        return args
    out, changed = [], False
    for arg, axes in zip(args, entries):
        if isinstance(axes, (list, tuple)):
            axes = {a for a, d in enumerate(axes) if d is not None}
        if isinstance(arg, torch.Tensor) and isinstance(axes, (dict, set)):
            for axis in sorted(int(a) for a in axes):
                if 0 <= axis < arg.dim() and arg.shape[axis] == 1:
                    arg, changed = torch.cat([arg, arg], dim=axis), True
        out.append(arg)
    return tuple(out) if changed else args
