"""Graph-wide helpers of the rewrite: ONNX shape inference for missing shapes, unique names, used domains."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ..core.protos import dims as proto_dims


def infer_shapes(model: ir.Model) -> list[tuple[ir.Value, bool]]:
    """Fill unknown shapes from ONNX shape inference with data propagation.

    A weight computed in the graph (``ConstantOfShape`` of a ``Shape``-built
    vector, a ``Reshape`` to constant sizes) has no value_info; ONNX's shape
    inference with ``data_prop`` follows such shape computations. Only shapes
    missing in ``model`` are set; nothing else changes.

    Returns:
        Each value given a shape, and whether its type was set too (:func:`forget_shapes` undoes them).
    """
    proto = ir.to_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; the spec check then names the problem
        return []
    shapes = {}
    for vi in inferred.graph.value_info:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = (vi.type.tensor_type.elem_type, proto_dims(vi.type.tensor_type, symbols=True))
    typed = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value.shape is None and value.name in shapes:
                elem, dims = shapes[value.name]
                typed.append((value, value.type is None and bool(elem)))
                if typed[-1][1]:
                    value.type = ir.TensorType(ir.DataType(elem))
                value.shape = ir.Shape(dims)
    return typed


def complete_outputs(model: ir.Model) -> list[str]:
    """Give each graph output without a shape the one ONNX shape inference finds (in place).

    A plugin node's output often has none (a custom op: no inference), and once it is lowered to standard ops
    the output's shape is known; converters need it (onnx2tf: "Output tensors of a Functional model must be the
    output of a TensorFlow `Layer` ... Found: 0.0" for an output without a shape). Values inside the graph keep
    their ``value_info`` as it was.

    Returns:
        The names of the outputs given a shape.
    """
    missing = [v for v in model.graph.outputs if v.shape is None]
    if not missing:
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(ir.to_proto(model), data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort: the outputs stay as they were
        return []
    found = {o.name: o.type.tensor_type for o in inferred.graph.output if o.type.tensor_type.HasField("shape")}
    done = []
    for value in missing:
        tensor = found.get(value.name)
        if tensor is None or not tensor.elem_type:
            continue
        if value.type is None:
            value.type = ir.TensorType(ir.DataType(tensor.elem_type))
        value.shape = ir.Shape(proto_dims(tensor, symbols=True))
        done.append(str(value.name))
    return done


def forget_shapes(typed: list[tuple[ir.Value, bool]]) -> None:
    """Take back what :func:`infer_shapes` set, so the file's ``value_info`` stays as it was."""
    for value, type_set in typed:
        value.shape = None
        if type_set:
            value.type = None


def unique_name(name: str, names: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``, ... : the first not in ``names`` (added to it)."""
    candidate, k = name, 1
    while candidate in names:
        candidate = f"{name}_{k}"
        k += 1
    names.add(candidate)
    return candidate


def all_names(model: ir.Model) -> set[str]:
    """Every value and node name of the model (graph inputs, initializers, node names and outputs)."""
    names = {v.name for v in model.graph.inputs if v.name}
    names |= set(model.graph.initializers)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        names.add(node.name or "")
        names.update(o.name for o in node.outputs if o.name)
    return names


def used_domains(model: ir.Model) -> set[str]:
    """The domains of every node of the model and its functions."""
    used = {n.domain for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    for function in model.functions.values():
        used.add(function.domain)
        used.update(n.domain for n in function)
    return used
