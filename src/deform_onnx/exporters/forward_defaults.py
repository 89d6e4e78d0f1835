"""Non-tensor defaults of ``forward`` bound before the TorchScript exporter traces the model.

torch's TorchScript exporter appends the default of every ``forward`` parameter the example inputs do
not cover to the traced inputs (``_decide_input_format`` in
``torch/onnx/_internal/torchscript_exporter/utils.py``), and the tracer then hands a list default to the
model as tensors: RIFE's ``IFNet.forward(x, scale=[4, 2, 1])`` (hzwer/ECCV2022-RIFE#33; case c35) ends in
``F.interpolate(scale_factor=1. / scale[i])`` with a tensor and fails ("upsample_bilinear2d() received an
invalid combination of arguments"). Python binds those defaults when the model is called with the example
inputs only, as the user calls it and as ``torch.export`` traces it: :func:`bound` makes the TorchScript
exporter see that call.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch


def _unbound_defaults(model: torch.nn.Module, args: tuple) -> tuple[inspect.Signature, list[str]] | None:
    """``forward``'s signature and the parameter names to keep, when a parameter that ``args`` leaves out
    has a default that is neither ``None`` nor a tensor (``None`` when there is none, or no signature).
    """
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None  # *args / **kwargs: torch appends nothing for them either
    keywords = args[-1] if args and isinstance(args[-1], dict) else {}
    n = len(args) - (1 if keywords else 0)
    left = [p for p in params[n:] if p.name not in keywords]
    if not any(p.default is not p.empty and p.default is not None and not isinstance(p.default, torch.Tensor)
               for p in left):  # fmt: skip
        return None
    keep = [p.name for p in params[:n]] + [p.name for p in params[n:] if p.name in keywords]
    return sig.replace(parameters=[sig.parameters[name] for name in keep]), keep


@contextlib.contextmanager
def bound(model: torch.nn.Module, args: tuple) -> Iterator[None]:
    """Inside the block, ``model.forward`` takes only the inputs ``args`` gives (positional tensors, and a
    trailing dict of keyword arguments, as ``torch.onnx.export`` takes them); the other parameters keep
    their Python defaults. Nothing changes for a ``forward`` without such defaults. Undone on exit.
    """
    found = _unbound_defaults(model, args)
    if found is None:
        yield
        return
    sig, names = found
    method = model.forward  # the bound method of the class (or an instance attribute the user set)
    own = "forward" in model.__dict__
    previous = model.__dict__.get("forward")

    first = sum(1 for p in sig.parameters.values() if p.kind == p.POSITIONAL_ONLY)

    def forward(*a, **kw):
        # by name after the positional-only ones: the exporter passes the keyword inputs positionally,
        # in the order of the kept parameters
        return method(*a[:first], **dict(zip(names[first:], a[first:])), **kw)

    forward.__signature__ = sig  # type: ignore[attr-defined]  # what inspect.signature (and torch) read
    model.__dict__["forward"] = forward
    try:
        yield
    finally:
        if own:
            model.__dict__["forward"] = previous
        else:
            del model.__dict__["forward"]
