"""Opset down-conversion of exported models: onnx's version converter plus our adapters.

Why not let ``torch.onnx.export(dynamo=True, opset_version=17)`` convert: torch
builds at opset 18 and hands the model to onnxscript, which calls onnx's C++
version converter below 18; measured on torch 2.14.1 / onnx 1.23, a model with
``torch.chunk`` comes back at opset 17 with a ``Split`` that still carries
opset 18's ``num_outputs`` (an invalid node, found only by the checker), and
when the converter fails outright torch silently keeps opset 18. Called
directly, onnx's converter refuses such models by name ("No Adapter From
Version $18 for Split"; also ``Pad`` 18->17, ``Shape`` 15->14, ``Identity``
16->15, ``Concat`` 13->12, ``BatchNormalization`` 15->14, ``LayerNormalization`` below 17), and it turns the opset-18 reductions
(``ReduceMean``, ``ReduceMax``, ...) into invalid nodes that keep
``noop_with_empty_axes``. So :func:`convert_down` takes the opset-18 build itself:

1. each node whose op changes schema between the build opset and the target
   and that has an adapter in :mod:`.adapters` is replaced by its
   target-opset form, and the new nodes are set aside in a private domain;
2. onnx's version converter converts everything else (it has adapters for
   the reductions' ``axes``, ``Resize``, ``BatchNormalization``, ...);
3. the set-aside nodes return to the default domain.

Each adapter used is reported (:class:`Repair`: op, opset step, reason). An op
that neither can convert raises :class:`ConversionError` naming it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import onnx
import onnx_ir as ir
from onnx_ir import tape as ir_tape
from onnx_ir.passes.common import RemoveUnusedNodesPass

from ..core.protos import default_opset
from .adapters import ADAPTERS, Adapter, Unrepairable

__all__ = ["ADAPTERS", "Adapter", "ConversionError", "Repair", "convert_down"]

#: Domain that holds nodes already in their target form while onnx's converter runs.
_SET_ASIDE = "deform_onnx.converted"


class ConversionError(ValueError):
    """The model cannot be converted to the requested opset (the message names the op and the step)."""


@dataclass(frozen=True)
class Repair:
    """One adapter applied by :func:`convert_down`.

    Attributes:
        name: ``<op>_<from>_<to>``.
        op_type, from_opset, to_opset: the op and the opset step.
        reason: why onnx's converter cannot take this step, and what the adapter writes instead.
        nodes: how many nodes it replaced.
    """

    name: str
    op_type: str
    from_opset: int
    to_opset: int
    reason: str
    nodes: int

    def __str__(self) -> str:
        return f"{self.name} ({self.op_type} opset {self.from_opset}->{self.to_opset}, {self.nodes} node(s)): {self.reason}"


def _since(op_type: str, opset: int) -> int | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None  # the op does not exist yet at that opset


def convert_down(proto: onnx.ModelProto, target: int) -> tuple[onnx.ModelProto, list[Repair]]:
    """Convert ``proto`` (default-domain opset ``>= target``) to opset ``target``.

    Args:
        proto: a model, typically the dynamo exporter's opset-18 build.
        target: the default-domain opset wanted.

    Returns:
        ``(converted model, repairs applied)``; ``proto`` itself is not modified.

    Raises:
        ConversionError: an op that onnx's converter has no adapter for and no
            adapter here can express (the message names the op, the opset step and why).
    """
    source = default_opset(proto)
    if source is None or source == target:
        return proto, []
    if source < target:
        raise ConversionError(f"convert_down takes opset {source} down, not up to {target}")
    model = ir.from_proto(proto)
    used: Counter[Adapter] = Counter()
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if node.domain not in ("", "ai.onnx"):
            continue
        now, then = _since(node.op_type, source), _since(node.op_type, target)
        adapter = ADAPTERS.get((node.op_type, now)) if now is not None else None
        # An adapter writes the op's previous schema: it serves the target only if no later change lies between.
        # (``then`` is None when the op did not exist yet at the target: the adapter writes it out.)
        if now is None or adapter is None or now == then or _since(node.op_type, now - 1) != then:
            continue
        graph = node.graph
        if graph is None:  # the iterator yields the nodes of graphs
            raise ConversionError(f"{node.op_type} node {node.name!r} belongs to no graph")
        tape = ir_tape.Tape(graph)
        try:
            outputs = adapter.fn(node, tape, target)
        except Unrepairable as exc:
            raise ConversionError(
                f"{node.op_type} node {node.name!r} cannot be converted from opset {adapter.from_opset} "
                f"to {adapter.to_opset} ({adapter.name}): {exc}"
            ) from None
        for new_node in tape.nodes:
            new_node.domain, new_node.version = _SET_ASIDE, None
            new_node.metadata_props.update(node.metadata_props)  # the replaced node's source line
        for old, new in zip(node.outputs, outputs):
            new.name, new.shape, new.type = old.name, old.shape, old.type
        ir.convenience.replace_nodes_and_values(graph, node, [node], tape.nodes, node.outputs, outputs)
        used[adapter] += 1
    model.opset_imports[_SET_ASIDE] = 1
    # onnx's converter drops the nodes' metadata_props (the exporter's source lines): put them back by node name
    kept = {n.name: dict(n.metadata_props) for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.name}
    try:
        converted = onnx.version_converter.convert_version(ir.to_proto(model), target)
    except Exception as exc:  # noqa: BLE001 - onnx raises its C++ assertion text as a bare RuntimeError/ValueError
        raise ConversionError(_converter_message(str(exc), source, target)) from None
    model = ir.from_proto(converted)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain == _SET_ASIDE:
            node.domain = ""
        node.metadata_props.update(kept.get(node.name or "", {}))
    del model.opset_imports[_SET_ASIDE]
    # Inputs that the replaced nodes no longer read (e.g. a Reduce's axes) would linger as dead initializers.
    RemoveUnusedNodesPass()(model)
    repairs = [Repair(a.name, a.op_type, a.from_opset, a.to_opset, a.reason, count) for a, count in used.items()]
    return ir.to_proto(model), repairs


def _converter_message(text: str, source: int, target: int) -> str:
    """One line from onnx's converter assertion ("No Adapter From Version $18 for Split")."""
    match = re.search(r"No Adapter (From|To) Version \$(\d+) for (\w+)", text)
    if match:
        direction, version, op = match.groups()
        return (
            f"onnx's version converter has no adapter for {op} ({direction.lower()} opset {version}) "
            f"and deform_onnx has none either: the model cannot go from opset {source} to {target}"
        )
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "unknown error")
    return f"onnx's version converter failed from opset {source} to {target}: {line[:200]}"
