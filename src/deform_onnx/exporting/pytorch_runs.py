"""The model's own runs that verification compares with: in its own dtype, and as a copy cast to another.

:func:`deform_onnx.exporting.verification.verify` takes its references from here; the size checks
(:mod:`.sizes`, :mod:`.dynamic_check`) and ``check_runtimes`` run the model the same way.
"""

from __future__ import annotations

import torch

from ..runtimes.sessions import input_tensors, output_tensors

#: PyTorch's outputs, flattened as the exporters flatten them: ``[(pytree key path, tensor), ...]``.
Outputs = list[tuple[str, torch.Tensor]]


def upcast_run(model, args: tuple, dtype: torch.dtype) -> tuple[list[torch.Tensor] | None, str | None]:
    """``model`` run as a deep copy cast to ``dtype`` on ``args`` with floating tensors cast to it.

    Returns ``(outputs, None)`` (flattened as :func:`~deform_onnx.runtimes.sessions.output_tensors`) or
    ``(None, reason)`` when the copy cannot run in ``dtype``.

    Raises:
        VerificationError: an output that is neither a tensor nor a Python number.
    """
    outputs, why = copy_run(model, args, dtype)
    return ([t for _, t in outputs] if outputs is not None else None), why


def copy_run(model, args: tuple, dtype: torch.dtype) -> tuple[Outputs | None, str | None]:
    """:func:`upcast_run` with each output's pytree path: ``([(path, tensor), ...], None)`` or ``(None, why)``."""
    import copy

    try:
        twin = copy.deepcopy(model).to(dtype)
        cast = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        with torch.no_grad():
            value = twin(*cast)
    except Exception as exc:  # noqa: BLE001 - a kernel without this dtype, a model that hard-codes dtypes
        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {text}"
    return output_tensors(value), None  # an output it cannot compare is an error, not a copy that "did not run"


def run_pytorch(model, args: tuple) -> None:
    """Run ``model`` on ``args`` as verification does (to learn whether it runs at a size): in its own dtype,
    or, for a float16/bfloat16 model PyTorch has no kernel for, as the float32 copy.

    Raises:
        Exception: the model's own failure (the float32 copy's too, for a low-precision model).
    """
    own, _ = own_run(model, args)
    if own is None and upcast_run(model, args, torch.float32)[0] is None:
        with torch.no_grad():
            model(*args)  # raise the model's own error


def own_run(model, args: tuple) -> tuple[Outputs | None, str | None]:
    """The model's outputs in its own dtype (``[(path, tensor), ...]``), or ``(None, why)`` for a
    float16/bfloat16 model PyTorch cannot run.

    Other models' failures propagate (they are the model's own, not a missing low-precision kernel), as does
    the :class:`VerificationError` of an output that is neither a tensor nor a Python number.
    """
    try:
        with torch.no_grad():
            value = model(*args)
    except Exception as exc:
        low = (torch.float16, torch.bfloat16)
        tensors = [*model.parameters(), *model.buffers(), *input_tensors(args)] if hasattr(model, "parameters") else []
        if not any(t.dtype in low for t in tensors):
            raise
        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {text}"
    return output_tensors(value), None
