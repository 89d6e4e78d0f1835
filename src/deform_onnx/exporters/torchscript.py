"""TorchScript exporter (``torch.onnx.export(..., dynamo=False)``): a registered symbolic.

``register()`` installs a symbolic for ``torchvision::deform_conv2d`` (and
one for ``aten::grid_sampler``, :mod:`.grid_sample`) at every opset from 11 to
the exporter's maximum; the symbolic drives the chosen lowering through
:class:`TorchScriptBuilder`, an adapter over ``g.op``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..lowering import emit_deform_conv2d, resolve_method
from ..lowering.builder import Builder
from ..semantics import MIN_OPSET

OP_NAME = "torchvision::deform_conv2d"
#: Highest opset of the TorchScript exporter in this torch.
MAX_OPSET: int = torch.onnx._constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET

_SCALAR_TO_NP = {
    "Float": np.float32,
    "Double": np.float64,
    "Half": np.float16,
    "BFloat16": None,
}


class TorchScriptBuilder(Builder):
    """:class:`Builder` over the TorchScript exporter's ``GraphContext``."""

    def __init__(self, g):
        self.g = g
        self.opset = g.opset

    def _emit(self, op_type, inputs, attrs, domain=""):
        while inputs and inputs[-1] is None:  # trailing optionals are simply left out
            inputs.pop()
        if any(i is None for i in inputs):
            inputs = [self.g.op("prim::Constant") if i is None else i for i in inputs]
        kwargs = {}
        for key, value in attrs.items():
            if isinstance(value, np.ndarray):  # a tensor attribute (e.g. ConstantOfShape's value)
                value = torch.from_numpy(np.array(value, copy=True))
            kwargs[f"{key}_{_attr_suffix(value)}"] = value
        name = f"{domain}::{op_type}" if domain else op_type
        return self.g.op(name, *inputs, **kwargs)

    def _constant(self, array):
        return self.g.op("Constant", value_t=torch.from_numpy(np.array(array, copy=True)))

    def static_shape(self, value):
        t = value.type()
        try:
            sizes = t.varyingSizes()
        except RuntimeError:
            return None
        if sizes is None:
            return None
        return tuple(sizes)

    def dtype(self, value):
        try:
            st = value.type().scalarType()
        except RuntimeError:
            return None
        if st is None:
            return None
        return _SCALAR_TO_NP.get(st)


def _attr_suffix(value) -> str:
    if isinstance(value, torch.Tensor):
        return "t"
    if isinstance(value, str):
        return "s"
    if isinstance(value, bool) or isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    if isinstance(value, (list, tuple)):
        return "f" if any(isinstance(v, float) for v in value) else "i"
    raise TypeError(f"unsupported attribute value {value!r}")


def make_symbolic(method: str = "auto"):
    """Return the symbolic function for ``torchvision::deform_conv2d`` using ``method``."""
    from torch.onnx import symbolic_helper

    @symbolic_helper.parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
    def deform_conv2d(
        g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
        groups, offset_groups, use_mask,
    ):
        b = TorchScriptBuilder(g)
        try:
            lowering = resolve_method(method, g.opset)
            if b.dtype(input) is None and b.static_shape(input) is not None:
                raise ValueError(
                    "deform_conv2d: input dtype is not supported for ONNX export "
                    f"({input.type().scalarType()}); use float16, float32 or float64"
                )
            return emit_deform_conv2d(
                b, lowering, input, weight, offset, mask, bias,
                (stride_h, stride_w), (pad_h, pad_w), (dil_h, dil_w), groups, offset_groups, use_mask,
                weight_shape=_weight_shape(g, b, weight),
            )
        except ValueError as exc:
            _keep_error_one_line(exc, g)
            raise

    return deform_conv2d


def traced_output_dtype(g) -> np.dtype | None:
    """The numpy dtype of the traced node's (first) output, or ``None`` when the trace has none."""
    try:
        st = next(iter(g.original_node.outputs())).type().scalarType()
    except (AttributeError, RuntimeError, StopIteration):
        return None
    dt = _SCALAR_TO_NP.get(st)
    return np.dtype(dt) if dt is not None else None


def _weight_shape(g, b: "TorchScriptBuilder", weight) -> tuple[int | None, ...] | None:
    """The weight's shape, completed from the trace when ONNX shape inference lost it.

    A weight computed in ``forward`` (``x.new_ones(C, 1, 1, 1)``, a dynamic
    filter from a Linear layer) has a shape built from ``Shape`` ops; with
    ``dynamic_axes`` the exporter's shape inference may leave all of it
    unknown. The traced op's own input still carries the sizes it had when
    traced; kernel and channel sizes do not change with the dynamic axes.
    """
    shape = b.static_shape(weight)
    if shape is not None and len(shape) == 4 and None not in shape:
        return shape
    try:
        traced = tuple(list(g.original_node.inputs())[1].type().sizes())
    except (AttributeError, RuntimeError, IndexError, TypeError):
        return shape
    if shape is None or len(shape) != len(traced):
        return traced
    return tuple(s if s is not None else t for s, t in zip(shape, traced))


def _keep_error_one_line(exc: BaseException, g) -> None:
    """Stop torch from printing its whole IR graph on this error; keep the nodes around the op in a note.

    torch 2.14's ``setup_onnx_logging`` tests the function ``_jit_is_onnx_log_enabled``
    instead of calling it, so ONNX logging is always on during a TorchScript export
    and any symbolic error first dumps the whole graph ("Torch IR graph at
    exception") on stderr. Turning the log off before raising leaves the
    one-line error; the deformable node and its inputs' producers (what
    ``PYTORCH_JIT_LOG_LEVEL`` would show) go to ``exc.__notes__``, which
    tracebacks and ``deform-onnx export --verbose`` print.
    """
    torch._C._jit_set_onnx_log_enabled(False)
    node = getattr(g, "original_node", None)
    if node is None or not hasattr(exc, "add_note"):
        return
    lines: list[str] = []
    for value in node.inputs():
        producer = value.node()
        if producer.kind() not in ("prim::Param", "prim::Constant"):
            lines.append(str(producer).rstrip())
    lines.append(str(node).rstrip())
    exc.add_note("TorchScript IR around the deformable op:\n" + "\n".join(dict.fromkeys(lines)))


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
    from ..lowering import METHODS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    global _registered_method
    _install(method)
    _registered_method = method


def unregister() -> None:
    """Remove the symbolics registered by :func:`register` (all opsets); torch's own grid_sampler one is back."""
    global _registered_method
    _uninstall()
    _registered_method = None


def _symbolics(method: str) -> dict:
    """TorchScript op name -> (symbolic, opsets): every op of the family at every opset from 11, and the
    ATen ops torch lacks at low opsets (:mod:`.aten_gaps`) only below torch's own symbolic."""
    from . import aten_gaps, grid_sample, msda

    every = range(MIN_OPSET, MAX_OPSET + 1)
    return {
        OP_NAME: (make_symbolic(method), every),
        grid_sample.TORCHSCRIPT_OP: (grid_sample.make_symbolic(method), every),
        msda.TORCHSCRIPT_OP: (msda.make_symbolic(method), every),
        **aten_gaps.SYMBOLICS,
    }


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
