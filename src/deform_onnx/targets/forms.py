"""Graph forms a runtime target asks for: rewrites of the emitted graph, applied before it is checked.

A form changes what the lowerings wrote into something a runtime can load,
at a documented cost; each target names the forms it uses
(:attr:`~deform_onnx.targets.base.Target.forms`), and ``deform-onnx targets``
lists them.

- ``"no NaN guard"`` (:func:`drop_nan_guards`): the standard-op lowerings map
  a NaN sample coordinate to a point outside the image with
  ``Where(Equal(p, p), clipped, outside)`` (``Equal`` is false only for NaN).
  pnnx traces that ``Equal`` as ``torch.eq``, which ncnn has no layer for
  (measured here: "layer torch.eq not exists or registered"). Without the
  guard, finite and infinite offsets give the same numbers (the ``Clip``
  stays), but a NaN offset gives whatever the runtime's ``Clip`` and
  ``GridSample``/``Gather`` make of NaN: runtime-defined values, not 0.
"""

from __future__ import annotations

from typing import Callable

import onnx

__all__ = ["FORMS", "drop_nan_guards", "nan_guards", "apply_forms"]


def _is_default(node) -> bool:
    return node.domain in ("", "ai.onnx")


def nan_guards(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The ``Where(Equal(v, v), a, b)`` nodes of the main graph (NaN guards), in graph order."""
    producer = {o: n for n in model.graph.node for o in n.output}
    found = []
    for node in model.graph.node:
        if node.op_type != "Where" or not _is_default(node):
            continue
        cond = producer.get(node.input[0])
        if cond is not None and cond.op_type == "Equal" and _is_default(cond) and cond.input[0] == cond.input[1]:
            found.append(node)
    return found


def drop_nan_guards(model: onnx.ModelProto) -> int:
    """Replace each NaN guard ``Where(Equal(v, v), a, b)`` by ``a``, in place; returns how many.

    Uses of the guard's output read ``a`` instead; the ``Where`` goes, and
    its ``Equal`` too when nothing else reads it. A guard whose output is a
    graph output is kept (renaming a graph output would change the model's
    interface). Only the main graph is rewritten (the lowerings write no
    subgraphs).
    """
    import onnx_ir as ir

    graph_outputs = {o.name for o in model.graph.output}
    guards = [n for n in nan_guards(model) if n.output[0] not in graph_outputs]
    if not guards:
        return 0
    irm = ir.serde.deserialize_model(model)
    names = {(n.input[0], n.output[0]) for n in guards}
    dropped = 0
    for node in list(irm.graph):
        if node.op_type != "Where" or (node.inputs[0].name, node.outputs[0].name) not in names:
            continue
        equal = node.inputs[0].producer()
        ir.convenience.replace_all_uses_with(node.outputs[0], node.inputs[1])
        irm.graph.remove(node, safe=True)
        if equal is not None and not equal.outputs[0].uses():
            irm.graph.remove(equal, safe=True)
        dropped += 1
    model.CopyFrom(ir.serde.serialize_model(irm))
    return dropped


#: Form name (as shown in ``deform-onnx targets``) -> in-place rewrite returning how many places it changed.
FORMS: dict[str, Callable[[onnx.ModelProto], int]] = {
    "no NaN guard": drop_nan_guards,
}


def apply_forms(model: onnx.ModelProto, forms: tuple[str, ...]) -> dict[str, int]:
    """Apply the named forms to ``model`` in place; ``{form: places changed}``."""
    return {name: FORMS[name](model) for name in forms}
