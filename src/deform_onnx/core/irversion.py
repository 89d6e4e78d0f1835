"""The IR version written into every file: the lowest one the model needs.

Exporters stamp the IR version of the onnx package they were built with (the
dynamo exporter writes IR 10 at every opset), and older runtimes refuse a file
whose IR version is newer than they know even when every op in it is old
enough: ONNX Runtime 1.16.3 fails on the opset-17 grid_sample file with
"Unsupported model IR version: 10, max supported IR version: 9" (measured
here; case c25). Opset 17 needs only IR 8.

What a model needs (``onnx.proto``'s ``Version`` comments):

* each opset import: ``onnx.helper.VERSION_TABLE``, the IR version of the
  first onnx release with that opset (11 -> 6, 12-14 -> 7, 15-18 -> 8,
  19-20 -> 9, 21-22 -> 10, 23 -> 11); custom domains add nothing. (Case c25's
  examples say 18 -> 9 and 20 -> 10; onnx's table, which the case names as the
  authority, says 8 and 9.)
* model-local functions: IR 8; function attribute defaults: IR 9; function
  overloads: IR 10;
* element types: bfloat16 IR 4, float8 IR 9, int4/uint4 IR 10, float4 IR 11,
  float8e8m0 IR 12, int2/uint2 IR 13.

``metadata_props`` on nodes, values, graphs, tensors and functions (IR 10)
carry only the exporters' debug notes (torch's stack traces and module
names); they are dropped from files written below IR 10 instead of raising
the version. The model's own ``metadata_props`` (every IR version) are kept.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

__all__ = ["lowest_ir_version", "apply_ir_version", "apply_ir_version_ir", "check_ir_version", "check_requested"]

#: IR version that introduced ``metadata_props`` on nodes, values, graphs, tensors and functions.
METADATA_IR = 10

#: Element type -> the IR version that introduced it (types known since IR 3 are left out).
_TYPE_IR: dict[int, int] = {TensorProto.BFLOAT16: 4}
for _name, _ir in (
    ("FLOAT8E4M3FN", 9), ("FLOAT8E4M3FNUZ", 9), ("FLOAT8E5M2", 9), ("FLOAT8E5M2FNUZ", 9),
    ("UINT4", 10), ("INT4", 10), ("FLOAT4E2M1", 11), ("FLOAT8E8M0", 12), ("UINT2", 13), ("INT2", 13),
    ("FLOAT6E2M3", 14), ("FLOAT6E3M2", 14),
):  # fmt: skip
    if hasattr(TensorProto, _name):  # older onnx releases lack the newest types
        _TYPE_IR[getattr(TensorProto, _name)] = _ir


def _opsets_ir(opsets: dict[str, int]) -> int:
    ids = [helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    # Custom domains (mmcv, private ones) have no entry: they need nothing beyond IR 3.
    return helper.find_min_ir_version_for(ids, ignore_unknown=True)


def _proto_types(model: onnx.ModelProto) -> set[int]:
    types: set[int] = set()

    def walk_type(t: onnx.TypeProto) -> None:
        kind = t.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            types.add(getattr(t, kind).elem_type)
        elif kind in ("sequence_type", "optional_type"):
            walk_type(getattr(t, kind).elem_type)
        elif kind == "map_type":
            types.add(t.map_type.key_type)
            walk_type(t.map_type.value_type)

    def walk_graph(g: onnx.GraphProto) -> None:
        for v in (*g.input, *g.output, *g.value_info):
            walk_type(v.type)
        types.update(t.data_type for t in g.initializer)
        for node in g.node:
            walk_nodes([node])

    def walk_nodes(nodes) -> None:
        for node in nodes:
            for a in node.attribute:
                if a.HasField("t"):
                    types.add(a.t.data_type)
                types.update(t.data_type for t in a.tensors)
                if a.HasField("g"):
                    walk_graph(a.g)
                for sub in a.graphs:
                    walk_graph(sub)

    walk_graph(model.graph)
    for f in model.functions:
        walk_nodes(f.node)
    return types


def lowest_ir_version(model: onnx.ModelProto | ir.Model) -> int:
    """The lowest IR version ``model`` can be written with (see the module docstring).

    Args:
        model: an ``onnx.ModelProto`` or an ``onnx_ir.Model``.

    Returns:
        An int >= 3. Debug ``metadata_props`` are not counted: they are dropped below IR 10.
    """
    if isinstance(model, ir.Model):
        return _lowest_ir(model)
    need = _opsets_ir({o.domain: o.version for o in model.opset_import})
    if model.functions:
        need = max(need, 8)
    for f in model.functions:
        if f.attribute_proto:
            need = max(need, 9)
        if f.overload:
            need = max(need, 10)
    for t in _proto_types(model):
        need = max(need, _TYPE_IR.get(t, 3))
    return need


def _lowest_ir(model: ir.Model) -> int:
    need = _opsets_ir(dict(model.opset_imports))
    if model.functions:
        need = max(need, 8)
    for f in model.functions.values():
        if any(a.value is not None for a in getattr(f, "attributes", {}).values()):
            need = max(need, 9)
        if f.overload:
            need = max(need, 10)
    types: set[int] = set()
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph in graphs:
        nodes = ir.traversal.RecursiveGraphIterator(graph)
        values = list(getattr(graph, "inputs", [])) + list(getattr(graph, "outputs", []))
        for node in nodes:
            values.extend(node.outputs)
            for a in node.attributes.values():
                if a.type == ir.AttributeType.TENSOR and a.value is not None:
                    types.add(int(a.value.dtype))
        values.extend(getattr(graph, "initializers", {}).values())
        for v in values:
            if v.dtype is not None:
                types.add(int(v.dtype))
    for t in types:
        need = max(need, _TYPE_IR.get(t, 3))
    return need


def check_requested(ir_version: int | None, opset: int) -> None:
    """Fail early (before a slow export) on an ``ir_version`` that ``opset`` alone rules out.

    Raises:
        ValueError: as :func:`check_ir_version`.
    """
    if ir_version is not None:
        check_ir_version(ir_version, _opsets_ir({"": opset}))


def check_ir_version(ir_version: int | None, lowest: int) -> int:
    """The IR version to write: ``lowest`` when ``ir_version`` is ``None``, else ``ir_version`` checked.

    Raises:
        ValueError: ``ir_version`` below what the model needs, or above what
            the installed onnx package knows (``onnx.IR_VERSION``).
    """
    if ir_version is None:
        return lowest
    if not isinstance(ir_version, int) or isinstance(ir_version, bool):
        raise ValueError(f"ir_version must be an int, not {ir_version!r}")
    if ir_version < lowest:
        raise ValueError(
            f"IR version {ir_version} is too old for this model: its opsets and types need IR >= {lowest}; "
            f"pass ir_version >= {lowest} (CLI: --ir-version), or lower the opset"
        )
    if ir_version > onnx.IR_VERSION:
        raise ValueError(
            f"IR version {ir_version} is newer than the installed onnx package knows ({onnx.IR_VERSION}); "
            f"pass ir_version <= {onnx.IR_VERSION}"
        )
    return ir_version


def apply_ir_version(model: onnx.ModelProto, ir_version: int | None = None) -> onnx.ModelProto:
    """Set ``model.ir_version`` in place: the lowest it needs, or ``ir_version`` when given.

    Below IR 10 the IR-10 debug ``metadata_props`` of nodes, values, graphs,
    tensors and functions are cleared (the model's own are kept).

    Returns:
        ``model``.

    Raises:
        ValueError: as :func:`check_ir_version`.
    """
    chosen = check_ir_version(ir_version, lowest_ir_version(model))
    model.ir_version = chosen
    if chosen < METADATA_IR:
        _clear_proto_metadata(model)
    return model


def apply_ir_version_ir(model: ir.Model, ir_version: int | None = None) -> ir.Model:
    """:func:`apply_ir_version` for an ``onnx_ir.Model`` (edited in place and returned)."""
    chosen = check_ir_version(ir_version, _lowest_ir(model))
    model.ir_version = chosen
    if chosen < METADATA_IR:
        graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
        for graph in graphs:
            graph.metadata_props.clear()
            for node in ir.traversal.RecursiveGraphIterator(graph):
                node.metadata_props.clear()
                for v in node.outputs:
                    v.metadata_props.clear()
            for v in (*getattr(graph, "inputs", ()), *getattr(graph, "outputs", ())):
                v.metadata_props.clear()
            for v in getattr(graph, "initializers", {}).values():
                v.metadata_props.clear()
                if v.const_value is not None and hasattr(v.const_value, "metadata_props"):
                    v.const_value.metadata_props.clear()
    return model


def _clear_proto_metadata(model: onnx.ModelProto) -> None:
    def clear_graph(g: onnx.GraphProto) -> None:
        del g.metadata_props[:]
        for v in (*g.input, *g.output, *g.value_info):
            del v.metadata_props[:]
        for t in g.initializer:
            del t.metadata_props[:]
        clear_nodes(g.node)

    def clear_nodes(nodes) -> None:
        for node in nodes:
            del node.metadata_props[:]
            for a in node.attribute:
                if a.HasField("g"):
                    clear_graph(a.g)
                for sub in a.graphs:
                    clear_graph(sub)

    clear_graph(model.graph)
    for f in model.functions:
        del f.metadata_props[:]
        clear_nodes(f.node)
