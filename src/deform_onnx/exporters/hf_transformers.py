"""Hugging Face transformers: its size casts, kept symbolic while exporting.

``transformers.utils.generic.torch_int`` (and ``torch_float``) turn a size into a Python
number unless the TorchScript tracer runs: ``int(x)``. Under ``torch.export`` that is a
specialisation (torch 2.14 records ``1 + (H - 1) // 32 == 4`` for RT-DETR's hybrid encoder,
``modeling_rt_detr.py`` ``RTDetrHybridEncoder.forward``: ``build_2d_sincos_position_embedding(
width=torch_int(width), height=torch_int(height))``), and the dynamo file is then either refused
(the guard check) or wrong at another size. While exporting, a symbolic size passes through
unchanged (the function's own rule for the tracer: keep the size in the graph). Read from
transformers 5.24 ``src/transformers/utils/generic.py``.
"""

from __future__ import annotations

import torch

from .rewriters import register_function

_SOURCE = "huggingface/transformers src/transformers/utils/generic.py torch_int / torch_float (modeling_rt_detr.py)"


@register_function("transformers.utils.generic.torch_int", _SOURCE)
def torch_int(original, x):
    """Transformers' ``torch_int(x)``; a ``SymInt`` is returned as it is (the original would specialise it)."""
    if isinstance(x, torch.SymInt):
        return x
    return original(x)


@register_function("transformers.utils.generic.torch_float", _SOURCE)
def torch_float(original, x):
    """Transformers' ``torch_float(x)``; a symbolic number becomes a ``SymFloat`` (the original: ``float(x)``)."""
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return torch.sym_float(x)
    return original(x)
