"""Which ops of the registry a model calls: decides whether ``export``'s methods can differ at all.

A model that calls none of them (or only ops that every method writes in one
form, such as the fused multi-scale deformable attention op) exports the same
graph with every method, so ``deform-onnx export`` writes one file for it, not one per method.
"""

from __future__ import annotations


def one_form_ops() -> set[str]:
    """The registry's ops that every method writes in one and the same form (:attr:`OpEntry.one_form`)."""
    from ..ops.registry import OPS

    return {name for name, entry in OPS.items() if entry.one_form}


def deformable_ops(net, tensors) -> set[str] | None:
    """The registry's ops (by :attr:`OpEntry.torch_ops`) that ``net(*tensors)`` calls (one run, no grad).

    ``None`` (the run raised, or the dispatcher hid the calls) means: assume every method may differ.
    ``F.grid_sample`` reaches the dispatcher as ``aten::grid_sampler_2d``: a torch op name is a prefix.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from ..ops.registry import OPS

    prefixes = [(prefix, name) for name, entry in OPS.items() for prefix in entry.torch_ops]
    seen: set[str] = set()
    any_op = [False]

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            any_op[0] = True
            name = func._schema.name
            seen.update(op for prefix, op in prefixes if name.startswith(prefix))
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), _Record():
            net(*tensors)
    except Exception:  # noqa: BLE001 - the caller already ran the model; unknown means "plan every method"
        return None
    return seen if any_op[0] else None
