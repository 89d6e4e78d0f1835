"""``torch.linspace`` over a feature-map size: reference points and proposal grids.

Patterns served (each read from the repository's own code):

- Deformable DETR / DINO ``DeformableTransformerEncoder.get_reference_points``
  (fundamentalvision/Deformable-DETR ``models/deformable_transformer.py``):
  ``torch.linspace(0.5, H_ - 0.5, H_)`` per level; ``gen_encoder_output_proposals``:
  ``torch.linspace(0, H_ - 1, H_)``; transformers' ``get_reference_points`` of Deformable DETR and
  Mask2Former, RT-DETR's anchors the same way.
- InternImage ``_get_reference_points`` (OpenGVLab/InternImage ``ops_dcnv3/functions/dcnv3_func.py``):
  ``torch.linspace(pad + 0.5, pad + 0.5 + (H_out - 1) * stride, H_out)``.

``torch.export`` specialises ``steps`` to the example's size (torch 2.14: "your code specialized it
to be a constant") and the TorchScript tracer records it as a constant. Here, when ``steps``,
``start`` or ``end`` is a symbolic or traced size, the values are computed as ATen's CPU kernel does
(``aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp`` ``LinspaceKernel``: ``step = (end - start) /
(steps - 1)``; index ``i < steps // 2`` gives ``start + i * step``, the rest ``end - (steps - 1 - i) *
step``), from an ``arange`` over the size, so the file follows the input's shape.
"""

from __future__ import annotations

import torch

from .rewriters import SizeMode, is_symbolic, is_traced_size, register

_SOURCE = (
    "fundamentalvision/Deformable-DETR models/deformable_transformer.py get_reference_points; "
    "OpenGVLab/InternImage ops_dcnv3/functions/dcnv3_func.py _get_reference_points"
)


def _sized(value) -> bool:
    return is_symbolic(value) or is_traced_size(value)


def _scalar_tensor(value, dtype, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(dtype=dtype, device=device)
    return torch.scalar_tensor(value, dtype=dtype, device=device)


@register("torch.linspace", _SOURCE)
def linspace(
    mode: SizeMode,
    original,
    start,
    end,
    steps,
    *,
    dtype=None,
    device=None,
    out=None,
    layout=None,
    requires_grad=False,
    **kwargs,
):
    """``torch.linspace(start, end, steps)`` (1-D, ``steps`` long, floating ``dtype``) from an ``arange`` over
    ``steps`` when any argument is a symbolic or traced size; ``NotImplemented`` (torch's own) otherwise,
    and for integer dtypes, ``out=`` or ``requires_grad``.
    """
    start, end, steps = mode.scalar(start), mode.scalar(end), mode.scalar(steps)
    if not any(_sized(v) for v in (start, end, steps)) or out is not None or requires_grad or kwargs:
        return NotImplemented
    if layout not in (None, torch.strided):
        return NotImplemented
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point:
        return NotImplemented  # integer linspace rounds differently; no detector code uses it
    if dtype in (torch.float16, torch.bfloat16):
        # ONNX Range has no float16 / bfloat16 (the TorchScript export was invalid: Grounding DINO's float16
        # reference points): the indices as int64, cast (exact: steps is a feature-map size)
        index = torch.arange(steps, device=device).to(dtype)
    else:
        index = torch.arange(steps, dtype=dtype, device=device)
    start_t, end_t = _scalar_tensor(start, dtype, device), _scalar_tensor(end, dtype, device)
    if isinstance(steps, torch.Tensor):  # traced size
        last = steps - 1
        step = (end_t - start_t) / last.clamp(min=1).to(dtype)
        half = torch.clamp(steps // 2, min=1).to(dtype)
    else:
        last = steps - 1
        step = (end_t - start_t) / torch.sym_max(last, 1)
        half = torch.sym_max(steps // 2, 1)  # steps == 1: ATen returns start
    return torch.where(index < half, start_t + step * index, end_t - step * (last - index))
