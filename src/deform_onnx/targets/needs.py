"""Opsets a model's own calls need on a target: the target's pick is raised, or an explicit lower opset refused.

A target picks one opset for every model (:attr:`Target.opset`), but some calls run on its
runtime only from a later opset: ncnn loads a 5-D ``F.grid_sample`` as GridSample-20 (matched
PyTorch within 4.2e-7, scripts/op_matrix.py), while the call's gather form, which opsets below
20 get, does not load (pnnx maps it to ``torch.unbind``, which ncnn has no layer for). The
target's :attr:`Target.needs` names such calls (:data:`FEATURES`) with the opset they need (and
:data:`EVERY_TARGET` what ONNX itself needs: bfloat16 Conv from opset 22); when
the user gave no opset, :func:`for_model` raises the target's pick to it, and an explicit lower
opset is an :class:`~deform_onnx.core.errors.ExportError` naming that opset, before any export work.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..core.errors import ExportError, MissingKernelError
from .base import Choice


class _GridSampleRanks(TorchFunctionMode):
    """Records the input rank of every ``F.grid_sample`` call while the model runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ranks: set[int] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.grid_sample and args and isinstance(args[0], torch.Tensor):
            self.ranks.add(args[0].dim())
        return func(*args, **(kwargs or {}))


def grid_sample_ranks(model: torch.nn.Module, args: tuple) -> set[int]:
    """Input ranks (4: ``(N, C, H, W)``, 5: ``(N, C, D, H, W)``) of the model's ``F.grid_sample`` calls.

    One forward pass on the example ``args`` (a trailing dict: keyword arguments, as ``torch.onnx``
    takes them) on fake tensors (shapes only, as the dynamo exporter traces: a bfloat16 model runs
    although torchvision has no bfloat16 CPU kernel), else on the real ones; empty when neither runs
    (the export then reports why the model does not run).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    call = args if isinstance(args, tuple) else (args,)
    kwargs = call[-1] if call and isinstance(call[-1], dict) else {}
    call = call[:-1] if kwargs else call
    for fake in (True, False):
        mode = _GridSampleRanks()
        try:
            with torch.no_grad(), warnings.catch_warnings():  # the export shows the model's own warnings
                warnings.simplefilter("ignore")
                if fake:
                    with FakeTensorMode(allow_non_fake_inputs=True) as fm:
                        to_fake = lambda v: fm.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
                        with mode:
                            model(*tree_map(to_fake, call), **tree_map(to_fake, kwargs))
                else:
                    with mode:
                        model(*call, **kwargs)
            return mode.ranks
        except Exception:  # noqa: BLE001 - the scan is a hint; export runs the model and reports its errors
            continue
    return set()


def _bfloat16(model: torch.nn.Module, args) -> bool:
    from ..exporting.bfloat16 import has_bfloat16

    return has_bfloat16(model, args)


#: Model feature (the first item of a :attr:`Target.needs` entry) -> whether ``(model, args)`` has it.
FEATURES: dict[str, Callable[[torch.nn.Module, tuple], bool]] = {
    "5-D grid_sample": lambda model, args: 5 in grid_sample_ranks(model, args),
    "bfloat16": _bfloat16,
}
#: Needs of every target (the ONNX spec's, not a runtime's): applied when no opset was given (an
#: explicit lower one is :func:`deform_onnx.exporting.bfloat16.choose_opset`'s error, as without a target).
EVERY_TARGET: tuple[tuple[str, int, str], ...] = (
    ("bfloat16", 22, "ONNX types Conv and GridSample in bfloat16 from opset 22"),
)


def for_model(choice: Choice, model: torch.nn.Module, args, user_opset: int | None, user_dynamo: bool) -> None:
    """Raise ``choice.opset`` to what the model's calls need on ``choice.target`` (in place).

    ``user_opset``/``user_dynamo``: what the caller passed to ``export``. With no opset given, a
    model with a feature of :attr:`Target.needs` (or of :data:`EVERY_TARGET`: a bfloat16 model
    gets opset 22 on every target, whose own pick is 11 to 19) gets that feature's opset (and the dynamo exporter
    the user asked for, when the target's own pick had sent the export to TorchScript); the target's
    faults are checked at the new opset. Models without those features are not run.

    A model with a feature of :attr:`Target.lacks` (a bfloat16 model for ``onnxruntime``) is refused.

    Raises:
        MissingKernelError: the model has a feature the target's runtime has no kernels for (without ``force``).
        ExportError: an explicit ``opset_version`` below a feature's opset (one line naming it).
        ValueError: the target mishandles the new combination (without ``force``).
    """
    target = choice.target
    if target is None:
        return
    for feature, why, fix in target.lacks:
        if not choice.force and FEATURES[feature](model, args):
            raise MissingKernelError(
                f"target {target.name!r} cannot run a {feature} model ({why}): {fix}; force=True writes it anyway"
            )
    opset = choice.opset if choice.opset is not None else target.opset
    every = EVERY_TARGET if user_opset is None else ()
    for feature, need, why in (*target.needs, *every):
        if opset >= need or not FEATURES[feature](model, args):
            continue
        if user_opset is not None:
            raise ExportError(
                f"target {target.name!r} runs a {feature} only from opset {need}, not {user_opset} ({why}): "
                f"export at opset_version={need} (or leave it unset)"
            )
        from .hooks import _check_faults

        _check_faults(target, choice.method, need, choice.force)
        choice.opset, choice.dynamo, opset = need, user_dynamo, need
        choice.notes.append(f"target {target.name!r}: opset {need} for the model's {feature} ({why})")
