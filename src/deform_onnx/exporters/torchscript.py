"""TorchScript exporter (``torch.onnx.export(..., dynamo=False)``): registered symbolics.

``register()`` installs the symbolic of every op of the registry that has a torch binding
(:attr:`deform_onnx.ops.registry.OpEntry.binding`: ``torchvision::deform_conv2d``,
``aten::grid_sampler``, ...) at every opset from 11 to the exporter's maximum; each symbolic drives
the chosen lowering through :class:`~deform_onnx.builder.torchscript.TorchScriptBuilder`, an adapter over ``g.op``.
"""

from __future__ import annotations

import contextlib

import torch

from ..core.opsets import TORCHSCRIPT_MIN_OPSET
from ..ops.registry import bindings, check_method
from . import aten_gaps

#: Highest opset of the TorchScript exporter in this torch.
MAX_OPSET: int = torch.onnx._constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET


#: The method of the user's own :func:`register` call, restored after :func:`registered`.
_registered_method: str | None = None


def register(method: str = "auto") -> None:
    """Register the symbolics for every opset from 11 to :data:`MAX_OPSET`.

    ``torchvision::deform_conv2d`` and ``aten::grid_sampler``
    (``F.grid_sample``; torch's own symbolic, 16+ only, is overridden until
    :func:`unregister`), and ``deform_onnx::ms_deform_attn``
    (:mod:`deform_onnx.ops`). ``method`` resolves per op: for grid_sample,
    ``native`` and ``grid_sample`` mean one ``GridSample`` node (16+); every
    method gives ms_deform_attn its one fused lowering (11+). At opset 11 it
    also adds ``aten::outer`` and ``aten::einsum`` (torch's own symbolics
    start at 12; used by transformers' RT-DETR and Mask2Former), see
    :mod:`.aten_gaps`; and what detectors call that torch lacks (SDPA at 11-13,
    ``isin``, ``cummax``/``cummin``, antialiased resize, bool ``eye``), see
    :mod:`.aten_detectors`.

    Args:
        method: ``"auto"``, ``"native"``, ``"grid_sample"`` or ``"gather"``;
            checked against the export's opset when the model is exported.

    Raises:
        ValueError: unknown method.
    """
    check_method(method)
    global _registered_method
    _install(method)
    _registered_method = method


def unregister() -> None:
    """Remove the symbolics registered by :func:`register` (all opsets); torch's own grid_sampler one is back."""
    global _registered_method
    _uninstall()
    _registered_method = None


def _symbolics(method: str) -> dict:
    """TorchScript op name -> (symbolic, opsets): every op of the registry that has a binding, at every
    opset from 11, and the ATen ops torch lacks at low opsets (:mod:`.aten_gaps`) only below torch's own.
    """
    every = range(TORCHSCRIPT_MIN_OPSET, MAX_OPSET + 1)
    table = {}
    for binding in bindings():
        table[binding.TORCHSCRIPT_OP] = (binding.make_symbolic(method), every)
    return {**table, **aten_gaps.SYMBOLICS}


def _install(method: str) -> None:
    for name, (symbolic, opsets) in _symbolics(method).items():
        for opset in opsets:
            torch.onnx.register_custom_op_symbolic(name, symbolic, opset)


def _uninstall() -> None:
    from torch.onnx._internal.torchscript_exporter import registration

    for name, (_, opsets) in _symbolics("auto").items():
        group = registration.registry.get_function_group(name)
        for opset in opsets:
            # Only what is registered: torch warns for each opset otherwise (a second unregister()).
            if group is not None and group._functions.overridden(opset):
                torch.onnx.unregister_custom_op_symbolic(name, opset)
        # torch keeps the emptied function group, and exporting then fails with
        # "min() arg is an empty sequence"; drop it so export fails as before register().
        # (aten::grid_sampler and aten::outer keep torch's own symbolics: their groups stay.)
        group = registration.registry.get_function_group(name)
        if group is not None and not group._functions:
            registration.registry._registry.pop(name, None)


@contextlib.contextmanager
def registered(method: str):
    """Register ``method`` for the duration of a ``with`` block, then restore the user's registration."""
    _install(method)
    try:
        yield
    finally:
        if _registered_method is None:
            _uninstall()
        else:
            _install(_registered_method)
