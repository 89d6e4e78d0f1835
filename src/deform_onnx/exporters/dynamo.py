"""Dynamo exporter (``torch.onnx.export(..., dynamo=True)``): a custom translation table.

The dynamo exporter builds its graph at opset ``max(18, requested)`` and
converts down afterwards with onnx's version converter. A translation from
:func:`translation_table` therefore emits ops valid at the build opset, with
the lowering chosen for the *requested* (target) opset, so that the
down-conversion has only ops that exist at the target.
"""

from __future__ import annotations

from ..builder.onnxscript import OnnxScriptBuilder
from ..core.opsets import DYNAMO_BUILD_MIN_OPSET, DYNAMO_DYNAMIC_MIN_OPSET, DYNAMO_MIN_OPSET
from ..ops.registry import bindings, check_method, model_method

#: The bounds of this path (:mod:`deform_onnx.core.opsets` explains each).
BUILD_MIN_OPSET = DYNAMO_BUILD_MIN_OPSET
MIN_OPSET = DYNAMO_MIN_OPSET
DYNAMIC_MIN_OPSET = DYNAMO_DYNAMIC_MIN_OPSET


def _current_build_opset(default: int) -> int:
    """The opset the exporter is building at (read from onnxscript's active evaluator)."""
    try:
        from onnxscript import evaluator

        return int(evaluator.default().opset.version)  # type: ignore[attr-defined]  # OpRecorder keeps the build opset
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
    check_method(method)
    if opset is not None:
        if opset < MIN_OPSET:
            # torch would log the failed conversion and write an opset-18 model instead.
            raise ValueError(
                f"opset {opset} is below {MIN_OPSET}, the lowest opset the dynamo exporter reaches here "
                "(it builds at 18 and onnx's version converter has no Reshape adapter below 14); "
                "export at opset >= 14, or use the TorchScript exporter: deform_onnx.register(), "
                "then torch.onnx.export(..., dynamo=False)"
            )
        model_method(method, opset)  # fail now, not inside the exporter

    from . import aten_detectors

    table: dict = {}
    for binding in bindings():
        table.update(binding.translations(method, opset, _current_build_opset, OnnxScriptBuilder))
    table.update(aten_detectors.dynamo_translations(_current_build_opset, OnnxScriptBuilder))
    return table
