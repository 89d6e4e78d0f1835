"""A DCNv3 plugin node's attributes, checked and read into a :class:`~.lower.DCNv3Spec` (one reader for every
plugin-node form: mmdeploy's ``TRTDCNv3`` in :mod:`.sources`, ``custom_op::DCNv4_Plugin`` in :mod:`.sources_dcnv4`).
"""

from __future__ import annotations

import onnx_ir as ir

from .lower import DCNv3Spec


def node_spec(
    node: ir.Node,
    where: str,
    *,
    fields: dict[str, str],
    defaults: dict[str, int],
    scale: str,
    step: str,
    inputs: tuple[str, ...],
) -> DCNv3Spec:
    """The spec of ``node``, whose int attributes ``fields`` (its name -> ``DCNv3Spec``'s) default to ``defaults``
    (by its names), float attribute ``scale`` to 1, ``remove_center`` to 0 and ``step`` (no effect on values) to 0.

    Raises:
        ValueError: unknown attributes, wrong attribute types or values, or another number of ``inputs`` than
            named; the message starts with ``where`` (the node).
    """
    known = (*fields, scale, step, "remove_center")
    attrs = {name: attr.value for name, attr in node.attributes.items()}
    unknown = sorted(set(attrs) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown attribute(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if len(node.inputs) != len(inputs) or any(v is None for v in node.inputs):
        raise ValueError(f"{where}: expected {len(inputs)} inputs ({', '.join(inputs)}), got {len(node.inputs)}")
    values = {}
    for name in (*fields, "remove_center", step):
        value = attrs.get(name, defaults.get(name, 0))
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{where}: attribute {name} must be an int, got {value!r}")
        values[name] = value
    offset_scale = attrs.get(scale, 1.0)
    if not isinstance(offset_scale, int | float) or isinstance(offset_scale, bool):
        raise ValueError(f"{where}: attribute {scale} must be a float, got {offset_scale!r}")
    if values["remove_center"] not in (0, 1):
        raise ValueError(f"{where}: remove_center={values['remove_center']} must be 0 or 1")
    try:
        return DCNv3Spec(
            **{ours: values[theirs] for theirs, ours in fields.items()},
            offset_scale=float(offset_scale),
            remove_center=bool(values["remove_center"]),
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
