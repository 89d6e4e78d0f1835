"""Which deformable ops a model calls: decides whether ``export``'s methods can differ at all.

A model that calls none of them (or only the fused multi-scale deformable
attention op, which every method writes in one form) exports the same graph
with every method, so ``deform-onnx export`` writes one file for it, not one per method.
"""

from __future__ import annotations

#: ATen / custom op name prefixes (as the dispatcher names them) -> op name of
#: ``deform_onnx.lowering.registry.OPS``. ``F.grid_sample`` reaches the dispatcher as
#: ``aten::grid_sampler_2d`` (its ``aten::grid_sampler`` entry is composite).
TORCH_OPS = {
    "torchvision::deform_conv2d": "deform_conv2d",
    "aten::grid_sampler": "grid_sample",
    "deform_onnx::ms_deform_attn": "ms_deform_attn",
}
#: Ops whose every method writes one and the same form (registry: ``ms_deform_attn``'s fused gather).
ONE_FORM = frozenset({"ms_deform_attn"})


def deformable_ops(net, tensors) -> set[str] | None:
    """The ops of :data:`TORCH_OPS` that ``net(*tensors)`` calls (one run, no grad), or ``None`` if unknown.

    ``None`` (the run raised, or the dispatcher hid the calls) means: assume every method may differ.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()
    any_op = [False]

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            any_op[0] = True
            name = func._schema.name
            for prefix, op in TORCH_OPS.items():
                if name.startswith(prefix):
                    seen.add(op)
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), _Record():
            net(*tensors)
    except Exception:  # noqa: BLE001 - the caller already ran the model; unknown means "plan every method"
        return None
    return seen if any_op[0] else None
