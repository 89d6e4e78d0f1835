"""Discrete choices that differ between PyTorch float32 and float64 (issue 35 item 5).

The float64 rule of :mod:`.verification` passes a float32 file that misses the tolerance when it is about as
far from a float64 run of the model as PyTorch float32 is. That holds for rounding (an ill-conditioned solve
whose float32 results all scatter around the exact one), not for a discrete choice: when top-k, sort or argmax
picks other indices in float32 than in float64 (ties at the example), the references differ by a whole
feature, and a file that agrees with neither passed (a full RT-DETRv2: 2.78 off PyTorch float32, which was
itself 2.77 off float64). :func:`discrete_flip` finds such a choice so that verification refuses instead.
"""

from __future__ import annotations

import torch

#: ATen ops whose integer result is a discrete choice over floating scores, and the index of that result.
CHOICE_OPS = {"topk": 1, "sort": 1, "argmax": 0, "argmin": 0, "max": 1, "min": 1, "kthvalue": 1, "mode": 1}


def discrete_flip(model, args: tuple) -> str | None:
    """Where the model's discrete choices differ between float32 and a float64 copy, or ``None``.

    Runs ``model`` on ``args`` and its float64 copy on float64 inputs, recording the indices each top-k, sort,
    argmax/argmin, max/min over a dim, kthvalue and mode returns (a ``TorchDispatchMode``). When PyTorch float32
    picks other indices than float64 (ties, or scores closer than float32 resolves: RT-DETR's top-k query
    selection), the two references disagree by a whole feature, and an error "within 2x of PyTorch float32's own
    against float64" proves nothing: the first such op is named (``"aten.topk (call 1)"``). A model whose
    float64 copy does not run gives ``None`` (the float64 rule then says it could not run).
    """
    import copy

    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, torch.Tensor]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            at = CHOICE_OPS.get(func._overloadpacket.__name__)
            if at is not None and isinstance(out, tuple | list) and at < len(out):
                self.seen.append((str(func._overloadpacket), out[at].detach().clone()))
            elif at == 0 and isinstance(out, torch.Tensor) and not out.is_floating_point():
                self.seen.append((str(func._overloadpacket), out.detach().clone()))
            return out

    runs = []
    try:
        for m, a in (
            (model, args),
            (
                copy.deepcopy(model).double(),
                tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in args),
            ),
        ):
            with torch.no_grad(), Record() as record:
                m(*a)
            runs.append(record.seen)
    except Exception:  # noqa: BLE001 - no float64 copy: the float64 rule reports that itself
        return None
    f32, f64 = runs
    for n, ((op, i32), (_, i64)) in enumerate(zip(f32, f64, strict=False)):
        if i32.shape != i64.shape or not torch.equal(i32, i64):
            return f"{op} (call {n + 1})"
    return None if len(f32) == len(f64) else f"the number of choice ops run ({len(f32)} vs {len(f64)})"


__all__ = ["CHOICE_OPS", "discrete_flip"]
