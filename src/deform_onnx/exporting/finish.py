"""The last steps of a file before it is verified and written: target repairs, IR version, validation."""

from __future__ import annotations

from pathlib import Path

import onnx

from ..core.atomic_io import write_bytes_atomic
from ..core.errors import ExportError
from ..core.irversion import apply_ir_version
from ..core.protos import default_opset
from ..ops import registry
from .large import ExternalSink
from .options import ExportOptions


def finish(
    proto: onnx.ModelProto, opts: ExportOptions, sink: ExternalSink | None = None
) -> tuple[bytes | str, list[str]]:
    """Apply the target's repairs, check the target's rules, stamp the IR version, validate.

    The IR version is the lowest the opsets need (or ``opts.ir_version``); the graph is checked
    against the runtime target's rules (issue 12's hooks).

    Returns:
        What verification runs: the serialized model, or (over 2 GiB, ``sink``) the path of the
        file beside its data; and the target's repairs, one line each (``"target 'ncnn': ..."``).

    Raises:
        ExportError: the opset is not the requested one, a native node the method replaces remains,
            or the model is not valid ONNX.
        ValueError: the target's rules refuse the graph (without ``force``).
    """
    choice, repaired = opts.choice, []
    if choice is not None:
        # value-preserving rewrites the target needs (targets/repairs.py)
        name = choice.target.name if choice.target is not None else None
        repaired = [f"target {name!r}: {line}" for line in choice.repair_graph(proto)]
        # before the IR stamp: below IR 10 it clears the nodes' metadata, the source lines a refusal names
        choice.check_graph(proto)
    apply_ir_version(proto, opts.ir_version)
    path = sink.save(proto) if sink is not None else None
    _validate(proto, opts.opset, opts.method, path, kept=_class_nodes(choice, opts.opset))
    return (proto.SerializeToString() if path is None else path), repaired


def _class_nodes(choice, opset: int) -> set[str]:
    """The native nodes (``DeformConv``, ``GridSample``) the target's per-class methods write (they stay)."""
    kept: set[str] = set()
    for op, _, method, *_ in choice.class_picks() if choice is not None else ():
        try:
            node = registry.resolve(op, method, opset).node
        except ValueError:  # the opset does not hold it: no call took it (class_methods.lowering_for)
            continue
        kept |= {node} if node is not None else set()
    return kept


def _validate(
    proto: onnx.ModelProto, opset: int, method: str, path: str | None = None, kept: set[str] | None = None
) -> None:
    got = default_opset(proto)
    if got != opset:
        raise ExportError(
            f"the exporter produced opset {got}, not the requested {opset} (its down-conversion failed); "
            f"export at opset {got} or use dynamo=False"
        )
    for node_type in [n for n in _refused_nodes(method, opset) if n not in (kept or ())]:
        left = [n.name or n.op_type for n in proto.graph.node if n.op_type == node_type]
        if left:
            raise ExportError(f"{node_type} nodes remain after lowering with {method!r}: {left}")
    try:
        onnx.checker.check_model(proto if path is None else path, full_check=True)  # a path: external data
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"the exported model is not valid ONNX: {str(exc).splitlines()[0]}") from None


def _refused_nodes(method: str, opset: int) -> list[str]:
    """The native-form nodes (``DeformConv``, ``GridSample``) of the ops whose ``method`` lowering is another form."""
    refused = []
    for op, entry in registry.OPS.items():
        chosen = registry.resolve(op, method, opset)
        refused += [low.node for low in entry.lowerings.values() if low.node is not None and low is not chosen]
    return refused


def write(data: bytes, f) -> Path | None:
    """Write ``data`` to ``f`` (a path: atomically, a temporary file in the same folder, then rename)."""
    if hasattr(f, "write"):
        f.write(data)
        return None
    return write_bytes_atomic(f, data)
