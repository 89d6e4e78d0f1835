"""Dynamo exporter (``torch.onnx.export(..., dynamo=True)``): a custom translation table.

The dynamo exporter builds its graph at opset ``max(18, requested)`` and
converts down afterwards with onnx's version converter. A translation from
:func:`translation_table` therefore emits ops valid at the build opset, with
the lowering chosen for the *requested* (target) opset, so that the
down-conversion has only ops that exist at the target.
"""

from __future__ import annotations

import torch
import torchvision  # noqa: F401  (registers torch.ops.torchvision.deform_conv2d)

from ..lowering import METHODS, emit_deform_conv2d, resolve_method
from ..lowering.builder import IRValueBuilder

#: The dynamo exporter's own build floor (torch 2.14): lower targets are converted down.
BUILD_MIN_OPSET = 18
#: Lowest target the down-conversion reaches: onnx's version converter has no
#: Reshape adapter from 14 to 13, and every standard-op lowering uses Reshape.
MIN_OPSET = 14
#: Lowest target with dynamic shapes: sizes are read with Shape, which has no
#: 15 -> 14 adapter (torch's own sym_size translation hits the same wall).
DYNAMIC_MIN_OPSET = 15


class OnnxScriptBuilder(IRValueBuilder):
    """:class:`Builder` over onnxscript's tracing evaluator (inside a dynamo translation)."""

    def __init__(self, opset: int):
        self.opset = opset
        import onnxscript

        self._ops = getattr(onnxscript, f"opset{opset}")

    def _emit(self, op_type, inputs, attrs, domain=""):
        while inputs and inputs[-1] is None:
            inputs.pop()
        return getattr(self._ops, op_type)(*inputs, **_ir_tensors(attrs))

    def _constant(self, array):
        import onnx_ir as ir

        return self._ops.Constant(value=ir.tensor(array))


def _ir_tensors(attrs: dict) -> dict:
    """numpy attribute values (tensor attributes) as onnx-ir tensors."""
    import numpy as np
    import onnx_ir as ir

    return {k: ir.tensor(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}


def _current_build_opset(default: int) -> int:
    """The opset the exporter is building at (read from onnxscript's active evaluator)."""
    try:
        from onnxscript import evaluator

        return int(evaluator.default().opset.version)  # OpRecorder keeps the build opset
    except Exception:  # noqa: BLE001 - any other evaluator: fall back to the target
        return default


def translation_table(method: str = "auto", opset: int | None = None) -> dict:
    """Mapping for ``torch.onnx.export(..., dynamo=True, custom_translation_table=...)``.

    Args:
        method: ``"auto"``, ``"native"``, ``"grid_sample"`` or ``"gather"``.
        opset: the ``opset_version`` you export at. Needed below 16 (the
            exporter builds at 18 and converts down, so the lowering must be
            chosen for the target); defaults to the build opset.

    Returns:
        ``{torch.ops.torchvision.deform_conv2d.default: fn}``, plus
        ``aten.grid_sampler`` / ``aten.grid_sampler_2d`` (``F.grid_sample``;
        ``method`` resolves per op: for grid_sample, ``native`` and
        ``grid_sample`` mean one ``GridSample`` node, opset >= 16), and
        ``deform_onnx.ms_deform_attn`` (:mod:`deform_onnx.ops`; one fused
        lowering whatever the method, opset >= 11), and ATen ops torch's torchlib
        lacks (``aten._is_all_true``, ``aten.isin``, ``aten.cummax``/``cummin``:
        :mod:`.aten_detectors`).

    Raises:
        ValueError: unknown method, an opset below :data:`MIN_OPSET` (14; the
            exporter would silently keep opset 18), or a method the opset
            cannot hold (at export time, from inside the translation).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if opset is not None:
        if opset < MIN_OPSET:
            # torch would log the failed conversion and write an opset-18 model instead.
            raise ValueError(
                f"opset {opset} is below {MIN_OPSET}, the lowest opset the dynamo exporter reaches here "
                "(it builds at 18 and onnx's version converter has no Reshape adapter below 14); "
                "export at opset >= 14, or use the TorchScript exporter: deform_onnx.register(), "
                "then torch.onnx.export(..., dynamo=False)"
            )
        resolve_method(method, opset)  # fail now, not inside the exporter

    # Parameter names as in torchvision's op schema: torch 2.9's dispatcher matches them by name.
    def deform_conv2d(
        input, weight, offset, mask, bias, stride_h: int, stride_w: int, pad_h: int, pad_w: int,
        dilation_h: int, dilation_w: int, groups: int, offset_groups: int, use_mask: bool,
    ):
        build = _current_build_opset(opset or BUILD_MIN_OPSET)
        target = opset if opset is not None else build
        lowering = resolve_method(method, target)
        if lowering.min_opset > build:
            raise ValueError(f"method {lowering.name!r} needs opset >= {lowering.min_opset}")
        return emit_deform_conv2d(
            OnnxScriptBuilder(build), lowering, input, weight, offset, mask, bias,
            (stride_h, stride_w), (pad_h, pad_w), (dilation_h, dilation_w), groups, offset_groups, use_mask,
        )

    from . import aten_detectors, grid_sample, msda

    table = {torch.ops.torchvision.deform_conv2d.default: deform_conv2d}
    table.update(grid_sample.translations(method, opset, _current_build_opset, OnnxScriptBuilder))
    table.update(msda.translations(method, opset, _current_build_opset, OnnxScriptBuilder))
    table.update(aten_detectors.dynamo_translations(_current_build_opset, OnnxScriptBuilder))
    return table
