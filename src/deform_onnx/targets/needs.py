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

from ..core.errors import ExportError, TargetLacksError
from .base import Choice


class _CallScan(TorchFunctionMode):
    """Records what the model calls while it runs: each ``F.grid_sample`` input rank, each antialiased
    ``F.interpolate`` mode, and each registered op's torch op (:attr:`OpEntry.torch_ops
    <deform_onnx.ops.registry.OpEntry.torch_ops>`, e.g. ``torchvision::deform_conv2d``) it calls.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ranks: set[int] = set()
        self.antialiased: set[str] = set()
        self.deformable: set[str] = set()
        from ..ops.registry import OPS

        self._ops = {name for entry in OPS.values() for name in entry.torch_ops}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.grid_sample and args and isinstance(args[0], torch.Tensor):
            self.ranks.add(args[0].dim())
        elif func is F.interpolate and (kwargs.get("antialias") or (len(args) > 6 and args[6])):
            self.antialiased.add(str(kwargs.get("mode", args[3] if len(args) > 3 else "nearest")))
        elif isinstance(func, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
            name = func._qualified_op_name if isinstance(func, torch._ops.OpOverloadPacket) else func.name()
            if name in self._ops:
                self.deformable.add(name)
        return func(*args, **kwargs)


def model_calls(model: torch.nn.Module, args: tuple) -> _CallScan:
    """What the model calls (:class:`_CallScan`), from one forward pass on the example ``args`` (a trailing
    dict: keyword arguments, as ``torch.onnx`` takes them) on fake tensors (shapes only, as the dynamo
    exporter traces: a bfloat16 model runs although torchvision has no bfloat16 CPU kernel), else on the
    real ones; nothing found when neither runs (the export then reports why the model does not run).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    from ..exporters.module_state import Snapshot

    call = args if isinstance(args, tuple) else (args,)
    kwargs = call[-1] if call and isinstance(call[-1], dict) else {}
    call = call[:-1] if kwargs else call
    state = Snapshot.take(model)  # no fake tensor is left in the model's caches (RIFE's grid cache)
    for fake in (True, False):
        mode = _CallScan()
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
            return mode
        except Exception:  # noqa: BLE001 - the scan is a hint; export runs the model and reports its errors
            continue
        finally:
            state.restore()
    return _CallScan()


def grid_sample_ranks(model: torch.nn.Module, args: tuple) -> set[int]:
    """Input ranks (4: ``(N, C, H, W)``, 5: ``(N, C, D, H, W)``) of the model's ``F.grid_sample`` calls
    (:func:`model_calls`).
    """
    return model_calls(model, args).ranks


def _bfloat16(model: torch.nn.Module, args) -> bool:
    from ..exporting.bfloat16 import has_bfloat16

    return has_bfloat16(model, args)


def _sampling(model: torch.nn.Module, args) -> bool:
    calls = model_calls(model, args)
    return bool(calls.ranks or calls.deformable)


#: Model feature (the first item of a :attr:`Target.needs` / :attr:`Target.lacks` entry) -> whether
#: ``(model, args)`` has it. ``"deformable sampling"``: an ``F.grid_sample`` call or a registered op's torch op
#: (``torchvision.ops.deform_conv2d``), the sampling at computed positions that every lowering writes.
FEATURES: dict[str, Callable[[torch.nn.Module, tuple], bool]] = {
    "5-D grid_sample": lambda model, args: 5 in grid_sample_ranks(model, args),
    "bfloat16": _bfloat16,
    "deformable sampling": _sampling,
}
#: Needs of every target (the ONNX spec's, not a runtime's): applied when no opset was given (an
#: explicit lower one is :func:`deform_onnx.exporting.bfloat16.choose_opset`'s error, as without a target).
EVERY_TARGET: tuple[tuple[str, int, str], ...] = (
    ("bfloat16", 22, "ONNX types Conv and GridSample in bfloat16 from opset 22"),
)


