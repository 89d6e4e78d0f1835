"""Opset conversion for ``lower(opset=...)``: onnx's version converter, with the nodes we lower kept out of it."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ..core.protos import default_opset
from .model_io import _VALUE_INFO, _first_line

#: Private domain that hides default-domain deformable nodes from the version converter.
_HIDDEN = "deform_onnx.hidden"


def _converter_reason(exc: BaseException) -> str:
    """The converter's C++ assertion as a short phrase, e.g. 'no adapter from version 15 for BatchNormalization'."""
    import re

    found = re.search(r"No Adapter (From|To) Version \$?(\d+) for (\w+)", str(exc))
    if found:
        return f"no adapter {found.group(1).lower()} version {found.group(2)} for {found.group(3)}"
    found = re.search(r"no adapter for (\w+) \((from|to) opset (\d+)\)", str(exc))  # ConversionError's wording
    if found:
        return f"no adapter {found.group(2)} version {found.group(3)} for {found.group(1)}"
    return _first_line(exc)


def _converts(proto: onnx.ModelProto, opset: int) -> bool:
    try:
        _convert_proto(proto, opset, default_opset(proto))
    except Exception:  # noqa: BLE001
        return False
    return True


#: ``ir.Model.meta`` key: the down-conversion adapters :func:`_convert` applied (one line each).
REPAIRS = "deform_onnx.repairs"


def _convert_proto(proto: onnx.ModelProto, target: int, current: int | None) -> tuple[onnx.ModelProto, list]:
    """Down: export's :func:`deform_onnx.conversion.convert_down` (onnx's converter plus the adapters it
    lacks: ``Split`` 18->17, ``Pad`` 18->17, ...); up: onnx's converter alone.
    """
    from onnx import version_converter

    from ..conversion import convert_down

    if current is not None and target < current:
        return convert_down(proto, target)
    return version_converter.convert_version(proto, target), []


def _convert(model: ir.Model, target: int, current: int | None, lowered: list[ir.Node]) -> ir.Model:
    """Convert the default domain to ``target`` with onnx's version converter.

    The default-domain nodes of ``lowered`` (the nodes ``lower`` replaces: ``DeformConv``, TensorRT's
    MSDA plugin node, GridSample nodes that take the gather form) are moved to a private domain for
    the conversion (the converter has no DeformConv adapter below 19, no GridSample adapter below 16)
    and back afterwards; they are lowered at ``target`` later, so no lowering op is ever converted
    (the converter lacks e.g. the GridSample 20->19 and Reshape 14->13 adapters).
    """
    hidden = [node for node in lowered if node.domain in ("", "ai.onnx")]
    for node in hidden:
        node.domain = _HIDDEN
    if hidden:
        model.opset_imports[_HIDDEN] = 1
    ir.external_data.load_to_model(model)  # the converter works on an in-memory proto
    proto = ir.to_proto(model)
    for node in hidden:  # leave the caller's model as it was
        node.domain = ""
    model.opset_imports.pop(_HIDDEN, None)
    try:
        converted_proto, repairs = _convert_proto(proto, target, current)
    except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError/IndexError/...
        if "Failed to serialize proto" in str(e):  # over 2 GiB: onnx's C++ converter takes one message
            raise ValueError(
                f"the model is over protobuf's 2 GiB limit, and onnx's version converter takes it as one message: "
                f"it cannot be converted from opset {current} to {target} here; export it at opset {target} instead "
                "(deform_onnx.export writes large models with external data), or lower it without --opset"
            ) from None
        hint = "choose another opset"
        if current is not None and target < current:
            lowest = next((o for o in range(target + 1, current) if _converts(proto, o)), current)
            hint = f"the lowest opset this model converts to is {lowest}"
        raise ValueError(
            f"onnx's version converter cannot convert this model from opset {current} to {target} "
            f"({_converter_reason(e)}); {hint}"
        ) from None
    proto = converted_proto
    converted = ir.serde.deserialize_model(proto)
    converted.meta[_VALUE_INFO] = model.meta.get(_VALUE_INFO)
    converted.meta[REPAIRS] = [str(r) for r in repairs]
    for node in ir.traversal.RecursiveGraphIterator(converted.graph):
        if node.domain == _HIDDEN:
            node.domain = ""
    converted.opset_imports.pop(_HIDDEN, None)
    return converted
