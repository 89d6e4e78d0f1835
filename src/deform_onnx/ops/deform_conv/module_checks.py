"""Deformable convolution's checks on a torch model: every ``torchvision.ops.DeformConv2d``, before it runs.

The checks themselves are :class:`~.spec.DeformConvSpec`'s; this module applies
them to the modules' arguments and, through forward pre-hooks, to the tensors
they are called with (imports torch). The op registry names this module
(:attr:`~deform_onnx.ops.registry.OpEntry.module_checks`): :func:`check_modules` is its interface.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from ...core.errors import BadModuleInput
from .spec import DeformConvSpec


class BadDeformInput(BadModuleInput):
    """A ``DeformConv2d`` module got arguments or tensors that torchvision cannot take."""


def check_modules(model: torch.nn.Module) -> contextlib.ExitStack:
    """Check every ``torchvision.ops.DeformConv2d`` in ``model`` before running or exporting it.

    Its stride, padding and dilation now, and the shapes of its input, offset
    and mask when it is called (forward pre-hooks, removed when the returned
    stack is closed). Both exporters run the model, and torchvision's kernel
    reports these as an unnamed C++ check (``stride_h: -1 stride_w: -1``) or
    kills the process (stride 0: division by zero).

    Raises:
        ValueError: naming the module and the problem (from :class:`DeformConvSpec`).
    """
    import torchvision

    stack = contextlib.ExitStack()
    for name, module in model.named_modules():
        if not isinstance(module, torchvision.ops.DeformConv2d):
            continue
        where = f"{name or 'model'} (DeformConv2d)"
        try:
            DeformConvSpec(
                in_channels=module.in_channels,
                out_channels=module.out_channels,
                kernel=module.kernel_size,
                stride=module.stride,
                padding=module.padding,
                dilation=module.dilation,
                groups=module.groups,
            )
        except ValueError as exc:
            stack.close()
            raise ValueError(f"{where}: {exc}") from None
        handle = module.register_forward_pre_hook(functools.partial(_check_deform_call, where), with_kwargs=True)
        stack.callback(handle.remove)
    return stack


def _check_deform_call(where: str, module, args: tuple, kwargs: dict) -> None:
    import inspect

    bound = inspect.signature(module.forward).bind(*args, **kwargs).arguments
    x, offset, mask = bound.get("input"), bound.get("offset"), bound.get("mask")

    def dim(d):
        if isinstance(d, torch.Tensor):  # TorchScript tracing: sizes are 0-D tensors (the example's)
            return int(d)
        # Symbolic (dynamic) dims are None: comparing them would add guards in torch.export.
        return d if isinstance(d, int) else None

    def shape(t):
        return None if t is None else tuple(dim(d) for d in t.shape)

    if not isinstance(x, torch.Tensor) or not isinstance(offset, torch.Tensor):
        return
    try:
        DeformConvSpec.from_shapes(
            shape(x),
            tuple(module.weight.shape),
            shape(offset),
            shape(mask) if isinstance(mask, torch.Tensor) else None,
            stride=module.stride,
            padding=module.padding,
            dilation=module.dilation,
            groups=module.groups,
        )
    except ValueError as exc:
        raise BadDeformInput(f"{where}: {exc}") from None
