"""Small readers of ONNX protos that several layers share (export, conversion, rewrite, targets, quantize)."""

from __future__ import annotations

import onnx


def default_opset(proto: onnx.ModelProto) -> int | None:
    """The model's default-domain (``""`` / ``ai.onnx``) opset; ``None`` when it imports none."""
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def dims(tensor_type: onnx.TypeProto.Tensor, symbols: bool = False) -> list[int | str | None]:
    """A tensor type's dimensions: each size, or for a dimension without one its name (``symbols``) or ``None``."""
    return [
        d.dim_value if d.HasField("dim_value") else ((d.dim_param or None) if symbols else None)
        for d in tensor_type.shape.dim
    ]


def inferred_dims(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Each main-graph value's dimensions (``None`` where not static), from ONNX shape inference.

    Graph inputs, outputs and inferred intermediate values; a value whose rank inference does not find is absent.
    """
    inferred = onnx.shape_inference.infer_shapes(model).graph
    return {
        v.name: dims(v.type.tensor_type)  # type: ignore[misc]  # symbols=False: ints and None only
        for v in (*inferred.input, *inferred.value_info, *inferred.output)
        if v.type.tensor_type.HasField("shape")
    }


def constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Each value of ``graph`` that an initializer or a default-domain ``Constant`` node (its ``value``) holds."""
    found = {t.name: t for t in graph.initializer}
    found.update(
        (n.output[0], a.t)
        for n in graph.node
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
        for a in n.attribute
        if a.name == "value"
    )
    return found


def drop_unused_nodes(model: onnx.ModelProto) -> None:
    """Remove the nodes and initializers no graph output needs (onnx-ir's ``RemoveUnusedNodesPass``), in place."""
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    model.CopyFrom(ir.to_proto(RemoveUnusedNodesPass()(ir.from_proto(model)).model))