def for_model(
    choice: Choice, model: torch.nn.Module, args, user_opset: int | None, user_dynamo: bool, dynamic=None
) -> None:
    """Raise ``choice.opset`` to what the model's calls need on ``choice.target`` (in place), then, for a dynamic
    export (``dynamic``: its dynamic shapes or axes), what they need at dynamic sizes (:func:`for_defaults`).

    ``user_opset``/``user_dynamo``: what the caller passed to ``export``. With no opset given, a
    model with a feature of :attr:`Target.needs` (or of :data:`EVERY_TARGET`: a bfloat16 model
    gets opset 22 on every target, whose own pick is 11 to 19) gets that feature's opset (and the dynamo exporter
    the user asked for, when the target's own pick had sent the export to TorchScript); the target's
    faults are checked at the new opset. Models without those features are not run.

    A model with a feature of :attr:`Target.lacks` (a bfloat16 model for ``onnxruntime``) is refused.

    Raises:
        TargetLacksError: the model has a feature the target's runtime has no kernels for (without ``force``;
            a ``MissingKernelError`` and a ``ValueError``).
        ExportError: an explicit ``opset_version`` below a feature's opset (one line naming it).
        ValueError: the target mishandles the new combination (without ``force``).
    """
    target = choice.target
    if target is None:
        for_defaults(choice, model, args, user_opset, dynamic, user_dynamo)
        return
    for feature, why, fix in target.lacks:
        if not choice.force and FEATURES[feature](model, args):
            raise TargetLacksError(
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
    for_defaults(choice, model, args, user_opset, dynamic, user_dynamo)


#: Needs of the default opset (no opset given), per exporter path: ``(feature, opset, why)``. The
#: feature is checked only for exports with dynamic axes on the dynamo path.
DYNAMIC_DEFAULTS: tuple[tuple[str, int, str], ...] = (
    (
        "antialiased resize",
        18,
        "Resize has antialias from opset 18; below it the antialiased resize is two MatMul by weights "
        "computed at export, for static sizes only (RF-DETR's backbone)",
    ),
)
#: Feature of :data:`DYNAMIC_DEFAULTS` -> whether ``(model, args)`` has it.
DYNAMIC_FEATURES: dict[str, Callable[[torch.nn.Module, tuple], bool]] = {
    "antialiased resize": lambda model, args: bool(model_calls(model, args).antialiased),
}


def for_defaults(
    choice: Choice, model: torch.nn.Module, args, user_opset: int | None, dynamic, user_dynamo: bool = True
) -> None:
    """Raise ``choice.opset`` to what a dynamic export of the model needs when no opset was given (in place).

    ``deform_onnx.export``'s default opset (17, or the target's pick) cannot hold some calls at dynamic
    sizes, though a later opset on the dynamo exporter can (:data:`DYNAMIC_DEFAULTS`): RF-DETR's antialiased
    bicubic resize of its position embedding exports and verifies dynamic at opset 18 (measured,
    scripts/transformers_dynamic_sweep.py), and is refused below it. ``dynamic``: the export's dynamic shapes or
    axes (falsy: none). With ``user_opset`` given, or no dynamic axes, or ``dynamo=False`` (``user_dynamo``), nothing changes (the refusal names opset 18); models
    without such calls are not run. A note goes to ``choice.notes``.

    Raises:
        ValueError: a target mishandles the method at the new opset (without ``force``).
    """
    if user_opset is not None or not dynamic or not user_dynamo:
        return
    if choice.opset is not None:
        opset = choice.opset
    elif choice.target is not None:
        opset = choice.target.opset
    else:
        opset = 19 if choice.method == "native" else 17  # deform_onnx.exporting.api's DEFAULT_(NATIVE_)OPSET
    for feature, need, why in DYNAMIC_DEFAULTS:
        if opset >= need or not DYNAMIC_FEATURES[feature](model, args):
            continue
        if choice.target is not None:
            from .hooks import _check_faults

            _check_faults(choice.target, choice.method, need, choice.force)
        choice.opset, choice.dynamo, opset = need, True, need  # a target's low pick had chosen TorchScript
        choice.notes.append(f"opset {need} (not the default {17 if choice.target is None else choice.target.opset}) "
                            f"for the model's {feature} at dynamic sizes: {why}")  # fmt: skip
